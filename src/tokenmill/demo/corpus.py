"""Write the whole demo corpus: every source's files, the planted faults, demo.yaml and ground_truth.json."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
from pathlib import Path

import numpy as np

from .config import CONFIG_NAME, write_config
from .documents import DocumentMaker
from .formats import JsonlShard, ParquetShard
from .planted import PLANTERS, PlantContext, get_path
from .sources import SOURCES, SourceSpec

GROUND_TRUTH_NAME = "ground_truth.json"
GROUND_TRUTH_VERSION = 1
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
) -> dict:
    """Write the demo corpus, DIR/demo.yaml and DIR/ground_truth.json; return a summary dict (files, documents, bytes per source).

    With `target_bytes`, `docs_per_source` is ignored: each source writes documents until its
    share of `target_bytes` (web 35%, books 35%, news 20%, forum 10%) is reached, so the total
    UTF-8 text written (valid documents only) is at least `target_bytes`.
    """
    if docs_per_source < MIN_DOCS_PER_SOURCE:
        raise ValueError(f"docs_per_source must be at least {MIN_DOCS_PER_SOURCE}")
    if target_bytes is not None and target_bytes <= 0:
        raise ValueError("target_bytes must be positive")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    seen: set[bytes] = set()

    def unique(text: str) -> bool:
        # Corpus-wide guard against accidental exact duplicates (templates can collide on short
        # texts); planted duplicates are added on purpose by planters, never by chance.
        key = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
        if key in seen:
            return False
        seen.add(key)
        return True

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

    write_config(out, seed)
    truth = {"version": GROUND_TRUTH_VERSION, "seed": seed, "sources": truth_sources, "planted": planted}
    (out / GROUND_TRUTH_NAME).write_text(json.dumps(truth, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")

    files = [f for s in summary_sources.values() for f in s["files"]] + [CONFIG_NAME, GROUND_TRUTH_NAME]
    return {
        "out_dir": str(out),
        "seed": seed,
        "config": CONFIG_NAME,
        "ground_truth": GROUND_TRUTH_NAME,
        "files": files,
        "documents": sum(s["documents"] for s in summary_sources.values()),
        "text_bytes": sum(s["text_bytes"] for s in summary_sources.values()),
        "planted": len(planted),
        "sources": summary_sources,
    }


def _write_source(out: Path, spec: SourceSpec, index: int, seed: int, docs_per_source: int,
                  target_bytes: int | None, unique) -> dict:
    # Independent, explicitly seeded generators per source: adding a source or changing one
    # source's generator leaves the others' bytes unchanged. String seeds are hashed with
    # SHA-512 by `random`, so they do not depend on PYTHONHASHSEED.
    rnd = random.Random(f"tokenmill-demo/{seed}/{spec.name}")
    rng = np.random.default_rng([seed, index])
    records = spec.records(DocumentMaker(rnd, rng), unique)
    ctx = PlantContext(random.Random(f"tokenmill-demo/{seed}/{spec.name}/planted"), spec.text_path, spec.id_path)

    n = spec.n_files
    if target_bytes is None:
        quota = [docs_per_source // n + (f < docs_per_source % n) for f in range(n)]
        byte_quota = None
        latest = [min(q, 40) for q in quota]
    else:
        quota = [MIN_RECORDS_PER_FILE] * n
        byte_quota = math.ceil(target_bytes * spec.share / n)
        latest = quota
    # Each planter goes to a file (round robin), after a given number of generated records.
    plan: dict[int, list] = {f: [] for f in range(n)}
    for j, p in enumerate(p for p in PLANTERS if p.source == spec.name):
        f = j % n
        plan[f].append((ctx.rnd.randint(0, latest[f]), j, p))

    for stale in out.glob(spec.file_name.replace("{:05d}", "*")):
        stale.unlink()  # a previous run with other settings must not leak into the globs
    (out / spec.file_name.format(0)).parent.mkdir(parents=True, exist_ok=True)

    files, entries = [], []
    records_total = documents = text_bytes = 0
    for f in range(n):
        rel = spec.file_name.format(f)
        path = out / rel
        shard = JsonlShard(path, spec.compression) if spec.format == "jsonl" else ParquetShard(path, spec.schema)
        pending = sorted(plan[f], key=lambda item: item[:2])
        generated = valid = file_bytes = 0  # quotas and plant positions count generated records only

        def plant_due(limit: float) -> None:
            nonlocal valid, file_bytes
            while pending and pending[0][0] <= limit:
                _, _, planter = pending.pop(0)
                record, _ = next(records)
                victim_id = get_path(record, spec.id_path)
                made = planter.make(record, ctx)
                line = shard.add_raw(made.raw) if made.raw is not None else shard.add_record(made.record)
                if made.valid:
                    valid += 1
                    file_bytes += len(get_path(made.record, spec.text_path).encode("utf-8"))
                entry = {"kind": planter.kind, "source": spec.name, "file": rel, "line": line,
                         "expect_drop_reason": planter.expect_drop_reason, "stage": planter.stage,
                         "id": victim_id}
                entry.update(made.info)
                entries.append(entry)

        while True:
            plant_due(generated)
            if generated >= quota[f] and (byte_quota is None or file_bytes >= byte_quota):
                break
            record, text = next(records)
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
