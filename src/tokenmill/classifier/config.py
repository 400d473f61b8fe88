"""The `tokenmill quality train` config: positives and negatives as sources, labels, split, fastText options."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import Field, StrictInt, field_validator, model_validator

from tokenmill.errors import ConfigError
from tokenmill.fasttext.model_file import MAX_NGRAM
from tokenmill.pipeline.config import _expand_fields, read_config, validate_config
from tokenmill.config_base import StrictModel, resolve
from tokenmill.sources.config import SourceConfig
from tokenmill.sources.patterns import expand_pattern, matched_files, pattern_problems
from tokenmill.text.normalize import NormalizeConfig
from tokenmill.text.pii import PiiConfig

LABEL_PREFIX = "__label__"
"""fastText's default label prefix: a word starting with it is a label, never a feature."""


def check_label(value: str) -> str:
    """A fastText label: `__label__` followed by a name without spaces (the classifier configs' validator)."""
    if not value.startswith(LABEL_PREFIX) or len(value) == len(LABEL_PREFIX) or any(c.isspace() for c in value):
        raise ValueError(f"{value!r} must be {LABEL_PREFIX} followed by a name without spaces, e.g. {LABEL_PREFIX}hq")
    return value


class PrepareOptions(StrictModel):
    """How a (normalized) text becomes the one line fastText reads: the same in training and in clean."""

    lowercase: bool = True
    """Lower-case the text (DCLM's and FineWeb-Edu's classifiers do); case then carries no signal."""
    max_chars: Optional[int] = Field(default=None, ge=1)
    """Keep only the first `max_chars` characters (after the whitespace runs became one space); None: all of it.
    fastText's cost is per word, so this bounds the cost of scoring a book."""


MAX_DIM = 1024
"""The largest `dim`: fastText's published models use 10 to 300."""
MAX_BUCKET = 10_000_000
"""The most hash buckets: five times fastText's default (2,000,000)."""
MAX_INPUT_FLOATS = 1_000_000_000
"""The most float32 weights `bucket` x `dim` may ask for (4 GB): fastText allocates them all at once, and beyond
the machine's memory it stops with `std::bad_alloc`."""
AUTO = "auto"


class FastTextOptions(StrictModel):
    """fastText supervised training options (names as in fastText's Python API); `thread` is always 1 (see docs)."""

    word_ngrams: int = Field(default=2, ge=1, le=5)
    """Longest word n-gram used as a feature (DCLM's classifier: 2)."""
    dim: int = Field(default=100, ge=1, le=MAX_DIM)
    """Size of the word vectors, at most 1024."""
    epoch: Union[Literal["auto"], int] = AUTO
    """Passes over the training file, or `auto` (the default): enough passes for 25,000 updates on the smaller
    class's training documents, from 5 (fastText's default, right for large sets) to 100 (`train.fit_epochs`). The
    sidecar records the number chosen and why."""
    lr: float = Field(default=0.1, gt=0)
    """Learning rate (fastText's supervised default)."""
    min_count: int = Field(default=1, ge=1)
    """Words seen fewer times than this are left out of the vocabulary."""
    bucket: int = Field(default=2_000_000, ge=1, le=MAX_BUCKET)
    """Hash buckets for word n-grams, at most 10,000,000 (the model's size grows with `bucket` x `dim`)."""
    loss: Literal["softmax", "ns", "hs", "ova"] = "softmax"
    """Loss: `softmax`, `ns` (negative sampling), `hs` (hierarchical softmax) or `ova` (one-vs-all)."""
    minn: int = Field(default=0, ge=0)
    """Shortest character n-gram (0: none, fastText's supervised default)."""
    maxn: int = Field(default=0, ge=0, le=MAX_NGRAM)
    """Longest character n-gram (0: none), at most 12: the most a model may use (`model_file.MAX_NGRAM`)."""

    @model_validator(mode="after")
    def _ngram_range(self) -> "FastTextOptions":
        if self.maxn and self.minn > self.maxn:
            raise ValueError(f"minn {self.minn} is greater than maxn {self.maxn}; lower minn or raise maxn")
        return self

    @field_validator("epoch", mode="before")
    @classmethod
    def _epoch(cls, value: Any) -> Any:
        if value == AUTO or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1000):
            return value
        raise ValueError(f"{value!r} is neither a number of passes from 1 to 1000 nor 'auto'")

    @model_validator(mode="after")
    def _input_size(self) -> "FastTextOptions":
        # fastText sets bucket to 0 when there are neither word nor character n-grams to hash
        if (self.word_ngrams > 1 or self.maxn > 0) and self.bucket * self.dim > MAX_INPUT_FLOATS:
            raise ValueError(f"bucket x dim is {self.bucket:,} x {self.dim} = {self.bucket * self.dim:,} weights "
                             f"({self.bucket * self.dim * 4 / 1e9:,.1f} GB before the vocabulary's), more than "
                             f"{MAX_INPUT_FLOATS:,} (4 GB): lower bucket or dim (bucket: 100000, dim: 16 suit a few "
                             f"thousand documents)")
        return self


class Labels(StrictModel):
    """The fastText labels of the two classes; each starts with `__label__`."""

    positive: str = "__label__hq"
    """Label of the documents to keep (the `positives`); the clean filter scores its probability."""
    negative: str = "__label__lq"
    """Label of the `negatives`."""

    _prefixed = field_validator("positive", "negative")(check_label)

    @model_validator(mode="after")
    def _different(self) -> "Labels":
        if self.positive == self.negative:
            raise ValueError(f"positive and negative are both {self.positive!r}; give the classes different labels")
        return self


class ClassifierTrainConfig(StrictModel):
    """A quality classifier to train: documents of two classes, read by the pipeline's readers."""

    output: str
    """Folder for `model.bin` and `model.json`, relative to the config file's folder."""
    seed: StrictInt = 0
    """Seed of the train/valid split, of the training order and of fastText itself."""
    positives: list[SourceConfig] = Field(min_length=1)
    """Sources of documents of the class to keep (edited prose), as in a run config's `sources`."""
    negatives: list[SourceConfig] = Field(min_length=1)
    """Sources of documents of the class to drop (raw web pages, spam), as in a run config's `sources`."""
    labels: Labels = Labels()
    """The two classes' fastText labels."""
    valid_fraction: float = Field(default=0.1, gt=0.0, lt=1.0)
    """Share of each source's documents held out to measure the model (by a keyed hash of the id), in (0, 1)."""
    normalize: NormalizeConfig = NormalizeConfig()
    """The clean stage's normalization, applied before `prepare`: set it as the clean stage that will apply the
    model sets `stages.clean.normalize`, so that a text scores the same here and there."""
    pii: Optional[PiiConfig] = PiiConfig()
    """The clean stage's PII replacement, applied after `normalize` (null: none), as `stages.clean.pii`: the clean
    stage replaces e-mail addresses, IPs and phone numbers before its later filters see a text."""
    prepare: PrepareOptions = PrepareOptions()
    """How a normalized text becomes fastText's line (recorded in the sidecar, applied again by the clean filter)."""
    fasttext: FastTextOptions = FastTextOptions()
    """fastText's training options."""
    base_dir: str = Field(default=".", exclude=True)
    """Folder relative paths are resolved against (set by `load_train_config`, not in YAML)."""

    @model_validator(mode="after")
    def _unique_sources(self) -> "ClassifierTrainConfig":
        seen: set[str] = set()
        for source in self.sources():
            if source.name in seen:
                raise ValueError(f"source name {source.name!r} is used twice (in positives or negatives); names key "
                                 f"the documents' ids and the split")
            seen.add(source.name)
        return self

    def sources(self) -> list[SourceConfig]:
        """Positives, then negatives."""
        return [*self.positives, *self.negatives]

    def resolve(self, path: str) -> Path:
        """A config path made absolute against the config file's folder, `~` and `$VAR` expanded."""
        return resolve(path, self.base_dir)

    @property
    def output_dir(self) -> Path:
        return self.resolve(self.output)


PATH_FIELDS = ("output", "positives[].paths[]", "positives[].root", "negatives[].paths[]", "negatives[].root")
"""The fields that name a file or folder (`name[]`: each item of a list)."""


def expand_paths(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of a config mapping with `~` and environment variables expanded in every PATH_FIELDS entry, as the
    run config does (its walker, over this config's fields); raises ConfigError naming each unset variable."""
    problems: list[str] = []
    for field in PATH_FIELDS:
        data = _expand_fields(data, field.split("."), "", problems)
    if problems:
        raise ConfigError("invalid config:\n" + "\n".join(problems))
    return data


def parse_train_config(data: Any, base_dir: str | os.PathLike = ".") -> ClassifierTrainConfig:
    """Validate a config mapping, then every path it names; raises ConfigError naming each bad key."""
    return validate_config(ClassifierTrainConfig, data, base_dir, expand_paths, check_paths,
                           "output, positives, negatives, ...")


def load_train_config(path: str | os.PathLike) -> ClassifierTrainConfig:
    """Read and validate a YAML config (safe_load only, a key written twice refused)."""
    return read_config(path, parse_train_config)


def check_paths(config: ClassifierTrainConfig) -> None:
    """Every pattern must match readable files (the run config's rules), no file may be matched by two sources
    (above all not by a positive and a negative), and the output must not be a file; an error names the key."""
    problems = []
    owner: dict[Path, str] = {}
    for group in ("positives", "negatives"):
        for i, source in enumerate(getattr(config, group)):
            for j, pattern in enumerate(source.paths):
                key = f"{group}[{i}].paths[{j}]"
                trouble = pattern_problems(config, pattern)  # type: ignore[arg-type] - needs only `resolve`
                if trouble:
                    problems += [f"  {key}: {t}" for t in trouble]
                elif not expand_pattern(config, pattern):  # type: ignore[arg-type]
                    problems.append(f"  {key}: {pattern!r} matches no file (looked in {config.base_dir})")
            if source.root is not None and not config.resolve(source.root).is_dir():
                problems.append(f"  {group}[{i}].root: {source.root!r} is not a folder")
            if problems:
                continue
            for f in matched_files(config, source):  # type: ignore[arg-type]
                first = owner.setdefault(f, f"{group}[{i}]")
                if first == f"{group}[{i}]":
                    continue
                why = ("a document cannot be both a positive and a negative" if not first.startswith(group) else
                       "it would be read twice")
                problems.append(f"  {group}[{i}].paths: {f} is also matched by {first}; {why}: narrow the patterns")
                break  # one file names the overlap
    if config.output_dir.exists() and not config.output_dir.is_dir():
        problems.append(f"  output: {config.output_dir} is a file, not a folder")
    if problems:
        raise ConfigError("invalid config:\n" + "\n".join(problems))
