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


class EarlyStopConfig(StrictModel):
    """Stop a losing variant early: once its interval has stayed worse than the best variant's for `patience`
    consecutive evaluation points, its proxy runs (every seed) train no further (`tokenmill.ablate.early`)."""

    patience: int = Field(default=2, ge=1)
    """Consecutive evaluation points a variant's interval must lie wholly on the worse side of the best variant's
    interval (no overlap) before it is stopped."""
    metric: str | None = None
    """The report's metric the rule reads (`heldout/<source>/bpb`, `heldout/all/bpb`, `<task>/<acc|acc_norm|
    p_correct>`); None: held-out bits per byte pooled over every source (`heldout/all/bpb`, or the one source's)."""
    apply: bool = True
    """Stop the runs. False: every run trains to the end and the report says where the rule would have stopped
    each variant, what that would have saved, and whether it would have been wrong (measuring the rule first)."""


class MixtureConfig(StrictModel):
    """Mixture search (RegMix): random mixtures of the base's sources, one small proxy each, a LightGBM regression
    from weights to the target loss, the predicted best mixture, and a check of it against natural proportions
    (`tokenmill.ablate.mixture`)."""

    sources: list[str] | None = None
    """The base's sources mixed (loader `weights` by source name); None: every source of the base run config."""
    runs: int = Field(default=32, ge=4)
    """Random mixtures, one proxy run each (RegMix: 512 at 1M parameters)."""
    strength: tuple[float, float] = (0.1, 5.0)
    """Dirichlet concentration around the natural proportions: each mixture draws from Dirichlet(natural x s), `s`
    one of 15 values log-spaced over this range (RegMix's `MIN_STRENGH`, `MAX_STRENGH`): small s gives mixtures
    near a corner (one source dominant), large s mixtures near the natural proportions."""
    min_weight: float = Field(default=1e-3, ge=0, lt=0.5)
    """Weights below this in a drawn mixture are set to 0 and the rest renormalised (RegMix's `MINIMUM`)."""
    tokens: int | None = Field(default=None, gt=0)
    """Training tokens of each mixture's proxy; None: `proxy.tokens`. The check runs use `proxy.tokens`."""
    model: str | dict[str, Any] | None = None
    """The mixture runs' model (a `tokenmill train` model, as `proxy.model`); None: `proxy.model`. RegMix searches
    with models far smaller than the one it checks with; the check runs use `proxy.model`."""
    seed: int = 0
    """Seeds the mixtures drawn and the candidates searched; the mixtures' proxies train with the first of `seeds`."""
    target: list[str] | None = None
    """Held-out sources whose pooled bits per byte is minimised; None: every held-out source. Leave out a source
    you do not want the model to be good at (a junk source's own held-out text)."""
    candidates: int = Field(default=100_000, ge=100)
    """Random mixtures scored by the regression in the search (RegMix: 100,000)."""
    top_k: int = Field(default=128, ge=1)
    """The predicted best mixture is the mean of the `top_k` candidates of lowest predicted loss (RegMix: 128)."""
    check_seeds: list[int] | None = None
    """Seeds of the check (the predicted mixture and natural proportions, each trained with `proxy`); None: `seeds`."""
    lightgbm: dict[str, Any] = {}
    """LightGBM parameters over the defaults (`tokenmill.ablate.mixture.LGBM_PARAMS`: RegMix's, with leaves of 2
    samples for a few dozen runs)."""

    @model_validator(mode="after")
    def _ranges(self) -> "MixtureConfig":
        low, high = self.strength
        if not 0 < low <= high:
            raise ValueError(f"strength: {list(self.strength)} is not 0 < low <= high")
        if self.top_k > self.candidates:
            raise ValueError(f"top_k {self.top_k} is more than candidates {self.candidates}; lower top_k")
        if self.sources is not None and len(set(self.sources)) != len(self.sources):
            raise ValueError("sources: a source is named twice")
        if self.sources is not None and len(self.sources) < 2:
            raise ValueError("sources: a mixture needs at least 2 sources")
        return self


class AblateConfig(StrictModel):
    """`tokenmill ablate CONFIG`: which recipe makes the better model, measured with proxy models and intervals."""

    base: str
    """The base run config (a `tokenmill run` YAML), relative to this file's folder."""
    output: str = "ablation"
    """The ablation folder (variants' run folders, proxy runs, evaluations, report), relative to this file."""
    base_name: str = "base"
    """The base's name among the variants."""
    variants: dict[str, dict[str, Any]] = {}
    """Name -> overlay on the base run config, deep-merged: a mapping merges key by key, any other value replaces,
    `null` deletes the key, and `key+: [...]` appends to the base's list (`sources+: [{name: junk, ...}]`). Paths in
    an overlay are relative to the base config's folder, as the base's own. At least one, unless `mixture` is
    given (then none trains the base's proxies: the mixture search alone)."""
    proxy: ProxyConfig = ProxyConfig()
    """The proxy training template."""
    seeds: list[int] = Field(default=[0, 1, 2], min_length=3)
    """Training seeds, the same for every variant (paired runs); at least 3."""
    seed_offsets: dict[str, int] = {}
    """Variant name -> an offset added to each of `seeds` for that variant's proxy runs (its folders keep the
    config's seed names: `seed-<s>`). Default: no offset, every variant trains with the same seeds as the base
    (paired runs: a variant with the base's data trains the very same models). An offset gives a variant runs
    independent of the base's, as a variant with other data has in effect: how the false-positive rate of
    identical data is measured (`benchmarks/ablate_false_positives.py`)."""
    evaluations: EvaluationsConfig = EvaluationsConfig()
    """The evaluations."""
    workers: int = Field(default=1, ge=1)
    """Proxy runs trained at once (processes)."""
    early_stop: EarlyStopConfig | None = None
    """Stop a losing variant early (off by default)."""
    mixture: MixtureConfig | None = None
    """Search a mixture of the base's sources (off by default)."""
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
        if not self.variants and self.mixture is None:
            raise ValueError("variants: none given; give at least one variant, or a mixture block")
        if self.early_stop is not None and not self.variants:
            raise ValueError("early_stop: there are no variants to stop; remove early_stop or add variants")
        unknown = sorted(set(self.seed_offsets) - set(self.names))
        if unknown:
            raise ValueError(f"seed_offsets: {unknown[0]!r} is not a variant (variants: {', '.join(self.names)})")
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


def proxy_train_mapping(config: AblateConfig, data: str, output: str, seed: int, steps: int | None = None
                        ) -> dict[str, Any]:
    """The `tokenmill train` mapping of one proxy run (`steps`: another budget than the proxy's, for the mixture
    search's small runs)."""
    p = config.proxy
    steps = p.steps if steps is None else steps
    return {**p.train, "data": data, "output": output, "seed": seed, "model": p.model, "seq_len": p.seq_len,
            "global_batch_size": p.global_batch_size, "steps": steps, "lr": p.lr,
            "warmup_steps": min(p.warmup_steps, max(steps - 1, 0)), "eval_every": p.eval_every,
            "checkpoint_every": p.eval_every, "keep_checkpoints": 1, "log_every": 10 ** 9}
