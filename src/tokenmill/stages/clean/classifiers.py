"""Quality classifiers in the clean stage: their config, the models they load by path, and what is wrong with one.

A classifier is a fastText model (`tokenmill quality train`'s `model.bin`, or any `.bin` a user brings, such as
DCLM's) scoring the probability of one label; its score is kept as a column and a keep rule drops the documents
below a threshold, given or computed from the whole input (`top_fraction`: `top_fraction.py`). Models load by path
only, nothing is downloaded, and only once the file, its labels and a self-test pass (`fasttext/binding.py`):
a copy cut short would otherwise score every text near one value. The text is prepared as the model's sidecar says
(`classifier/sidecar.py`), else with `PrepareOptions`' defaults.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Iterator, Optional

from pydantic import AfterValidator, Field, field_validator, model_validator

from tokenmill.classifier.config import check_label
from tokenmill.digest import file_sha256
from tokenmill.config_base import StrictModel
from tokenmill.pipeline.contract import config_paths

log = logging.getLogger(__name__)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
MODEL_KEYS = ("classifiers[].model", "overrides[].classifiers[].model")
"""The clean config's keys that name a classifier's model file (declared in the stage's `paths`)."""


class KeepRule(StrictModel):
    """Which documents a classifier keeps: set exactly one of `threshold` and `top_fraction`."""

    threshold: Optional[float] = Field(default=None, ge=0, le=1)
    """Keep a document scoring at or above this (drop it below, compared in float64); 0 keeps every document and
    only scores them."""
    top_fraction: Optional[float] = Field(default=None, gt=0, le=1)
    """Keep the best-scoring fraction of this rule's pool, in (0, 1]: the documents of the whole stage input that
    resolve to this entry and that the filters before the classifiers kept. A `score` phase before the map finds the
    cut (the score of the ceil(F x N)-th best document, ties with it kept, `text/score_cut.py`), which the map
    applies as a threshold."""

    @model_validator(mode="after")
    def _one_rule(self) -> "KeepRule":
        if (self.threshold is None) == (self.top_fraction is None):
            raise ValueError("set exactly one of threshold and top_fraction, e.g. {threshold: 0.018}")
        return self


class ClassifierConfig(StrictModel):
    """One fastText quality classifier: its name, its model file, the label it scores, and its keep rule."""

    name: str
    """Names the column `<name>_score` and the drop reason `low_<name>_score`: letters, digits and `_`, not
    starting with a digit."""
    model: str
    """The fastText `.bin` (or `.ftz`), relative to the config file's folder; its sha256 is part of the stage's
    identity. Its sidecar (`model.json` beside `model.bin`, any `X.json` beside `X.bin`) gives the preparation."""
    label: str = "__label__hq"
    """The label whose probability is the score (checked against the model's labels before any work)."""
    keep: KeepRule
    """The keep rule, e.g. `{threshold: 0.018}`."""

    @field_validator("name")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"{value!r} is not a name the column {value}_score can take: use letters, digits and _, "
                             f"not starting with a digit (e.g. hq)")
        return value

    _prefixed = field_validator("label")(check_label)

    @property
    def column(self) -> str:
        return f"{self.name}_score"

    @property
    def reason(self) -> str:
        return f"low_{self.name}_score"


def _unique_names(classifiers: list[ClassifierConfig]) -> list[ClassifierConfig]:
    seen: dict[str, int] = {}
    for i, c in enumerate(classifiers):
        if c.name in seen:
            raise ValueError(f"name {c.name!r} is used by [{seen[c.name]}] and [{i}]: each classifier needs its own "
                             f"(it names a column)")
        seen[c.name] = i
    return classifiers


Classifiers = Annotated[list[ClassifierConfig], AfterValidator(_unique_names)]
"""A list of classifiers, their names unique."""


def configured(config: Any) -> Iterator[tuple[str, ClassifierConfig]]:
    """(key, classifier) of every classifier a clean config names: the stage's, then each override's."""
    for i, c in enumerate(config.classifiers):
        yield f"classifiers[{i}]", c
    for j, o in enumerate(config.overrides):
        for i, c in enumerate(o.classifiers or ()):
            yield f"overrides[{j}].classifiers[{i}]", c


def ranked_rules(config: Any) -> list[tuple[str, ClassifierConfig]]:
    """(key, classifier) of every entry with a `top_fraction` rule: each is one pool with its own cut."""
    return [(key, c) for key, c in configured(config) if c.keep.top_fraction is not None]


def disagreement(config: Any) -> str | None:
    """A classifier named twice (the stage's and an override's) with another model or label: one name is one
    score column, so it must be one model's score. A line naming the key, or None."""
    first: dict[str, tuple[str, ClassifierConfig]] = {}
    for key, c in configured(config):
        where, other = first.setdefault(c.name, (key, c))
        if (other.model, other.label) != (c.model, c.label):
            return (f"{key}: classifier {c.name!r} scores {c.label} of {c.model!r} here but {other.label} of "
                    f"{other.model!r} in {where}; one name is one score column: give this one its own name")
    return None


@dataclass
class Classifier:
    """A classifier's model as loaded in a worker, with the preparation its sidecar gives."""

    model: Any
    options: Any
    """`PrepareOptions`."""


def load(path: str, sha256: str | None = None, *, hashed: bool = False) -> Classifier:
    """The model at `path`, checked (with `sha256`: holding those bytes, `fasttext.binding.check_file`; `hashed`:
    the caller just hashed it), and its preparation (`classifier/sidecar.py`); raises ConfigError naming the file."""
    from tokenmill.classifier.sidecar import preparation
    from tokenmill.fasttext.binding import load_model

    options, _ = preparation(path, sha256)
    return Classifier(load_model(path, sha256, hashed=hashed), options)


def load_preparation(path: str) -> Any:
    """The `PrepareOptions` a model's sidecar gives (its defaults without one)."""
    from tokenmill.classifier.sidecar import preparation

    return preparation(path)[0]


def problems(config: Any, resolve_path: Callable[[str], Any]) -> list[str]:
    """What opening the models shows (each path is already known to be a file): not a whole fastText classifier (cut
    short, padded, a damaged header, a failed self-test), a sidecar for another model, no such label. One line per
    problem, naming the key under `stages.clean.`."""
    from tokenmill.errors import ConfigError

    out: list[str] = []
    models: dict[str, Any] = {}
    for key, c in configured(config):
        path = str(resolve_path(c.model))
        if path not in models:
            try:
                models[path] = load(path, file_sha256(path), hashed=True).model  # hashed once, here
            except ConfigError as err:
                models[path] = None
                out.append(f"stages.clean.{key}.model: {err}")
        model = models[path]
        if model is not None and key.startswith("classifiers"):
            _warn_if_edited_otherwise(config, key, path)
        if model is not None and c.label not in (labels := list(model.get_labels())):
            out.append(f"stages.clean.{key}.label: the model {c.model!r} has no label {c.label!r} (its labels: "
                       f"{', '.join(labels[:10])}{', ...' if len(labels) > 10 else ''})")
    return out


def _warn_if_edited_otherwise(config: Any, key: str, path: str) -> None:
    """A warning when the stage's `normalize` or `pii` is not what the model's training text went through (its
    sidecar's): the model then scores text unlike its training text. Not an error: overrides may edit some sources
    otherwise on purpose."""
    from tokenmill.classifier.sidecar import recorded_edits

    edits = recorded_edits(path)
    if edits is None:
        return
    normalize, pii = edits
    if normalize != config.normalize.model_dump(mode="json") or \
            pii != (None if config.pii is None else config.pii.model_dump(mode="json")):
        log.warning("stages.clean.%s.model: the model was trained on text normalized and PII-replaced as its sidecar "
                    "records (normalize %s, pii %s), not as stages.clean.normalize and pii are set; set them the same "
                    "so that a text scores as in training", key, normalize, pii)


def model_files(config: Any, resolve_path: Callable[[str], str]) -> dict[str, str]:
    """Every model path key of `config` (`classifiers[0].model`, `overrides[1].classifiers[0].model`) -> its file."""
    return {key: resolve_path(path) for declared in MODEL_KEYS for key, path in config_paths(config, declared)}
