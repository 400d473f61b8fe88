"""Golden manifests: the logical content of a run's stage manifests, checked in so that a change shows as a diff.

`extract(run_dir)` reduces each `<run>/<stage>/manifest.json` to what the data pipeline decided, free of anything
that moves with library versions or machines:

- kept: the stage config (minus library versions), the input stage (or the source files by name), counts (documents
  and text bytes in and out, drops per reason) per source and subset, the stage report, an order-independent hash
  of the kept document ids per source and of the dropped ids per source and reason (the dropped ids themselves
  when there are at most `LISTED_IDS`), and for tokenize the documents and tokens per split, source and subset;
- left out: Parquet and token-file bytes and hashes, shard names, input and config hashes (they cover library
  versions), times, hosts, absolute paths, versions, the tokenizer engine.

`write(run_dir, dest)` writes one canonical JSON file per stage (sorted keys, indent 1); `compare(run_dir, dest)`
returns readable differences. As a command::

    python -m tokenmill.manifests.golden write RUN_DIR [--dest manifests]
    python -m tokenmill.manifests.golden check RUN_DIR [--dest manifests]   # exit 1 and the differences
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Iterable

from tokenmill.json_diff import MISSING, changes
from tokenmill.manifests.lineage import lineage_order
from tokenmill.pipeline.manifest import MANIFEST, read_manifest
from tokenmill.tokenize import bundle, tokens_json

LISTED_IDS = 100
"""Dropped ids are listed (not only hashed) for a source and reason with at most this many documents."""
SHOWN_IDS = 5
"""Ids named in one line of a difference; the rest are counted."""
VOLATILE_KEYS = frozenset({"seconds", "libraries", "versions"})
"""Keys dropped anywhere in a config or report: times and library versions."""
HINT = "run `make golden` and commit manifests/ with your change"


# ------------------------------------------------------------------------------------------------------------------
# Extract
# ------------------------------------------------------------------------------------------------------------------


def ids_digest(ids: Iterable[str]) -> str:
    """sha256 of the ids sorted by code point, each followed by a newline (UTF-8): `LC_ALL=C sort | sha256sum`."""
    h = hashlib.sha256()
    for doc_id in sorted(ids):
        h.update(doc_id.encode("utf-8") + b"\n")
    return h.hexdigest()


def texts_digest(ids: Iterable[str], text_hashes: Iterable[int]) -> str:
    """sha256 of `<id>\t<text_hash as 16 hex digits>` lines sorted by code point, each followed by a newline."""
    h = hashlib.sha256()
    for line in sorted(f"{doc_id}\t{text_hash:016x}" for doc_id, text_hash in zip(ids, text_hashes)):
        h.update(line.encode("utf-8") + b"\n")
    return h.hexdigest()


def _ids_entry(ids: list[str], listed: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"count": len(ids), "sha256": ids_digest(ids)}
    if listed and len(ids) <= LISTED_IDS:
        entry["ids"] = sorted(ids)
    return entry


def _strip(value: Any) -> Any:
    """A copy without VOLATILE_KEYS, at any depth."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _read_columns(path: Path, columns: list[str]) -> dict[str, list]:
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=columns)
    return {c: table.column(c).to_pylist() for c in columns}


def _read_kept(path: Path) -> dict[str, list]:
    """`id` and `text_hash` of a kept shard; the hash computed from `text` for a shard written before it existed."""
    import pyarrow.parquet as pq

    from tokenmill.documents import TEXT_HASH, text_hashes

    if TEXT_HASH in pq.read_schema(path).names:
        return _read_columns(path, ["id", TEXT_HASH])
    table = pq.read_table(path, columns=["id", "text"])
    return {"id": table.column("id").to_pylist(), TEXT_HASH: text_hashes(table.column("text")).to_pylist()}


def stage_order(run_dir: str | Path) -> list[str]:
    """The stages of a run that wrote a manifest, in pipeline order (each after the stage it reads)."""
    run = Path(run_dir)
    inputs = {}
    for manifest in sorted(run.glob(f"*/{MANIFEST}")):
        stage = manifest.parent.name
        if stage.startswith("_"):
            continue
        inputs[stage] = _content(manifest.parent)["input"].get("stage")
    return lineage_order(inputs.items())


def _content(stage_dir: Path) -> dict[str, Any]:
    """The content of a stage's manifest, read and checked as every tool reads it."""
    import pyarrow.fs as pafs

    return read_manifest(pafs.LocalFileSystem(), str(stage_dir), required=True)["content"]


def _extract_stage(stage_dir: Path) -> dict[str, Any]:
    content = _content(stage_dir)
    kept: dict[str, list[str]] = {}
    kept_hashes: dict[str, list[int]] = {}
    dropped: dict[str, dict[str, list[str]]] = {}
    for entry in content["shards"]:
        source = entry["source"]
        cols = _read_kept(stage_dir / entry["path"])
        kept.setdefault(source, []).extend(cols["id"])
        kept_hashes.setdefault(source, []).extend(cols["text_hash"])
        if entry.get("dropped_path"):
            cols = _read_columns(stage_dir / entry["dropped_path"], ["id", "drop_reason"])
            for doc_id, reason in zip(cols["id"], cols["drop_reason"]):
                dropped.setdefault(source, {}).setdefault(reason, []).append(doc_id)
    by_source = {}
    for source, tally in content["by_source"].items():
        listed = dropped.get(source, {})
        by_source[source] = {
            **tally,
            "kept_ids": _ids_entry(kept.get(source, []), listed=False),
            "kept_texts": {"sha256": texts_digest(kept.get(source, []), kept_hashes.get(source, []))},
            # Drops counted in the manifest but without a dropped file (keep_dropped: false) are only counted.
            "dropped_ids": {reason: _ids_entry(ids, listed=True) for reason, ids in sorted(listed.items())},
        }
    if "stage" in content["input"]:
        input_ = {"stage": content["input"]["stage"]}
    else:  # ingest: the source files by name; their sizes move with compression library versions
        input_ = {"files": sorted(({"source": f["source"], "path": f["path"]} for f in content["input"]["files"]),
                                  key=lambda f: (f["source"], f["path"]))}
    golden = {
        "stage": content["stage"],
        "schema_version": content["schema_version"],
        "config": _strip(content["config"]),
        "input": input_,
        "totals": content["totals"],
        "by_source": by_source,
    }
    if "report" in content:
        golden["report"] = _strip(content["report"])
    if (stage_dir / tokens_json.FILE).is_file():
        golden["tokens"] = _extract_tokens(stage_dir)
    return golden


def _extract_tokens(stage_dir: Path) -> dict[str, Any]:
    """Documents and tokens per split, source and subset, the ids per split and source, the tokenizer's shape."""
    tokens = tokens_json.read(stage_dir / tokens_json.FILE).data
    splits = {}
    for split, info in tokens["splits"].items():
        by_source: dict[str, dict[str, Any]] = {}
        ids: dict[str, list[str]] = {}
        for f in info["files"]:
            for source, counts in f["by_source"].items():
                acc = by_source.setdefault(source, {"documents": 0, "tokens": 0, "subsets": {}})
                acc["documents"] += counts["documents"]
                acc["tokens"] += counts["tokens"]
                for subset, sub in counts.get("subsets", {}).items():
                    s = acc["subsets"].setdefault(subset, {"documents": 0, "tokens": 0})
                    s["documents"] += sub["documents"]
                    s["tokens"] += sub["tokens"]
            docs = stage_dir / (f["prefix"] + bundle.DOCS)
            if docs.is_file():
                cols = bundle.read_docs(docs, columns=["id", "source"])
                for doc_id, source in zip(cols.column("id").to_pylist(), cols.column("source").to_pylist()):
                    ids.setdefault(source, []).append(doc_id)
        for source, doc_ids in ids.items():
            acc = by_source.setdefault(source, {"documents": 0, "tokens": 0, "subsets": {}})
            acc["ids"] = _ids_entry(doc_ids, listed=False)
        splits[split] = {"documents": info["documents"], "tokens": info["tokens"], "by_source": by_source}
    tokenizer = {k: v for k, v in tokens.get("tokenizer", {}).items() if k in ("vocab_size", "eos_token", "eos_id")}
    return {"format": tokens["format"], "version": tokens["version"], "dtype": tokens["dtype"],
            "tokenizer": tokenizer, "splits": splits}


def extract(run_dir: str | Path) -> dict[str, dict[str, Any]]:
    """{stage: golden content} for every stage of the run that wrote a manifest, in pipeline order."""
    run = Path(run_dir)
    order = stage_order(run)
    if not order:
        raise FileNotFoundError(f"no stage manifest under {run} (expected {run}/<stage>/{MANIFEST})")
    return {stage: _extract_stage(run / stage) for stage in order}


# ------------------------------------------------------------------------------------------------------------------
# Write and read
# ------------------------------------------------------------------------------------------------------------------


def canonical(value: Any) -> str:
    """Sorted keys, indent 1, UTF-8 text as is, a final newline: one line per value, for readable git diffs."""
    return json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def write(run_dir: str | Path, dest: str | Path = "manifests") -> list[Path]:
    """Write `<dest>/<stage>.json` for every stage of the run; remove stage files of stages the run no longer has."""
    golden = extract(run_dir)
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for stage, content in golden.items():
        path = out / f"{stage}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(canonical(content), encoding="utf-8")
        tmp.replace(path)
        written.append(path)
    for stale in sorted(out.glob("*.json")):
        if stale not in written:
            stale.unlink()
    return written


def load(dest: str | Path) -> dict[str, dict[str, Any]]:
    """The golden manifests in `dest`, {stage: content}."""
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(Path(dest).glob("*.json"))}


# ------------------------------------------------------------------------------------------------------------------
# Compare
# ------------------------------------------------------------------------------------------------------------------


def compare(run_dir: str | Path, dest: str | Path = "manifests") -> list[str]:
    """Readable differences between the run's logical content and the golden manifests in `dest`; [] when equal."""
    if not Path(dest).is_dir():
        return [f"no golden manifests at {dest}"]
    return diff(load(dest), extract(run_dir))


def diff(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[str]:
    """Differences from `old` (golden) to `new` (this run), {stage: content} each, one line per difference."""
    lines: list[str] = []
    for stage in [*new, *(s for s in old if s not in new)]:
        if stage not in old:
            lines.append(f"{stage}: new stage (no golden manifest)")
        elif stage not in new:
            lines.append(f"{stage}: in the golden manifests but not in this run")
        else:
            lines.extend(f"{stage}: {line}" for line in _diff_stage(old, new, stage))
    return lines


def _diff_stage(old_all: dict, new_all: dict, stage: str) -> list[str]:
    old, new = old_all[stage], new_all[stage]
    lines: list[str] = []
    old_sources, new_sources = old.get("by_source", {}), new.get("by_source", {})
    _diff_value("", _without_ids(old), _without_ids(new), lines)
    prev = new.get("input", {}).get("stage")
    for source in sorted(set(old_sources) & set(new_sources)):
        o, n = old_sources[source], new_sources[source]
        for reason in sorted(set(o["dropped_ids"]) | set(n["dropped_ids"])):
            empty = {"count": 0, "sha256": ids_digest([]), "ids": []}
            od, nd = o["dropped_ids"].get(reason, empty), n["dropped_ids"].get(reason, empty)
            if od["sha256"] != nd["sha256"]:
                lines.append(f"dropped ids of {source} for {reason} changed ({_ids_change(od, nd)})")
        if o["kept_ids"]["sha256"] != n["kept_ids"]["sha256"]:
            lines.append(f"kept ids of {source} changed ({_kept_change(o, n, source, prev, old_all, new_all)})")
    return lines


def _without_ids(content: dict[str, Any]) -> dict[str, Any]:
    """The content with kept and dropped ids left out (they get their own lines)."""
    sources = {name: {k: v for k, v in s.items() if k not in ("kept_ids", "dropped_ids")}
               for name, s in content.get("by_source", {}).items()}
    return {**content, "by_source": sources}


def _short_hash(entry: dict[str, Any]) -> str:
    return entry["sha256"][:8]


def _name_ids(ids: list[str]) -> str:
    shown = ", ".join(ids[:SHOWN_IDS])
    return shown + (f", ... ({len(ids) - SHOWN_IDS} more)" if len(ids) > SHOWN_IDS else "")


def _ids_change(o: dict[str, Any], n: dict[str, Any]) -> str:
    text = f"hash {_short_hash(o)} -> {_short_hash(n)}; {o['count']} -> {n['count']} docs"
    if "ids" in o and "ids" in n:
        added = sorted(set(n["ids"]) - set(o["ids"]))
        removed = sorted(set(o["ids"]) - set(n["ids"]))
        text += f"; {len(added)} added, {len(removed)} removed"
        if added:
            text += f"; added: {_name_ids(added)}"
        if removed:
            text += f"; removed: {_name_ids(removed)}"
    return text


def _kept_change(o: dict, n: dict, source: str, prev: str | None, old_all: dict, new_all: dict) -> str:
    """Hash and count; with the stage's input unchanged, the ids now dropped and no longer dropped by name."""
    text = _ids_change(o["kept_ids"], n["kept_ids"])

    def upstream_kept(stages: dict) -> Any:
        return stages[prev]["by_source"].get(source, {}).get("kept_ids") if prev in stages else None

    input_changed = prev is not None and (upstream_kept(old_all) is None or upstream_kept(old_all) != upstream_kept(new_all))
    if input_changed:
        return text + f"; its input changed too, see {prev}"
    reasons = set(o["dropped_ids"]) | set(n["dropped_ids"])
    if not all("ids" in d.get(r, {"ids": []}) for d in (o["dropped_ids"], n["dropped_ids"]) for r in reasons):
        return text  # some drops are only hashed: the ids cannot be named
    was = {i for d in o["dropped_ids"].values() for i in d["ids"]}
    now = {i for d in n["dropped_ids"].values() for i in d["ids"]}
    removed, added = sorted(now - was), sorted(was - now)
    text += f"; {len(added)} added, {len(removed)} removed"
    if added:
        text += f"; no longer dropped: {_name_ids(added)}"
    if removed:
        text += f"; now dropped: {_name_ids(removed)}"
    return text


def _show(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _diff_value(path: str, old: Any, new: Any, lines: list[str]) -> None:
    """One line per difference; types count (`1` is not `1.0`), lists of another length are one line."""
    for key, a, b in changes(old, new, path, lists="whole", strict=True, absent=_absent):
        if a is MISSING:
            lines.append(f"{key}: added {_show(b)}")
        elif b is MISSING:
            lines.append(f"{key}: removed (was {_show(a)})")
        elif isinstance(a, list) and isinstance(b, list):
            lines.append(f"{key}: {len(a)} -> {len(b)} items ({_show(a, 60)} -> {_show(b, 60)})")
        else:
            lines.append(f"{key}: {_show(a)} -> {_show(b)}")


def _absent(path: str) -> Any:
    """A drop reason one side lacks is a count of 0 there; any other key missing is a difference."""
    return 0 if path == "drops" or path.endswith(".drops") else MISSING


# ------------------------------------------------------------------------------------------------------------------
# Command
# ------------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tokenmill.manifests.golden",
                                     description="Write or check the golden manifests of a run (the demo run in CI).")
    parser.add_argument("command", choices=["write", "check"])
    parser.add_argument("run_dir", help="the run folder, e.g. build/demo/run")
    parser.add_argument("--dest", default="manifests", help="the golden manifests folder (default: manifests)")
    args = parser.parse_args(argv)
    if args.command == "write":
        paths = write(args.run_dir, args.dest)
        print(f"wrote {len(paths)} golden manifests to {args.dest}: {', '.join(p.name for p in paths)}")
        return 0
    differences = compare(args.run_dir, args.dest)
    if not differences:
        print(f"{args.run_dir} matches the golden manifests in {args.dest}")
        return 0
    print(f"{args.run_dir} differs from the golden manifests in {args.dest} ({len(differences)} differences):")
    for line in differences:
        print(f"  {line}")
    print(HINT)
    return 1


if __name__ == "__main__":
    sys.exit(main())
