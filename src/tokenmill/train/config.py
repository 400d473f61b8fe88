"""The training config: one pydantic tree (data, model, guard...) from one YAML file, checked before any rank starts."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from tokenmill.errors import ConfigError
from tokenmill.config_base import StrictModel, expand_path, key_path, load_yaml, resolve
from tokenmill.loader.options import LoaderOptions
from tokenmill.train.fingerprints import FingerprintConfig
from tokenmill.train.guard import GuardConfig
from tokenmill.train.llama import LlamaConfig
from tokenmill.train.model import ModelConfig, model_config
from tokenmill.train.replay import ReplayConfig
from tokenmill.train.watchdog import WatchdogConfig


def is_uri(path: str) -> bool:
    """An object-store location (`s3://...`), not a file path."""
    return "://" in path


class DataConfig(StrictModel):
    """One `tokens.json` and its share of the mixture."""

    path: str
    """A `tokens.json`, or a run folder (its `tokenize/tokens.json` is used); relative to the config file's folder;
    or the same on an object store (`s3://bucket/run`, `gs://...`), streamed through the loader's node cache
    (`loader: {cache_dir, cache_bytes, shuffle_block: file}`). Only where the data is: a checkpoint knows its data
    by content (the loader's fingerprints), so the same files moved or copied elsewhere resume."""
    weight: float = Field(default=1.0, ge=0)
    """Share of this dataset in the mixture (split among its sources by their samples)."""


class TrainConfig(StrictModel):
    """`tokenmill train CONFIG`: an OPT-style or Llama-family decoder on tokenmill's token files, with FSDP2."""

    data: list[DataConfig]
    """The datasets: a tokens.json path, a list of paths, or a list of {path, weight}."""
    weights: dict[str, float] | None = None
    """Mixture weights per source (stream) name instead of per dataset; None uses the dataset weights. Streams not
    named get weight 0 (left out); an unknown name is an error."""
    model: str | dict[str, Any] = "opt-tiny"
    """A preset (`tokenmill.train.model.PRESETS`: opt-tiny, opt-125m, opt-350m, opt-1.3b, opt-2.7b, opt-6.7b,
    llama-tiny, llama-125m, llama-350m, llama-1b); or a preset and fields to change, `{preset: llama-1b,
    document_mask: false}`; or sizes, `{n_layers, d_model, n_heads[, ffn_dim]}` for OPT, `{arch: llama, n_layers,
    d_model, n_heads[, n_kv_heads, ffn_dim, rope_theta, tie_embeddings]}`. `document_mask` (attention within each
    packed document; on for Llama, off for OPT) makes the trainer ask the loader for position ids."""
    dropout: float = Field(default=0.1, ge=0, lt=1)
    """Dropout on attention probabilities and residual branches (none on embeddings), as in OPT. The OPT models'
    only: a Llama-family model has none, and refuses a dropout above 0."""
    seq_len: int = Field(default=2048, gt=0)
    """Tokens per sequence."""
    global_batch_size: int = Field(gt=0)
    """Sequences per optimizer step over all ranks."""
    micro_batch_size: int | None = Field(default=None, gt=0)
    """Sequences per forward pass on one rank (default global_batch_size // world_size); the rest is accumulation."""
    steps: int = Field(gt=0)
    """Optimizer steps in total (a resumed run counts the steps already taken)."""
    lr: float = Field(default=3e-4, gt=0)
    """Peak learning rate, reached after warmup."""
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    """Linear decay ends at lr * min_lr_ratio at the last step (OPT: 10%)."""
    warmup_steps: int = Field(default=0, ge=0)
    """Linear warmup from 0 to lr."""
    weight_decay: float = Field(default=0.1, ge=0)
    """AdamW decay of the Linear weights (not of biases, norms or embeddings)."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas (OPT's)."""
    eps: float = Field(default=1e-8, gt=0)
    """AdamW epsilon."""
    grad_clip: float = Field(default=1.0, gt=0)
    """Clip the global gradient norm to this."""
    seed: int = 0
    """Fixes the initial weights, the data order and dropout (per step, micro-batch and rank)."""
    output: str
    """Checkpoints, metrics.jsonl, events.jsonl and the resolved config (relative to the config file's folder); a
    run whose output holds a checkpoint resumes from it."""
    allow_data_change: bool = False
    """Resume from a checkpoint whose data differ (``--allow-data-change``): the run goes on at the same global
    position of the new data's order, with a warning and a ``data_change`` event in events.jsonl. Off, changed data
    stop the run before any tensor is read, naming each stream that changed."""
    checkpoint_every: int = Field(default=100, gt=0)
    """Steps between checkpoints (and one at the last step)."""
    keep_checkpoints: int = Field(default=3, gt=0)
    """Newest checkpoints kept (plus the newest healthy one)."""
    eval_every: int = Field(default=100, ge=0)
    """Steps between validation losses on the `valid` split (0: never)."""
    eval_batches: int = Field(default=4, gt=0)
    """Global batches of the valid split per evaluation (always the same ones)."""
    loader: LoaderOptions = LoaderOptions()
    """The token loader's options (`tokenmill.loader.options.LoaderOptions`: workers, block shuffle, position ids,
    verification, the cache of a `tokens.json` URI ...), e.g. `{num_workers: 2, shuffle_block: file}`; the
    validation split's loader takes the same, unshuffled."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Compute dtype: auto is bfloat16 (FSDP2 MixedPrecisionPolicy, fp32 reductions) on GPU, float32 on CPU."""
    compile: bool = False
    """torch.compile each block."""
    deterministic: bool = True
    """Deterministic GPU kernels (`tokenmill.train.determinism`): a rerun and a resume give bit-identical losses on a
    GPU as on the CPU. false: the fastest kernels, whose atomics (cuDNN attention's backward) make two runs differ
    in the last bits (2e-5 to 4e-5 in the loss by step 10 on an H200). No effect on the CPU."""
    peak_tflops: float | None = None
    """Peak dense TFLOP/s of one device for MFU; None picks it from the GPU name (A100 312, H100/H200 989)."""
    log_every: int = Field(default=1, gt=0)
    """Steps between progress lines when the output is not a terminal."""
    guard: GuardConfig = Field(default_factory=GuardConfig)
    """Divergence handling (`tokenmill.train.guard.GuardConfig`), its bounds checked here with the rest."""
    fingerprints: FingerprintConfig = Field(default_factory=FingerprintConfig)
    """Per-rank values every step in ranks.jsonl, and flagging of a rank far from the others
    (`tokenmill.train.fingerprints.FingerprintConfig`)."""
    faults: ReplayConfig = Field(default_factory=ReplayConfig)
    """Replay of an anomalous step and its classification as data, hardware or transient, and what a hardware fault
    does (`tokenmill.train.replay.ReplayConfig`)."""
    watchdog: WatchdogConfig = Field(default_factory=WatchdogConfig)
    """The hang watchdog: stop the run, naming the rank that did not arrive and dumping every rank's stack, when no
    step finishes within ``timeout_s`` (`tokenmill.train.watchdog.WatchdogConfig`)."""

    later_fields = ("loader",)

    MOVED: ClassVar[dict[str, str]] = {"num_workers": "loader.num_workers", "reset_position_ids": "loader.position_ids"}
    """Keys that moved into a block: a config that still gives one is told where it went."""

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for old, new in cls.MOVED.items():
                if old in value:
                    block, key = new.split(".")
                    raise ValueError(f"{old} is now {new}: write `{block}: {{{key}: {value[old]!r}}}`".replace(
                        "True", "true").replace("False", "false"))
        return value

    @field_validator("data", mode="before")
    @classmethod
    def _data_forms(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [{"path": value}]
        if isinstance(value, list):
            return [{"path": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: Any) -> Any:
        # The registry's and the model's own checks (a known preset, known fields, sizes that fit), at load: the
        # vocabulary and seq_len do not change what they accept.
        model_config(value, vocab_size=64, max_seq_len=64)
        return value

    @model_validator(mode="after")
    def _cross(self) -> "TrainConfig":
        if not self.data:
            raise ValueError("data: give at least one tokens.json")
        if self.micro_batch_size and self.global_batch_size % self.micro_batch_size:
            raise ValueError(f"global_batch_size {self.global_batch_size} is not a multiple of micro_batch_size "
                             f"{self.micro_batch_size}")
        if self.warmup_steps >= self.steps and self.warmup_steps:
            raise ValueError(f"warmup_steps {self.warmup_steps} must be below steps {self.steps}")
        self._model_fits()
        return self

    def _model_fits(self) -> None:
        """The top-level keys that the model takes from this config: dropout where it has dropout, the loader's
        position ids where it masks documents."""
        mcfg = self.resolved_model(vocab_size=64)
        if not hasattr(mcfg, "dropout") and "dropout" in self.model_fields_set and self.dropout > 0:
            raise ValueError(f"dropout: {self.model!r} has no dropout (Llama trains without); remove dropout or set "
                             "it to 0")
        if mcfg.document_mask and "position_ids" in self.loader.model_fields_set and not self.loader.position_ids:
            raise ValueError("loader.position_ids: false, but the model masks documents (document_mask), which needs "
                             "them: remove loader.position_ids, or set the model's document_mask: false")

    def resolved_model(self, vocab_size: int) -> ModelConfig | LlamaConfig:
        """The model this config trains (`tokenmill.train.model.build_model` makes it): the preset or sizes at
        ``seq_len``, with ``dropout`` where the model has dropout (OPT)."""
        mcfg = model_config(self.model, vocab_size=vocab_size, max_seq_len=self.seq_len)
        return dataclasses.replace(mcfg, dropout=self.dropout) if hasattr(mcfg, "dropout") else mcfg

    @property
    def loader_position_ids(self) -> bool:
        """Whether the loaders yield position ids: asked for (`loader.position_ids`), or needed by the model's
        document mask (the vocabulary is the data's, and does not change the mask)."""
        return self.loader.position_ids or self.resolved_model(vocab_size=64).document_mask

    def resolved_paths(self) -> list[str]:
        """Each dataset's `tokens.json` (a run folder or a folder means the one in it: `tokens_json.locate`); a URI
        as written (the loader finds the index in an object-store folder: `loader.remote.index_uri`)."""
        from tokenmill.tokenize.tokens_json import locate

        return [d.path if is_uri(d.path) else str(locate(d.path)) for d in self.data]


def parse_train_config(data: Any, base_dir: str | os.PathLike = ".") -> TrainConfig:
    """Validate a mapping; relative paths (data, output) are taken from ``base_dir`` (made absolute, so the resolved
    config, which a checkpoint keeps, does not depend on the working directory). Raises ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError("invalid train config: the top level must be a mapping (data, model, steps, ...)")
    try:
        config = TrainConfig.model_validate(data)
    except ValidationError as err:
        lines = [f"  {key_path(e['loc'])}: {e['msg']}" for e in err.errors()]
        raise ConfigError("invalid train config:\n" + "\n".join(lines)) from None
    base = Path(base_dir).resolve()
    problems: list[str] = []

    def fix(key: str, p: str) -> str:
        # As every config path: `~` and `$VAR` expanded, then relative to the config file's folder; a URI is
        # never a file path (`Path` would fold `s3://b` into `s3:/b` under the config's folder).
        try:
            return expand_path(p) if is_uri(p) else str(resolve(p, base))
        except ValueError as err:
            problems.append(f"  {key}: {err}")
            return p

    update: dict[str, Any] = {"output": fix("output", config.output),
                              "data": [d.model_copy(update={"path": fix(f"data[{i}].path", d.path)})
                                       for i, d in enumerate(config.data)]}
    if config.loader.cache_dir is not None:
        update["loader"] = config.loader.model_copy(update={"cache_dir": fix("loader.cache_dir",
                                                                             config.loader.cache_dir)})
    config = config.model_copy(update=update)
    if problems:
        raise ConfigError("invalid train config:\n" + "\n".join(problems))
    # A URI is read when the loader is built (on every rank, naming the object); a local file is checked now.
    missing = [p for p in config.resolved_paths() if not is_uri(p) and not Path(p).is_file()]
    if missing:
        raise ConfigError("invalid train config:\n" + "\n".join(
            f"  data: {p} does not exist (the tokenize stage writes <run>/tokenize/tokens.json)" for p in missing))
    return config


def load_train_config(path: str | os.PathLike, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Read YAML (safe_load only, duplicate keys refused) and validate; ``overrides`` replace top-level keys (command-line flags).

    Relative paths are taken from the config file's folder, as in a pipeline config, never from the working
    directory."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read train config {path}: {err.strerror or err}") from None
    data = load_yaml(text, str(path))  # safe_load, with keys written twice refused
    if isinstance(data, dict) and overrides:
        data = {**data, **overrides}
    return parse_train_config(data, Path(path).parent)
