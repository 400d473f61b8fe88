"""Compare two runs stage by stage: config keys, counts, drops, tokens, changed shards, documents added, removed and
changed.

`diff_runs(a, b)` returns a JSON-ready dict (the shape is in docs/manifests.md); the CLI renders it. Documents are
compared by the `id` and `text_hash` columns of the kept shards only, and only in shards whose recorded content hash
differs between the runs (a shard with the same hash holds the same ids and texts); texts are read for the few
previewed ids alone.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from tokenmill.errors import ManifestError, TokenmillError
from tokenmill.json_diff import MISSING, flat_changes, flatten
from tokenmill.manifests.kept import Kept, differences, scan_kept
from tokenmill.manifests.lineage import lineage_order
from tokenmill.pipeline.manifest import MANIFEST, content_hash, read_manifest
from tokenmill.documents import NO_SUBSET
from tokenmill.pipeline import storage
from tokenmill.tokenize import tokens_json

TALLY_FIELDS = ("docs_in", "docs_out", "bytes_in", "bytes_out")
TOKENS_FILE = "tokens.json"
PREVIEW_CHARS = 120
EXCERPT_BEFORE = 30
"""Characters shown before the first difference of a changed text."""
EXCERPT_AFTER = 90
"""Characters shown from the first difference on."""


# ---------------------------------------------------------------------------------------------------------- locating


def locate(path: str) -> tuple[Any, str, dict[str, str]]:
    """(filesystem, the path as given, {stage: stage folder}) for a run folder, a stage folder or a manifest.json.

    A run folder gives every stage folder in it that holds a manifest (a stage whose run never completed has none);
    a stage folder or its manifest.json gives that stage alone.
    """
    fs, p = storage.filesystem_for(str(path))
    p = p.rstrip("/") or "/"
    info = fs.get_file_info(p)
    if info.type == pafs.FileType.NotFound:
        raise TokenmillError(f"{path}: no such file or folder")
    if info.type == pafs.FileType.File:
        if not p.endswith(".json"):
            raise TokenmillError(f"{path}: expected a run folder or a stage's {MANIFEST}")
        p = p.rsplit("/", 1)[0] if "/" in p else "."  # the stage folder, whose manifest the diff reads
    if info.type == pafs.FileType.File or storage.exists(fs, storage.join(p, MANIFEST)):
        manifest = read_manifest(fs, p, required=True)
        return fs, path, {manifest["content"]["stage"]: p}
    stages = {}
    for sub in fs.get_file_info(pafs.FileSelector(p, recursive=False)):
        name = sub.base_name
        if sub.type == pafs.FileType.Directory and not name.startswith("_") \
                and storage.exists(fs, storage.join(sub.path, MANIFEST)):
            stages[name] = sub.path
    if not stages:
        raise TokenmillError(f"{path}: no stage manifests in it (expected <run>/<stage>/{MANIFEST}); "
                             f"is it the config's `output` folder, and has a stage completed?")
    return fs, path, {s: stages[s] for s in sorted(stages)}


# ---------------------------------------------------------------------------------------------------------- config


def config_keys(stage: str, identity: dict[str, Any]) -> dict[str, Any]:
    """A stage's identity flattened to dotted keys named as in the run config file.

    `config` is the stage's block (`stages.<stage>.*`, `ingest.*` for ingest), `seed` the run's seed, `fractions`
    and ingest's `sources` the per-source options (`sources.<name>.<option>`). Anything else is a value the stage
    derives from the config (dedup's `bands`, clean's `languages`, ...) and is named `<stage>.<key>`. Dicts are
    flattened by key and lists of dicts by index (`overrides[0].source`); other lists are one value.
    """
    out: dict[str, Any] = {}
    for key, value in identity.items():
        if key == "config":
            out.update(flatten(value, "ingest" if stage == "ingest" else f"stages.{stage}"))
        elif key == "seed":
            out["seed"] = value
        elif key == "fractions" and isinstance(value, dict):
            for source, fraction in value.items():
                out[f"sources.{source}.fraction"] = fraction
        elif key == "sources" and isinstance(value, dict):
            out.update(flatten(value, "sources"))
        else:
            out.update(flatten(value, f"{stage}.{key}"))
    return out


def _change_rows(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """`{key, a, b, change}` for each key of two flattened values that differs; change `changed`, `added` or
    `removed`, and null on the side that lacks the key."""
    return [{"key": key, "a": None if a is MISSING else a, "b": None if b is MISSING else b,
             "change": "added" if a is MISSING else "removed" if b is MISSING else "changed"}
            for key, a, b in flat_changes(old, new)]


def config_changes(stage: str, a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Every dotted key whose value differs: `{key, a, b, change}` with change `changed`, `added` or `removed`."""
    return _change_rows(config_keys(stage, a), config_keys(stage, b))


# ---------------------------------------------------------------------------------------------------------- counts


def _delta(a: dict[str, int], b: dict[str, int], fields: Iterable[str]) -> dict[str, Any]:
    a = {f: a.get(f, 0) for f in fields}
    b = {f: b.get(f, 0) for f in fields}
    return {"a": a, "b": b, "delta": {f: b[f] - a[f] for f in a}}


def count_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Documents and bytes in and out per source (`subset` null) and per source and subset, before and after."""
    rows = []
    for source in sorted(set(a) | set(b)):
        sa, sb = a.get(source, {}), b.get(source, {})
        rows.append({"source": source, "subset": None, **_delta(sa, sb, TALLY_FIELDS)})
        subs_a, subs_b = sa.get("subsets", {}), sb.get("subsets", {})
        for subset in sorted(set(subs_a) | set(subs_b)):
            if set(subs_a) | set(subs_b) == {NO_SUBSET}:
                continue  # a source without subsets: its one `(none)` row repeats the source's
            rows.append({"source": source, "subset": subset,
                         **_delta(subs_a.get(subset, {}), subs_b.get(subset, {}), TALLY_FIELDS)})
    return rows


def drop_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Documents dropped per source and reason, before and after (pairs that are zero on both sides left out)."""
    rows = []
    for source in sorted(set(a) | set(b)):
        da, db = a.get(source, {}).get("drops", {}), b.get(source, {}).get("drops", {})
        for reason in sorted(set(da) | set(db)):
            x, y = da.get(reason, 0), db.get(reason, 0)
            if x or y:
                rows.append({"source": source, "reason": reason, "a": x, "b": y, "delta": y - x})
    return rows


def token_counts(fs, stage_dir: str, content: dict[str, Any]) -> dict[str, Any] | None:
    """Tokens per split, and documents and tokens per (source, subset) (subset None: the whole source).

    From the stage's tokens.json, else (no tokens.json) from the manifest's report and per-shard stats; None when
    neither records tokens.
    """
    index = storage.read_json(fs, storage.join(stage_dir, TOKENS_FILE))
    if index is not None:  # a malformed index is an error naming its key, not a silent fall back to the report
        index = tokens_json.validate(index, storage.join(stage_dir, TOKENS_FILE))
    splits: dict[str, int] = {}
    by: dict[tuple[str, str | None], dict[str, int]] = {}

    def add(source: str, subset: str | None, docs: int, tokens: int) -> None:
        cell = by.setdefault((source, subset), {"documents": 0, "tokens": 0})
        cell["documents"] += docs
        cell["tokens"] += tokens

    if isinstance(index, dict) and "splits" in index:
        for split, entry in index["splits"].items():
            splits[split] = entry.get("tokens", sum(f.get("tokens", 0) for f in entry.get("files", [])))
            for f in entry.get("files", []):
                for source, s in f.get("by_source", {}).items():
                    add(source, None, s.get("documents", 0), s.get("tokens", 0))
                    for subset, sub in s.get("subsets", {}).items():
                        if subset != NO_SUBSET or len(s.get("subsets", {})) > 1:
                            add(source, subset, sub.get("documents", 0), sub.get("tokens", 0))
    else:
        report = content.get("report", {})
        if not isinstance(report.get("tokens"), dict):
            return None
        splits = dict(report["tokens"])
        for shard in content["shards"]:
            stats = shard.get("stats") or {}
            add(shard["source"], None, sum(stats.get("documents", {}).values()), sum(stats.get("tokens", {}).values()))
    return {"splits": splits, "by_source": by}


def token_rows(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    if a is None and b is None:
        return None
    a = a or {"splits": {}, "by_source": {}}
    b = b or {"splits": {}, "by_source": {}}
    splits = [{"split": s, "a": a["splits"].get(s, 0), "b": b["splits"].get(s, 0),
               "delta": b["splits"].get(s, 0) - a["splits"].get(s, 0)} for s in sorted(set(a["splits"]) | set(b["splits"]))]
    rows = []
    for key in sorted(set(a["by_source"]) | set(b["by_source"]), key=lambda k: (k[0], k[1] or "")):
        source, subset = key
        rows.append({"source": source, "subset": subset,
                     **_delta(a["by_source"].get(key, {}), b["by_source"].get(key, {}), ("documents", "tokens"))})
    return {"splits": splits, "by_source": rows}


def shard_changes(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, list]:
    """Kept shards by path: those whose recorded content hash differs, and those in one run only."""
    sa, sb = {s["path"]: s for s in a}, {s["path"]: s for s in b}
    changed = []
    for path in sorted(set(sa) & set(sb)):
        x, y = sa[path], sb[path]
        if x.get("content_hash") != y.get("content_hash"):
            changed.append({"path": path, "source": x["source"], "a_hash": x.get("content_hash"),
                            "b_hash": y.get("content_hash"), "a_docs": x["docs_out"], "b_docs": y["docs_out"]})
    def only(mine, other):
        return [{"path": p, "source": mine[p]["source"], "docs": mine[p]["docs_out"]} for p in sorted(set(mine) - set(other))]

    return {"changed": changed, "only_in_a": only(sa, sb), "only_in_b": only(sb, sa)}


# ---------------------------------------------------------------------------------------------------------- documents


def _read_texts(fs, stage_dir: str, held: list[tuple[dict[str, Any], list[str]]]) -> dict[str, str]:
    """The texts of these ids only (a filtered read of each shard that holds some); the first one for a repeated id."""
    out: dict[str, str] = {}
    for entry, ids in held:
        table = pq.read_table(storage.join(stage_dir, entry["path"]), columns=["id", "text"], filesystem=fs,
                              filters=pc.field("id").isin(ids))
        for row in table.to_pylist():
            out.setdefault(row["id"], row["text"] or "")
    return out


def _previews(fs, stage_dir: str, held: list[tuple[dict[str, Any], list[str]]]) -> dict[str, str]:
    """The first characters of the text of these ids only, whitespace collapsed."""
    out = {}
    for doc_id, text in _read_texts(fs, stage_dir, held).items():
        text = " ".join(text.split())
        out[doc_id] = text[:PREVIEW_CHARS] + ("..." if len(text) > PREVIEW_CHARS else "")
    return out


def text_change(a: str, b: str) -> dict[str, Any]:
    """Where two texts first differ (in characters) and a short excerpt of each from a little before that point.

    Excerpts are exact substrings (whitespace kept: a normalization change may be all there is to see);
    `start` is the character offset both excerpts begin at.
    """
    position = len(os.path.commonprefix([a, b]))
    start = max(0, position - EXCERPT_BEFORE)
    return {"position": position, "start": start,
            "a": {"chars": len(a), "excerpt": a[start:position + EXCERPT_AFTER]},
            "b": {"chars": len(b), "excerpt": b[start:position + EXCERPT_AFTER]}}


def _drop_reasons(fs, stage_dir: str, entries: list[dict[str, Any]], source: str, ids: list[str]) -> dict[str, str]:
    """Why these ids were dropped at this stage, from its dropped shards of `source` (id and drop_reason only)."""
    out: dict[str, str] = {}
    if not ids:
        return out
    for entry in entries:
        dropped = entry.get("dropped_path")
        if entry["source"] != source or not dropped or not entry.get("drops"):
            continue
        path = storage.join(stage_dir, dropped)
        if not storage.exists(fs, path):
            continue
        table = pq.read_table(path, columns=["id", "drop_reason"], filesystem=fs, filters=pc.field("id").isin(ids))
        out.update({r["id"]: r["drop_reason"] for r in table.to_pylist()})
        if len(out) == len(ids):
            break
    return out


def _held(kept: Kept, first: list[tuple]) -> list[tuple[dict[str, Any], list[str]]]:
    """The shards holding these (id, at, ...) rows, each with its ids: what `_read_texts` reads."""
    held: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for doc_id, at, *_ in first:
        entry = kept.shard_of(at)
        held.setdefault(entry["path"], (entry, []))[1].append(doc_id)
    return list(held.values())


def document_changes(fs_a, dir_a: str, content_a: dict[str, Any], fs_b, dir_b: str, content_b: dict[str, Any],
                     examples: int = 3) -> list[dict[str, Any]]:
    """Per source: documents kept in A and not in B (removed), in B and not in A (added), and kept in both with a
    different text under the same id (changed), with a few examples of each.

    Only shards whose content hash differs (or that one run lacks) are read, and only their `id` and `text_hash`
    columns (`kept.differences`). A removed or added example carries the first characters of its text and, when the
    other run dropped it at this stage, the reason; a changed one where the texts first differ and an excerpt of each
    (`text_change`).
    """
    sa, sb = {s["path"]: s for s in content_a["shards"]}, {s["path"]: s for s in content_b["shards"]}
    same = {p for p in set(sa) & set(sb) if sa[p].get("content_hash") == sb[p].get("content_hash")}
    by_source: dict[str, tuple[list, list]] = {}
    for side, shards in enumerate((sa, sb)):
        for path, entry in sorted(shards.items()):
            if path not in same:
                by_source.setdefault(entry["source"], ([], []))[side].append(entry)
    out = []
    for source, (entries_a, entries_b) in sorted(by_source.items()):
        kept_a, kept_b = scan_kept(fs_a, dir_a, entries_a), scan_kept(fs_b, dir_b, entries_b)
        found = differences(kept_a, kept_b, examples)
        if not found.removed and not found.added and not found.changed:
            continue
        row: dict[str, Any] = {"source": source, "removed": found.removed, "added": found.added,
                               "changed": found.changed}
        for name, first, kept, fs, stage_dir, other_fs, other_dir, other_content in (
                ("removed", found.removed_first, kept_a, fs_a, dir_a, fs_b, dir_b, content_b),
                ("added", found.added_first, kept_b, fs_b, dir_b, fs_a, dir_a, content_a)):
            few = [doc_id for doc_id, _ in first]
            previews = _previews(fs, stage_dir, _held(kept, first)) if few else {}
            reasons = _drop_reasons(other_fs, other_dir, other_content["shards"], source, few)
            row[f"{name}_examples"] = [{"id": i, "preview": previews.get(i, ""), "other_run_drop_reason": reasons.get(i)}
                                       for i in few]
        first = found.changed_first
        texts_a = _read_texts(fs_a, dir_a, _held(kept_a, first)) if first else {}
        texts_b = _read_texts(fs_b, dir_b, _held(kept_b, [(i, at_b) for i, _, at_b in first])) if first else {}
        row["changed_examples"] = [{"id": i, **text_change(texts_a.get(i, ""), texts_b.get(i, ""))}
                                   for i, _, _ in first]
        out.append(row)
    return out


# ---------------------------------------------------------------------------------------------------------- stages


def report_changes(a: dict[str, Any], b: dict[str, Any], limit: int = 50) -> list[dict[str, Any]]:
    """Keys of the stages' reports (flattened, dotted) whose values differ: what changed when nothing else did."""
    return _change_rows(flatten(a or {}, "report"), flatten(b or {}, "report"))[:limit]


def _input_hash(content: dict[str, Any]) -> str | None:
    return content["input"].get("manifest_hash") or content["input"].get("hash")


def diff_stage(stage: str, fs_a, dir_a: str, fs_b, dir_b: str, examples: int = 3,
               manifests: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None)) -> dict[str, Any]:
    """Everything that differs in one stage between two runs; `identical` when the manifests' content is equal.

    `manifests`: the two stage manifests when the caller has read them already (else read here)."""
    ma = manifests[0] or read_manifest(fs_a, dir_a, required=True)
    mb = manifests[1] or read_manifest(fs_b, dir_b, required=True)
    ca, cb = ma["content"], mb["content"]
    identical = content_hash(ca) == content_hash(cb)
    tokens = token_rows(token_counts(fs_a, dir_a, ca), token_counts(fs_b, dir_b, cb)) if stage == "tokenize" else None
    out: dict[str, Any] = {
        "stage": stage,
        "status": "identical" if identical else "different",
        "content_hash": {"a": content_hash(ca), "b": content_hash(cb)},
        "config_hash": {"a": ca["config_hash"], "b": cb["config_hash"]},
        "input": {"a": ca["input"].get("stage", "source files"), "b": cb["input"].get("stage", "source files"),
                  "changed": _input_hash(ca) != _input_hash(cb)},
        "schema_version": {"a": ca.get("schema_version"), "b": cb.get("schema_version")},
        "config": config_changes(stage, ca["config"], cb["config"]),
        "report": report_changes(ca.get("report", {}), cb.get("report", {})),
        "totals": _delta(ca["totals"], cb["totals"], TALLY_FIELDS),
        "by_source": count_rows(ca["by_source"], cb["by_source"]),
        "drops": drop_rows(ca["by_source"], cb["by_source"]),
        "tokens": tokens,
        "shards": {"changed": [], "only_in_a": [], "only_in_b": []},
        "documents": [],
    }
    if not identical:
        out["shards"] = shard_changes(ca["shards"], cb["shards"])
        out["documents"] = document_changes(fs_a, dir_a, ca, fs_b, dir_b, cb, examples)
    return out


def diff_runs(a: str, b: str, examples: int = 3) -> dict[str, Any]:
    """Compare two run folders (or two manifests of one stage); see docs/manifests.md for the shape."""
    fs_a, _, stages_a = locate(a)
    fs_b, _, stages_b = locate(b)
    for path, one, other, other_path in ((a, stages_a, stages_b, b), (b, stages_b, stages_a, a)):
        if _is_stage_path(path):
            # One side names a single stage: compare that stage alone, wherever the other side holds it.
            (stage,) = one
            if stage not in other:
                raise TokenmillError(f"cannot compare stage {stage!r} of {path} with {other_path}, which holds "
                                     f"no completed {stage!r} stage (it holds: {', '.join(other)})")
            stages_a, stages_b = {stage: stages_a[stage]}, {stage: stages_b[stage]}
            break
    manifests_a = {s: _read_or_none(fs_a, d) for s, d in stages_a.items()}
    manifests_b = {s: _read_or_none(fs_b, d) for s, d in stages_b.items()}
    edges = [(s, (m or {}).get("content", {}).get("input", {}).get("stage"))
             for manifests in (manifests_a, manifests_b) for s, m in manifests.items()]
    stages = []
    for stage in lineage_order(edges):  # in pipeline order, from the manifests: no stage module imported
        if stage not in stages_b:
            stages.append({"stage": stage, "status": "only in a"})
        elif stage not in stages_a:
            stages.append({"stage": stage, "status": "only in b"})
        else:
            stages.append(diff_stage(stage, fs_a, stages_a[stage], fs_b, stages_b[stage], examples,
                                     manifests=(manifests_a[stage], manifests_b[stage])))
    return {"a": str(a), "b": str(b), "identical": all(s["status"] == "identical" for s in stages), "stages": stages}


def _read_or_none(fs, stage_dir: str) -> dict[str, Any] | None:
    """The stage's manifest, or None when it cannot be read: `diff_stage` reads it again and says why."""
    try:
        return read_manifest(fs, stage_dir)
    except ManifestError:
        return None


def _is_stage_path(path: str) -> bool:
    """Whether a path names one stage (its folder or its manifest.json) rather than a run folder."""
    fs, p = storage.filesystem_for(str(path))
    p = p.rstrip("/")
    return fs.get_file_info(p).type == pafs.FileType.File or storage.exists(fs, storage.join(p, MANIFEST))
