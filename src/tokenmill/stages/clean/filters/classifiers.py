"""The classifier filter: fastText quality classifiers in the clean stage, their config, the models they load by
path, and what is wrong with one.

A classifier is a fastText model (`tokenmill quality train`'s `model.bin`, or any `.bin` a user brings, such as
DCLM's) scoring the probability of one label; its score is kept as a column and a keep rule drops the documents
below a threshold, given or computed from the whole input (`top_fraction`: `top_fraction.py`). Models load by path
only, nothing is downloaded, and only once the file, its labels and a self-test pass (`fasttext/binding.py`):
a copy cut short would otherwise score every text near one value. The text is prepared as the model's sidecar says
(`classifier/sidecar.py`), else with `PrepareOptions`' defaults.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
from pydantic import AfterValidator, Field, field_validator, model_validator

from tokenmill.classifier.config import check_label
from tokenmill.digest import file_sha256
from tokenmill.config_base import StrictModel
from tokenmill.pipeline.contract import config_paths
from tokenmill.stages.clean.filter import Batch, Case, Filter, Setting
from tokenmill.text.score_histogram import BINNING, QUANTILES, bin_counts, histogram_rows, quantile

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


class ClassifierFilter(Filter):
    """fastText quality classifiers (`classifiers.py`): each scores EVERY document, kept or already dropped, into
    `<name>_score`, and drops the still-kept ones below its threshold as `low_<name>_score`: the threshold given,
    or the cut of a `top_fraction` rule (`batch.cuts`, computed by the `score` phase, `top_fraction.py`).

    Its columns and reasons depend on the config, so `build` declares them on the instance: one per classifier name
    in the stage's list and the overrides' lists (none: the filter adds nothing). Documents an earlier filter
    dropped are scored too, so that an audit sees what the classifier thinks of them (what the heuristics and the
    model disagree on): this costs fastText's time on the whole input instead of the kept part (docs/clean.md).
    A document whose source or subset has no such classifier (an override's list without it) gets NaN."""

    name = "classifiers"
    order = 100
    settings = Setting("classifiers", Classifiers, [], doc=(
        "fastText quality classifiers, last in the chain: each scores every document (column `<name>_score`) and "
        "drops the kept ones below its threshold (`low_<name>_score`), e.g. `[{name: hq, model: model/model.bin, "
        "keep: {threshold: 0.018}}]`, or below the cut that keeps the best fraction of the input (`keep: "
        "{top_fraction: 0.1}`, found by a `score` phase before the map). In an override, in place of the stage's "
        "list (`[]`: none), e.g. the same model with a lower threshold for a source of short texts."))
    paths = MODEL_KEYS

    def __init__(self) -> None:
        super().__init__()
        self.keys: dict[str, str] = {}
        """Each configured model path (as written) -> the config key that names it (`classifiers[0].model`)."""
        self.loaded: dict[str, Classifier] = {}
        self.config: Any = None

    @classmethod
    def build(cls, config: Any, overrides: Sequence[Any]) -> "ClassifierFilter":
        f = cls()
        f.config = config
        names: dict[str, None] = {}
        for key, c in configured(config) if hasattr(config, "classifiers") else ():
            names.setdefault(c.name)
            f.keys.setdefault(c.model, f"{key}.model")
        f.drop_reasons = tuple(f"low_{n}_score" for n in names)
        f.adds = tuple(pa.field(f"{n}_score", pa.float32()) for n in names)
        f.cases = {f"low_{n}_score": Case(WEB_TEXT, settings=functools.partial(tiny_classifier, n)) for n in names}
        return f

    @classmethod
    def check(cls, config: Any) -> str | None:
        """A name given two models or labels, or whose column another filter adds."""
        problem = disagreement(config)
        if problem is not None:
            return problem
        from tokenmill.stages.clean.chain import chain_adds, chain_filters

        taken = {f.name for f in chain_adds(chain_filters())}
        for key, c in configured(config):
            if c.column in taken:
                return (f"{key}: classifier name {c.name!r}: its column {c.column} is already one of the clean stage's "
                        f"columns; choose another name")
        return None

    def setup(self, paths: Mapping[str, str | None]) -> None:
        for model, key in self.keys.items():
            if paths.get(key) is not None:  # the stage gives every model's file; else loaded by its path on first use
                # With the sha256 the stage's identity recorded on the driver, after the driver's full check: the
                # worker refuses other bytes, and reads every weight again only if this node has not checked them.
                self.loaded[model] = load(paths[key], paths.get(f"{key}.sha256"))

    def start(self, batch: Batch) -> None:
        for column in self.adds:
            batch.columns[column.name] = np.full(len(batch), np.nan, dtype=np.float32)

    def run(self, batch: Batch, settings_of) -> None:
        from tokenmill.classifier.score import score_texts

        rules: dict[int, str] = {}
        for settings, rows in self.groups(batch, settings_of, list(range(len(batch)))):
            at = np.asarray(rows, dtype=np.int64)
            texts = [batch.texts[i] for i in rows]
            sources = [batch.sources[i] for i in rows]
            # A top_fraction rule's pool: what the filters before the classifiers kept, whatever the others drop.
            pool = np.fromiter((batch.reasons[i] is None for i in rows), dtype=bool, count=len(rows))
            for c in settings:
                loaded = self.loaded.get(c.model) or self._load(c)
                scores = score_texts(loaded.model, texts, loaded.options, c.label)
                batch.columns[c.column][at] = scores
                threshold = c.keep.threshold
                if c.keep.top_fraction is not None:
                    # A rule is named by its entry's config key; the settings resolve to these same objects.
                    rules = rules or {id(e): key for key, e in configured(self.config)}
                    rule = rules[id(c)]
                    if batch.cuts is None:  # the score phase: rank only
                        batch.ranked[rule] = scores[pool]
                        continue
                    threshold = batch.cuts[rule]
                below = scores.astype(np.float64) < threshold
                kept = np.fromiter((batch.reasons[i] is None for i in rows), dtype=bool, count=len(rows))
                _count(batch, c.name, sources, scores, below, below & kept, threshold)
                self.decide(batch, rows, [c.reason if b else None for b in below & kept])

    def _load(self, c: ClassifierConfig) -> Classifier:
        # A filter run without the stage's setup (a test on one batch): the model by its path as written.
        self.loaded[c.model] = load(c.model)
        return self.loaded[c.model]

    def report(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        """Per classifier and source: documents scored, below the threshold, dropped, the thresholds applied, the
        score histogram and quantiles read from it (nothing when no classifier is configured)."""
        if "classifiers" not in stats:
            return {}
        out, summary = {}, []
        for name, by_source in sorted(stats["classifiers"].items()):
            sources = {}
            for source, e in sorted(by_source.items()):
                percent = round(100.0 * e["dropped"] / e["scored"], 3) if e["scored"] else 0.0
                qs = {f"p{round(q * 100):02d}": quantile(e["histogram"], q) for q in QUANTILES}
                sources[source] = {
                    "scored": e["scored"], "below_threshold": e["below_threshold"], "dropped": e["dropped"],
                    "percent_dropped": percent, "thresholds": dict(sorted(e["thresholds"].items())),
                    "quantiles": {k: None if v is None else float(f"{v:.6g}") for k, v in qs.items()},
                    "histogram": histogram_rows(e["histogram"]),
                }
                thresholds = " / ".join(sorted(e["thresholds"]))
                median = qs["p50"]
                summary.append(f"classifier {name} on {source}: {e['dropped']:,} of {e['scored']:,} documents dropped "
                               f"below {thresholds} ({percent:.2f}%), median score {median:.3g}")
            out[name] = {"bins": BINNING, "by_source": sources}
        return {"classifiers": out, "summary": summary}


def _count(batch: Batch, name: str, sources: Sequence[str], scores: np.ndarray, below: np.ndarray,
           dropped: np.ndarray, threshold: float) -> None:
    """One classifier's scores of some documents (one value per document of `sources`) into the `classifiers`
    section: per source, documents scored, below the threshold, dropped (below it and still kept), the threshold
    applied (documents per threshold) and the score histogram (`text/score_histogram.py`). The section exists only
    when a classifier ran, so a config without one writes the stats it always wrote."""
    per_name = batch.stats.section("classifiers").setdefault(name, {})
    at = np.asarray(sources, dtype=object)
    for source in sorted(set(sources)):
        mine = at == source
        entry = per_name.setdefault(source, {"scored": 0, "below_threshold": 0, "dropped": 0, "thresholds": {},
                                             "histogram": {}})
        n = int(mine.sum())
        entry["scored"] += n
        entry["below_threshold"] += int(below[mine].sum())
        entry["dropped"] += int(dropped[mine].sum())
        entry["thresholds"][repr(threshold)] = entry["thresholds"].get(repr(threshold), 0) + n
        for key, count in bin_counts(scores[mine]).items():
            entry["histogram"][key] = entry["histogram"].get(key, 0) + count


# ----------------------------------------------------------------------------------------------------------------
# The input case of `low_<name>_score`: a web-like text below the threshold of a tiny model trained for it
# ----------------------------------------------------------------------------------------------------------------

PROSE_WORDS = ("the study measured how river water changed after the long dry summer and the results suggest that "
               "local farmers adapted their methods carefully while scientists recorded each season").split()
WEB_WORDS = ("home login cart subscribe click here free shipping menu contact privacy policy cookies accept share "
             "tweet like follow deals sale offer best price buy now sign up newsletter terms copyright").split()
WEB_TEXT = "home login cart subscribe click here free shipping menu contact privacy policy cookies accept share"


def tiny_classifier(name: str, folder: Path, threshold: float = 0.9) -> list[ClassifierConfig]:
    """A classifier `name` trained in `folder` with `tokenmill quality train`'s own code (prose-like positives,
    web-like negatives; about a second): the settings that drop `WEB_TEXT`."""
    import json
    import random

    import yaml

    from tokenmill.classifier.config import load_train_config
    from tokenmill.classifier.train import train_classifier

    rng = random.Random(0)
    root = folder / f"tiny-{name}"
    root.mkdir(parents=True, exist_ok=True)
    for label, words in (("pos", PROSE_WORDS), ("neg", WEB_WORDS)):
        with open(root / f"{label}.jsonl", "w", encoding="utf-8") as f:
            for _ in range(120):
                f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(rng.randint(8, 30)))}) + "\n")
    (root / "train.yaml").write_text(yaml.safe_dump({
        "output": "model", "seed": 3, "valid_fraction": 0.25, "fasttext": {"dim": 8, "epoch": 3, "bucket": 20000},
        "positives": [{"name": "prose", "format": "jsonl", "paths": ["pos.jsonl"]}],
        "negatives": [{"name": "web", "format": "jsonl", "paths": ["neg.jsonl"]}],
    }), encoding="utf-8")
    model = train_classifier(load_train_config(root / "train.yaml")).model_path
    return [ClassifierConfig(name=name, model=str(model), keep={"threshold": threshold})]
