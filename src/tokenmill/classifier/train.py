"""Train a fastText quality classifier: read both classes with the pipeline's readers, split, train, measure, save.

The steps, each deterministic: every file of every source is read by its format's reader (the ones ingest uses),
each document edited as the clean stage edits it before its later filters (`config.normalize`, then
`config.pii`); a source's `fraction` keeps the
documents the sample stage would keep; exact duplicates (same prepared line) are kept once, and a line that is
both a positive and a negative is dropped; a keyed hash of (seed, source, id) sends `valid_fraction` of the
documents to the valid split and orders the training file (positives and negatives interleaved, as fastText reads
the file in order and decays its learning rate along it); `epoch: auto` fits the passes to the smaller class's
size (`fit_epochs`); fastText trains on one thread with the config's seed, in a child process (`fit.py` says
why); the valid split is scored by the saved model, loaded and checked as the clean filter loads it, through
`score_texts`, the function that filter calls; a valid ROC AUC below AUC_FLOOR and unbalanced classes are warned
about in the sidecar and the summary.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tokenmill.classifier.config import AUTO, LABEL_PREFIX, ClassifierTrainConfig
from tokenmill.classifier.fit import fit
from tokenmill.classifier.metrics import classification_report
from tokenmill.classifier.prepare import prepare
from tokenmill.classifier.score import score_texts
from tokenmill.digest import file_sha256
from tokenmill.errors import TokenmillError
from tokenmill.fasttext.binding import fasttext_distribution, fasttext_module, load_model
from tokenmill.documents import canonical_json
from tokenmill.readers.base import check_unchanged, file_stamp
from tokenmill.sampling import keep_mask, sample_keys
from tokenmill.sources.config import SourceConfig
from tokenmill.sources.formats import READERS
from tokenmill.sources.patterns import source_files
from tokenmill.text.normalize import NormalizeConfig, normalize
from tokenmill.text.pii import PiiConfig, replace_pii

log = logging.getLogger(__name__)

MODEL_FILE = "model.bin"
SIDECAR_FILE = "model.json"
SIDECAR_VERSION = 2
EPOCH_UPDATES = 25_000
"""`epoch: auto`'s target: updates on the smaller class's training documents (`fit_epochs`)."""
EPOCH_RANGE = (5, 100)
"""The passes `epoch: auto` chooses from: fastText's default at least, and a bound on the time a tiny set takes."""
AUC_FLOOR = 0.9
"""Below this valid ROC AUC, the summary and the sidecar warn (the shared real data's classifiers reach 0.97+)."""
IMBALANCE = 1.5
"""A larger class with more than this many times the smaller class's training documents is warned about."""
DECISION_THRESHOLD = 0.5
"""The score from which a valid document counts as called positive for precision, recall and F1."""
SPLIT_NAMESPACE = "classifier.valid/"
"""Prefixed to the source name in the split's keyed hash, so the split is independent of the sample stage's
choice (the same seed, source and id must not decide both)."""
_SCALE = 2.0**64


@dataclass(frozen=True, slots=True)
class Example:
    """One document of the training set: its split key, class, source, id and normalized text."""

    key: int
    """The keyed hash of (seed, source, id): below `valid_fraction` of 2**64 it is in the valid split."""
    positive: bool
    source: str
    id: str
    text: str
    """The text as the clean stage hands it on (normalized, PII replaced), before `prepare`."""
    line: str
    """`prepare(text)`: the line fastText reads."""


@dataclass
class InputFile:
    """One file read: what the sidecar records of it."""

    group: str
    source: str
    format: str
    path: str
    bytes: int
    sha256: str
    documents: int = 0
    sampled_out: int = 0
    dropped: dict[str, int] = field(default_factory=dict)


class TrainReporter:
    """What `train_classifier` says while it works; this one says nothing (the CLI's shows progress)."""

    def files_listed(self, total: int) -> None:
        pass

    def file_read(self, display: str, documents: int) -> None:
        pass

    def training_started(self, lines: int, epochs: int) -> None:
        pass

    def training_ended(self, seconds: float) -> None:
        pass


@dataclass
class TrainResult:
    """What a training produced: the files written, the sidecar, and each valid document's score."""

    model_path: Path
    sidecar_path: Path
    sidecar: dict[str, Any]
    valid_ids: list[tuple[str, str]]
    """(source, id) of each valid document, in the order of `valid_scores`."""
    valid_scores: np.ndarray


def as_clean_hands_on(text: str, normalize_config: NormalizeConfig, pii: PiiConfig | None) -> str:
    """The text as the clean stage's chain leaves it for a filter after its edits: normalized, then PII replaced
    (the clean stage's own functions, in its order). Escape repair, which comes first in clean, is not applied:
    it edits only texts with leaked serialization escapes, and decides per source whether to repair or drop."""
    text = normalize(text, normalize_config)[0]
    return text if pii is None else replace_pii(text, pii)[0]


def split_keys(seed: int, source: str, ids: list[str]) -> np.ndarray:
    """The split's keyed hash per document (uint64): the sample stage's hash of (seed, source, id), under
    SPLIT_NAMESPACE. Depends on nothing else, so the split is the same whatever the file or document order."""
    return sample_keys(seed, SPLIT_NAMESPACE + source, ids)


def valid_mask(keys: np.ndarray, fraction: float) -> np.ndarray:
    """True for documents in the valid split: their key falls in the first `fraction` of the 64-bit range."""
    return np.asarray(keys, dtype=np.uint64) < np.uint64(min(int(fraction * _SCALE), 2**64 - 1))


def read_source(config: ClassifierTrainConfig, source: SourceConfig, positive: bool,
                reporter: TrainReporter) -> tuple[list[Example], list[InputFile]]:
    """Every document of one source, normalized and prepared, with its split key; and what was read of each file."""
    group = "positives" if positive else "negatives"
    root, files = source_files(config, source)  # type: ignore[arg-type] - needs only `resolve` and `base_dir`
    reader = READERS[source.format].read
    examples: list[Example] = []
    inputs: list[InputFile] = []
    for path in files:
        relpath = os.path.relpath(path, root).replace(os.sep, "/")
        display = f"{source.name}:{relpath}"
        stamp = file_stamp(str(path), "content")
        # The path from the config's folder, as the config names it: the sidecar is the same wherever the folder is.
        where = os.path.relpath(path, config.base_dir).replace(os.sep, "/")
        info = InputFile(group, source.name, source.format, where, stamp["bytes"], stamp["sha256"])
        ids, texts = [], []
        dropped: Counter[str] = Counter()
        for record in reader(str(path), source, display):
            if record.drop is not None:
                dropped[record.drop] += 1
                continue
            ids.append(record.id if record.id is not None else f"{source.name}/{relpath}/{record.index}")
            texts.append(record.text)
        check_unchanged(str(path), display, stamp)  # the sha256 recorded is of the bytes read
        kept = keep_mask(config.seed, source.name, ids, source.fraction)  # what the sample stage would keep
        keys = split_keys(config.seed, source.name, ids)
        for i in np.flatnonzero(kept):
            text = as_clean_hands_on(texts[i], config.normalize, config.pii)
            examples.append(Example(int(keys[i]), positive, source.name, ids[i], text, prepare(text, config.prepare)))
        info.documents, info.sampled_out, info.dropped = int(kept.sum()), int((~kept).sum()), dict(sorted(dropped.items()))
        inputs.append(info)
        reporter.file_read(display, info.documents)
    return examples, inputs


def deduplicate(examples: list[Example]) -> tuple[list[Example], dict[str, int]]:
    """One example per prepared line, and the counts of what went: `empty` (nothing left after preparation),
    `duplicate` (the same line again in its class: the one with the smallest (key, source, id) stays) and
    `both_classes` (a line that is a positive and a negative: every copy goes, it would teach nothing).

    Depends only on the examples, not their order. A duplicate left in would sit in both splits and inflate the
    valid measures."""
    counts = {"empty": 0, "duplicate": 0, "both_classes": 0}
    groups: dict[bytes, list[Example]] = {}
    for e in examples:
        if not e.line:
            counts["empty"] += 1
            continue
        groups.setdefault(hashlib.blake2b(e.line.encode("utf-8"), digest_size=16).digest(), []).append(e)
    out = []
    for group in groups.values():
        if len({e.positive for e in group}) > 1:
            counts["both_classes"] += len(group)
            continue
        out.append(min(group, key=_order))
        counts["duplicate"] += len(group) - 1
    return sorted(out, key=_order), counts


def _order(e: Example) -> tuple[int, str, str]:
    return e.key, e.source, e.id


def fit_epochs(smaller_class: int) -> int:
    """The passes `epoch: auto` makes over a training set whose smaller class has `smaller_class` documents: enough
    for EPOCH_UPDATES updates on that class, within EPOCH_RANGE.

    fastText decays its learning rate to 0 over `epoch` passes, so what a class teaches the model grows with the
    updates made on its documents. fastText's default of 5 passes suits sets of many thousands. On 1,151 real
    paragraphs (Pile against Common Crawl, 2:1, tests/classifier/test_train.py) 5 passes gave a valid ROC AUC of
    0.82 to 0.88 over seeds 0-4, and the 76 passes this chooses 0.98 to 0.99; on a sibling set, 10 passes gave 0.94
    to 0.98 and 25, 50 or 100 all 0.98 to 0.998: more passes did not overfit what AUC measures. Counting the smaller
    class's documents is how the balance enters: its documents are the scarcer lesson. A higher `lr` with 5 passes
    did as well there, but risks a diverged training (fastText stops on a NaN); more passes at 0.1 do not."""
    low, high = EPOCH_RANGE
    return max(low, min(high, math.ceil(EPOCH_UPDATES / max(smaller_class, 1))))


def resolve_epochs(config: ClassifierTrainConfig, counts: dict[str, int]) -> tuple[int, dict[str, Any]]:
    """The passes to train with, and the sidecar's record of how they were chosen (`counts`: train documents per
    label)."""
    smaller = min(counts.values())
    if config.fasttext.epoch != AUTO:
        return config.fasttext.epoch, {"epoch": config.fasttext.epoch, "rule": "configured"}
    epochs = fit_epochs(smaller)
    return epochs, {"epoch": epochs, "rule": f"auto: {EPOCH_UPDATES:,} updates on the smaller class's "
                    f"{smaller:,} training documents, within {EPOCH_RANGE[0]} to {EPOCH_RANGE[1]} passes",
                    "smaller_class_documents": smaller}


def warnings_for(counts: dict[str, int], report: dict[str, Any]) -> list[str]:
    """What the summary and the sidecar warn about: a valid ROC AUC below AUC_FLOOR, and classes whose training
    documents differ by more than IMBALANCE times (scores then lean toward the larger class)."""
    out = []
    auc = report["roc_auc"]
    if auc is not None and auc < AUC_FLOOR:
        called = report["false_positives"]
        out.append(f"the valid ROC AUC is {auc:.3f}, below {AUC_FLOOR}: the model barely tells the classes apart "
                   f"({called} of {report['negatives']} valid negatives score >= {report['threshold']}). Add "
                   f"documents, set fasttext.epoch higher, or check that the two classes really differ")
    (big, n_big), (small, n_small) = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    if n_big > IMBALANCE * n_small:
        out.append(f"the classes are unbalanced: {n_big:,} {big} against {n_small:,} {small} training documents "
                   f"({n_big / n_small:.1f}:1), so scores lean toward {big}: a fixed threshold such as 0.5 calls more "
                   f"documents {big} than on balanced classes. Balance them with a source's `fraction`, or keep a "
                   f"top_fraction in clean instead of a threshold")
    return out


def fasttext_arguments(config: ClassifierTrainConfig, epochs: int) -> dict[str, Any]:
    """`train_supervised`'s keyword arguments (besides `input`): the config's options with `epochs` passes, one
    thread, the seed."""
    o = config.fasttext
    return {"lr": o.lr, "dim": o.dim, "epoch": epochs, "wordNgrams": o.word_ngrams, "minCount": o.min_count,
            "bucket": o.bucket, "loss": o.loss, "minn": o.minn, "maxn": o.maxn, "label": LABEL_PREFIX,
            # one thread: fastText's threads update shared weights without locks (hogwild), so with two the
            # model.bin differs run to run; with one it is byte-identical for the same seed
            "thread": 1, "seed": fasttext_seed(config.seed), "verbose": 0}


def fasttext_seed(seed: int) -> int:
    """The config's seed as fastText's: in [1, 2**31 - 2]. fastText seeds a `std::minstd_rand`, which takes seed 0
    as 1 (seeds 0 and 1 gave byte-identical models) and holds an int32; every config seed below 2**31 - 2 maps to
    itself plus one, so two small seeds never give the same model."""
    return seed % (2**31 - 2) + 1


def _label_counts(examples: list[Example], config: ClassifierTrainConfig) -> dict[str, int]:
    positives = sum(e.positive for e in examples)
    return {config.labels.positive: positives, config.labels.negative: len(examples) - positives}


def train_classifier(config: ClassifierTrainConfig, reporter: TrainReporter | None = None) -> TrainResult:
    """Read, split, train, score the valid split, and write `model.bin` then `model.json` under `config.output`."""
    reporter = reporter or TrainReporter()
    fasttext_module()  # a fastText that cannot train stops before anything is read
    started = time.perf_counter()
    groups = [(s, True) for s in config.positives] + [(s, False) for s in config.negatives]
    reporter.files_listed(sum(len(source_files(config, s)[1]) for s, _ in groups))  # type: ignore[arg-type]
    examples: list[Example] = []
    inputs: list[InputFile] = []
    for source, positive in groups:
        got, files = read_source(config, source, positive, reporter)
        examples += got
        inputs += files
    kept, removed = deduplicate(examples)
    in_valid = valid_mask(np.array([e.key for e in kept], dtype=np.uint64), config.valid_fraction)
    train = [e for e, v in zip(kept, in_valid) if not v]
    valid = [e for e, v in zip(kept, in_valid) if v]
    for name, split in (("train", train), ("valid", valid)):
        missing = [label for label, n in _label_counts(split, config).items() if n == 0]
        if missing:
            raise TokenmillError(f"the {name} split has no document labelled {', '.join(missing)} "
                                 f"({len(split)} documents in it): add documents to that class, or change "
                                 f"valid_fraction")

    out = config.output_dir
    out.mkdir(parents=True, exist_ok=True)
    model_path, sidecar_path = out / MODEL_FILE, out / SIDECAR_FILE
    sidecar_path.unlink(missing_ok=True)  # a sidecar present always describes the model.bin beside it
    for pattern in (".train-*.txt", f".{MODEL_FILE}.*.tmp", f".{SIDECAR_FILE}.*.tmp"):
        for stale in out.glob(pattern):  # left by a training that was killed
            stale.unlink(missing_ok=True)
    train_file = out / f".train-{os.getpid()}.txt"
    tmp = out / f".{MODEL_FILE}.{os.getpid()}.tmp"
    labels = config.labels
    try:
        with open(train_file, "w", encoding="utf-8", newline="\n") as f:
            for e in train:
                f.write(f"{labels.positive if e.positive else labels.negative} {e.line}\n")
        train_counts = _label_counts(train, config)
        epochs, fitted = resolve_epochs(config, train_counts)
        arguments = fasttext_arguments(config, epochs)
        reporter.training_started(len(train), epochs)
        trained_at = time.perf_counter()
        fit(train_file, tmp, arguments)
        os.replace(tmp, model_path)
        reporter.training_ended(time.perf_counter() - trained_at)
    finally:
        train_file.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    model = load_model(str(model_path))  # the valid split is scored by the saved model, as the clean filter loads it
    scores = score_texts(model, [e.text for e in valid], config.prepare, labels.positive)
    report = classification_report(scores, np.array([e.positive for e in valid], dtype=bool), DECISION_THRESHOLD)
    warnings = warnings_for(train_counts, report)
    for warning in warnings:
        log.warning("quality train %s: %s", config.output, warning)
    sidecar = {
        "version": SIDECAR_VERSION,
        "model": {"file": MODEL_FILE, "bytes": model_path.stat().st_size, "sha256": file_sha256(model_path)},
        "labels": {"positive": labels.positive, "negative": labels.negative},
        "normalize": config.normalize.model_dump(mode="json"),
        "pii": None if config.pii is None else config.pii.model_dump(mode="json"),
        "prepare": config.prepare.model_dump(mode="json"),
        "fasttext": {**arguments, "package": fasttext_distribution()},
        "fit": fitted,
        "seed": config.seed,
        "valid_fraction": config.valid_fraction,
        "inputs": [vars(i) for i in inputs],
        "counts": {"read": len(examples), **removed, "train": train_counts,
                   "valid": _label_counts(valid, config)},
        "valid": report,
        "warnings": warnings,
        "config": config.model_dump(mode="json"),
    }
    tmp = out / f".{SIDECAR_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(sidecar, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, sidecar_path)  # last: its presence marks a complete model
    log.info(canonical_json({"event": "classifier_trained", "output": str(out), "seconds": round(
        time.perf_counter() - started, 3), "model_sha256": sidecar["model"]["sha256"], "counts": sidecar["counts"],
        "valid": report}))
    return TrainResult(model_path, sidecar_path, sidecar, [(e.source, e.id) for e in valid], scores)
