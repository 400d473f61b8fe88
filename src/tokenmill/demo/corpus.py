"""Write the whole demo corpus: every source's files, the planted faults, demo.yaml, train.yaml, quality.yaml with its
trained model, and ground_truth.json."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import numpy as np

from .catalog import SOURCES, FileSpec, SourceSpec, open_writer
from .planted import write_demo_evalset
from .sources import unique_texts
from .config import ABLATE_NAME, CONFIG_NAME, TRAIN_NAME, write_config
from .quality import MODEL_FILES, QUALITY_NAME, train_quality, write_quality_config
from .documents import DocumentMaker
from .planted import PLANTERS, PlantContext, get_path

GROUND_TRUTH_NAME = "ground_truth.json"
GROUND_TRUTH_VERSION = 2  # 2: record_index on every planted entry; real-format sources
# Below this every source could not spread over its files and keep every topic.
MIN_DOCS_PER_SOURCE = 20
# With target_bytes a file closes once it holds its byte share and at least this many records.
MIN_RECORDS_PER_FILE = 10


def write_demo_corpus(
    out_dir: str | os.PathLike,
    *,
    seed: int = 1234,
    docs_per_source: int = 600,
    target_bytes: int | None = None,
    classifier: bool = True,
) -> dict:
    """Write the demo corpus, DIR/demo.yaml, DIR/quality.yaml with the model it trains (DIR/quality/, which
    demo.yaml's clean stage applies) and DIR/ground_truth.json; return a summary dict (files, documents, bytes per
    source, the classifier's valid ROC AUC).

    Without `target_bytes`, each source writes about `docs_per_source` records (times its `scale`
    in catalog.py: fewer HTML pages, Pile lines, WET pages and GB18030 stories). With `target_bytes`,
    `docs_per_source` is ignored: each source writes documents until its `share` of `target_bytes` is
    reached, so the total UTF-8 text of valid documents is at least `target_bytes`. For HTML pages the
    text counted is the article (title and paragraphs) a main-content extractor should find. `classifier=False`
    writes no quality.yaml and no model, and a demo.yaml without the classifier (the run as it was before it,
    for a benchmark against code that predates classifiers).
    """
    if docs_per_source < MIN_DOCS_PER_SOURCE:
        raise ValueError(f"docs_per_source must be at least {MIN_DOCS_PER_SOURCE}")
    if target_bytes is not None and target_bytes <= 0:
        raise ValueError("target_bytes must be positive")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    unique = unique_texts()

    truth_sources: dict[str, dict] = {}
    planted: list[dict] = []
    summary_sources: dict[str, dict] = {}
    for index, spec in enumerate(SOURCES):
        result = _write_source(out, spec, index, seed, docs_per_source, target_bytes, unique)
        planted.extend(result.pop("planted"))
        truth_sources[spec.name] = {
            "files": result["files"],
            "records": result["records"],
            "valid_documents": result["documents"],
            "text_bytes": result["text_bytes"],
        }
        summary_sources[spec.name] = result

    write_config(out, seed, classifier)
    for stale in [QUALITY_NAME, *MODEL_FILES]:
        (out / stale).unlink(missing_ok=True)  # a model left by an earlier run must not pass for this corpus's
    if classifier:
        # The model is part of the corpus: demo.yaml names it, so every consumer can run demo.yaml as it is.
        sidecar = train_quality(write_quality_config(out, seed, target_bytes))
    evalset = write_demo_evalset(out)
    truth = {"version": GROUND_TRUTH_VERSION, "seed": seed, "sources": truth_sources, "planted": planted}
    (out / GROUND_TRUTH_NAME).write_text(json.dumps(truth, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")

    quality_files = [QUALITY_NAME, *MODEL_FILES] if classifier else []
    files = [f for s in summary_sources.values() for f in s["files"]] + [CONFIG_NAME, TRAIN_NAME, ABLATE_NAME,
                                                                         *quality_files,
                                                                         GROUND_TRUTH_NAME, evalset]
    return {
        "out_dir": str(out),
        "seed": seed,
        "config": CONFIG_NAME,
        "ground_truth": GROUND_TRUTH_NAME,
        "files": files,
        "documents": sum(s["documents"] for s in summary_sources.values()),
        "text_bytes": sum(s["text_bytes"] for s in summary_sources.values()),
        "planted": len(planted),
        "classifier": ({"config": QUALITY_NAME, "model": MODEL_FILES[0], "valid_roc_auc": sidecar["valid"]["roc_auc"]}
                       if classifier else None),
        "sources": summary_sources,
    }


def _file_quotas(total: int, weights: list[float]) -> list[int]:
    """Split `total` records over files by weight (largest remainder), every file at least one."""
    w = sum(weights)
    exact = [total * x / w for x in weights]
    quota = [max(1, int(e)) for e in exact]
    for f in sorted(range(len(weights)), key=lambda f: (int(exact[f]) - exact[f], f))[: max(0, total - sum(quota))]:
        quota[f] += 1
    return quota


def _plant_plan(spec: SourceSpec, plant_rnd: random.Random, latest: list[int]) -> dict[int, list]:
    """{file index: [(position, planter number, planter)]}: each planter of the source goes to a file of its stream
    (round robin), after a given number of generated records (at most `latest[file]`)."""
    plan: dict[int, list] = {f: [] for f in range(spec.n_files)}
    per_stream: dict[str, int] = {}
    for j, p in enumerate(p for p in PLANTERS if p.source == spec.name):
        candidates = [f for f, file in enumerate(spec.files) if file.stream == p.stream]
        if not candidates:
            raise ValueError(f"planter {p.kind!r}: source {spec.name!r} has no {p.stream!r} files")
        k = per_stream.get(p.stream, 0)
        per_stream[p.stream] = k + 1
        f = candidates[k % len(candidates)]
        plan[f].append((plant_rnd.randint(0, latest[f]), j, p))
    return plan


def _write_source(out: Path, spec: SourceSpec, index: int, seed: int, docs_per_source: int,
                  target_bytes: int | None, unique) -> dict:
    # Independent, explicitly seeded generators per source: adding a source or changing one
    # source's generator leaves the others' bytes unchanged. String seeds are hashed with
    # SHA-512 by `random`, so they do not depend on PYTHONHASHSEED.
    rnd = random.Random(f"tokenmill-demo/{seed}/{spec.name}")
    rng = np.random.default_rng([seed, index])
    maker = DocumentMaker(rnd, rng)
    generators: dict[tuple, object] = {}  # (stream, args) -> its running generator, shared by files

    def records_of(file: FileSpec):
        key = (file.stream, file.args)
        if key not in generators:
            generators[key] = spec.streams[file.stream].records(maker, unique, **dict(file.args))
        return generators[key]

    plant_rnd = random.Random(f"tokenmill-demo/{seed}/{spec.name}/planted")
    contexts = {name: PlantContext(plant_rnd, s.text_path, s.id_path) for name, s in spec.streams.items()}

    n = spec.n_files
    weights = [f.weight for f in spec.files]
    if target_bytes is None:
        quota = _file_quotas(max(n, round(docs_per_source * spec.scale)), weights)
        byte_quota = [None] * n
        latest = [min(q, 40) for q in quota]
    else:
        quota = [MIN_RECORDS_PER_FILE] * n
        byte_quota = [math.ceil(target_bytes * spec.share * w / sum(weights)) for w in weights]
        latest = quota
    plan = _plant_plan(spec, plant_rnd, latest)

    for pattern in spec.clean:
        for stale in out.glob(pattern):
            stale.unlink()  # a previous run with other settings must not leak into the globs

    files, entries = [], []
    records_total = documents = text_bytes = 0
    for f, file in enumerate(spec.files):
        rel = file.path
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        shard = open_writer(spec, file, path, f"tokenmill-demo/{seed}/{rel}")
        stream, context = records_of(file), contexts[file.stream]
        pending = sorted(plan[f], key=lambda item: item[:2])
        generated = valid = file_bytes = 0  # quotas and plant positions count generated records only

        def plant_due(limit: float) -> None:
            nonlocal valid, file_bytes
            while pending and pending[0][0] <= limit:
                _, _, planter = pending.pop(0)
                record, _ = next(stream)
                victim_id = get_path(record, context.id_path) if context.id_path else None
                made = planter.make(record, context)
                at = shard.add_raw(made.raw) if made.raw is not None else shard.add_record(made.record)
                if made.valid:
                    valid += 1
                    file_bytes += len(get_path(made.record, context.text_path).encode("utf-8"))
                entry = {"kind": planter.kind, "source": spec.name, "file": rel, "record_index": at}
                if shard.line_based:
                    entry["line"] = at + 1
                entry.update({"expect_drop_reason": planter.expect_drop_reason, "stage": planter.stage})
                if victim_id is not None:
                    entry["id"] = victim_id
                entry.update(getattr(shard, "last_info", {}) if made.raw is None else {})
                entry.update(made.info)
                entries.append(entry)

        while True:
            plant_due(generated)
            if generated >= quota[f] and (byte_quota[f] is None or file_bytes >= byte_quota[f]):
                break
            record, text = next(stream)
            shard.add_record(record)
            generated += 1
            valid += 1
            file_bytes += len(text.encode("utf-8"))
        plant_due(math.inf)  # positions past the end of a short file
        shard.close()
        files.append(rel)
        records_total += shard.count
        documents += valid
        text_bytes += file_bytes

    return {
        "files": files,
        "records": records_total,
        "documents": documents,
        "text_bytes": text_bytes,
        "file_bytes": sum((out / rel).stat().st_size for rel in files),
        "planted": entries,
    }
