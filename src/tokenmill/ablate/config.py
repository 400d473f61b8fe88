"""The ablation config: a base run config, variants as overlays on it, a proxy training template, seeds, evaluations."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from tokenmill.config_base import StrictModel, key_path, load_yaml, resolve
from tokenmill.errors import ConfigError

TASK_FORMATS = ("arc", "piqa", "hellaswag", "hellaswag_text", "winogrande")
"""The multiple-choice formats scored (a subset of the decontaminate stage's `evalsets.PRESETS`, read with gold)."""


class ProxyConfig(StrictModel):
    """The proxy model every (variant, seed) trains: the same model, token budget and evaluation points for all."""

    model: str | dict[str, Any] = "opt-tiny"
    """A `tokenmill train` model: a preset (`opt-tiny`, `llama-tiny`, ...) or a preset with changes."""
    seq_len: int = Field(default=64, gt=0)
    """Tokens per sequence."""
    global_batch_size: int = Field(default=8, gt=0)
    """Sequences per optimizer step."""
    tokens: int = Field(default=64 * 8 * 60, gt=0)
    """Training tokens per run; steps = tokens // (seq_len * global_batch_size)."""
    eval_every: int = Field(default=10, gt=0)
    """Steps between evaluation points (and checkpoints); the last step is always one."""
    lr: float = Field(default=3e-3, gt=0)
    """Peak learning rate."""
    warmup_steps: int = Field(default=4, ge=0)
    """Linear warmup steps."""
    train: dict[str, Any] = {}
    """Any further `tokenmill train` keys (`dropout`, `weight_decay`, `loader`, ...), validated by its config model;
    `data`, `output`, `seed`, `steps` and the keys above are the ablation's own."""

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch_size

    @property
    def steps(self) -> int:
        return self.tokens // self.tokens_per_step

    def eval_steps(self) -> list[int]:
        """The steps at which every run is evaluated: each `eval_every`, and the last."""
        points = list(range(self.eval_every, self.steps + 1, self.eval_every))
        return points if points and points[-1] == self.steps else points + [self.steps]

    @model_validator(mode="after")
    def _budget(self) -> "ProxyConfig":
        if self.steps < 1:
            raise ValueError(f"tokens {self.tokens} is less than one step of seq_len x global_batch_size = "
                             f"{self.tokens_per_step} tokens; raise tokens")
        own = {"data", "output", "seed", "steps", "model", "seq_len", "global_batch_size", "lr", "warmup_steps",
               "eval_every", "checkpoint_every"}
        taken = sorted(own & set(self.train))
        if taken:
            raise ValueError(f"train: {', '.join(taken)} set by the ablation (proxy.{taken[0]} where it is a proxy "
                             f"key); remove it from proxy.train")
        return self


class TaskConfig(StrictModel):
    """A multiple-choice task scored by the log-likelihood of each choice after its context."""

    name: str
    """The task's name in the report (e.g. `arc_easy`)."""
    path: str
    """The eval-set file (JSON lines, or HellaSwag's text format), relative to the ablation config."""
    format: Literal["arc", "piqa", "hellaswag", "hellaswag_text", "winogrande"]
    """How to read it, as the decontaminate stage's presets name them (`evalsets.PRESETS`), with the gold answer."""
    max_items: int | None = Field(default=200, ge=1)
    """Items scored: the first this many of the file (None: all)."""

    @field_validator("name")
    @classmethod
    def _plain(cls, value: str) -> str:
        if not value or "/" in value:
            raise ValueError(f"{value!r}: a task name is not empty and has no `/` (the report's metrics are "
                             f"`<task>/<metric>`)")
        return value


class HeldOutConfig(StrictModel):
    """Held-out loss per domain (source) on documents that no variant trains on."""

    enabled: bool = True
    """Evaluate held-out bits per byte per source."""
    max_docs_per_source: int = Field(default=100, ge=1)
    """Held-out documents per source, those with the smallest keyed hash of their id."""


class EvaluationsConfig(StrictModel):
    """What every run is scored on at every evaluation point."""

    heldout: HeldOutConfig = HeldOutConfig()
    """Held-out loss per domain (bits per byte: comparable across tokenizers)."""
    tasks: list[TaskConfig] = []
    """Multiple-choice tasks (`acc`, `acc_norm`, probability of the correct answer)."""

    @field_validator("tasks")
    @classmethod
    def _unique(cls, value: list[TaskConfig]) -> list[TaskConfig]:
        names = [t.name for t in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"task name {twice[0]!r} is used twice")
        return value


class AblateConfig(StrictModel):
    """`tokenmill ablate CONFIG`: which recipe makes the better model, measured with proxy models and intervals."""

    base: str
    """The base run config (a `tokenmill run` YAML), relative to this file's folder."""
    output: str = "ablation"
    """The ablation folder (variants' run folders, proxy runs, evaluations, report), relative to this file."""
    base_name: str = "base"
    """The base's name among the variants."""
    variants: dict[str, dict[str, Any]] = Field(min_length=1)
    """Name -> overlay on the base run config, deep-merged: a mapping merges key by key, any other value replaces,
    `null` deletes the key, and `key+: [...]` appends to the base's list (`sources+: [{name: junk, ...}]`). Paths in
    an overlay are relative to the base config's folder, as the base's own."""
    proxy: ProxyConfig = ProxyConfig()
    """The proxy training template."""
    seeds: list[int] = Field(default=[0, 1, 2], min_length=3)
    """Training seeds, the same for every variant (paired runs); at least 3."""
    evaluations: EvaluationsConfig = EvaluationsConfig()
    """The evaluations."""
    workers: int = Field(default=1, ge=1)
    """Proxy runs trained at once (processes)."""
    bootstrap: int = Field(default=2000, ge=100)
    """Bootstrap resamples for the pairwise intervals."""
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    """Coverage of every interval."""
    base_dir: str = Field(default=".", exclude=True)
    """This file's folder (set when loaded)."""

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError("seeds must be distinct")
        return value

    @model_validator(mode="after")
    def _names(self) -> "AblateConfig":
        if self.base_name in self.variants:
            raise ValueError(f"variants: {self.base_name!r} is the base's name (base_name); rename the variant")
        for name in self.names:  # each a folder name under the ablation folder: no separator, no `..`
            if not name or "/" in name or "\\" in name or name.startswith((".", "_")):
                raise ValueError(f"variants: {name!r} is not a usable folder name")
        return self

    @property
    def names(self) -> list[str]:
        """Every variant's name, the base first."""
        return [self.base_name, *self.variants]

    def resolve(self, path: str) -> Path:
        return resolve(path, self.base_dir)

    @property
    def output_dir(self) -> Path:
        return self.resolve(self.output)

    @property
    def base_path(self) -> Path:
        return self.resolve(self.base)


def deep_merge(base: Any, overlay: Any) -> Any:
    """`overlay` merged onto `base`: mappings key by key, `None` deletes, `key+` appends to a list, else replaced."""
    if not isinstance(overlay, dict) or not isinstance(base, dict):
        return copy.deepcopy(overlay)
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(key, str) and key.endswith("+"):
            name = key[:-1]
            if not isinstance(value, list) or not isinstance(out.get(name, []), list):
                raise ConfigError(f"{key}: appends a list to a list; {name!r} or the value is not a list")
            out[name] = [*out.get(name, []), *copy.deepcopy(value)]
        elif value is None:
            out.pop(key, None)
        else:
            out[key] = deep_merge(out.get(key), value)
    return out


def load_ablate_config(path: str | os.PathLike) -> AblateConfig:
    """Read and validate an ablation config (YAML, keys written twice refused); raises ConfigError naming each key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read ablation config {path}: {err.strerror or err}") from None
    data = load_yaml(text, str(path))
    if not isinstance(data, dict):
        raise ConfigError("invalid ablation config: the top level must be a mapping (base, variants, proxy, seeds)")
    try:
        return AblateConfig.model_validate({**data, "base_dir": str(path.parent.resolve())})
    except ValidationError as err:
        lines = [f"  {key_path(e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in err.errors()]
        raise ConfigError("invalid ablation config:\n" + "\n".join(lines)) from None


@dataclass(frozen=True)
class Variant:
    """One variant's run config: its mapping (output set to its folder in the ablation) and its folder."""

    name: str
    data: dict[str, Any]
    base_dir: Path
    run_dir: Path


def base_mapping(config: AblateConfig) -> dict[str, Any]:
    """The base run config's mapping as its file holds it."""
    try:
        text = config.base_path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"base: cannot read {config.base_path}: {err.strerror or err}") from None
    data = load_yaml(text, str(config.base_path))
    if not isinstance(data, dict):
        raise ConfigError(f"base: {config.base_path} is not a run config (its top level is not a mapping)")
    return data


def variants(config: AblateConfig) -> list[Variant]:
    """Every variant's run config mapping, the base first; each writes to `<output>/runs/<name>`."""
    base = base_mapping(config)
    out = []
    for name in config.names:
        merged = base if name == config.base_name else deep_merge(base, config.variants[name])
        run_dir = config.output_dir / "runs" / name
        out.append(Variant(name, {**merged, "output": str(run_dir)}, config.base_path.parent, run_dir))
    return out


def proxy_train_mapping(config: AblateConfig, data: str, output: str, seed: int) -> dict[str, Any]:
    """The `tokenmill train` mapping of one proxy run."""
    p = config.proxy
    return {**p.train, "data": data, "output": output, "seed": seed, "model": p.model, "seq_len": p.seq_len,
            "global_batch_size": p.global_batch_size, "steps": p.steps, "lr": p.lr,
            "warmup_steps": min(p.warmup_steps, max(p.steps - 1, 0)), "eval_every": p.eval_every,
            "checkpoint_every": p.eval_every, "keep_checkpoints": 1, "log_every": 10 ** 9}
