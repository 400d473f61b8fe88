"""Documents of a stage: random kept or dropped samples, drop counts, a document before and after cleaning, and
examples of escape leaks (text still carrying an upstream serialization's escapes; docs/clean.md, section 1).

Samples are deterministic: ``random.Random(seed)`` over the rows in file order, so the same run and seed give the
same documents. Texts are read only for the chosen rows.
"""

from __future__ import annotations

import difflib
import json
import random
import re
from pathlib import Path
from typing import Sequence

import pyarrow.parquet as pq

from tokenmill.errors import TokenmillError
from tokenmill.inspect.runs import find_doc, iter_tables, manifest, shard_files

ANY = "*"  # `dropped=ANY` (or True): dropped documents of every reason


def _pick(run, stage: str, source: str | None, n: int, seed: int, dropped, where=None) -> list[dict]:
    """Choose ``n`` rows reading light columns only, then read the chosen rows in full (in file order).

    ``dropped``: None/False kept documents; True or ``ANY`` dropped ones; a string, dropped for that reason.
    ``where``: (extra columns, function table -> list[bool]) restricting the candidates.
    """
    dropped_files = dropped is not None and dropped is not False
    reason = None if dropped in (None, False, True, ANY) else str(dropped)
    light = list(dict.fromkeys(["id", "source", "drop_reason", *(where[0] if where else ())]))
    candidates: list[tuple[Path, int]] = []
    reasons: set[str] = set()
    sources: set[str] = set()
    for path, table in iter_tables(run, stage, dropped_files, light):
        sources.update(table["source"].to_pylist())
        keep = [True] * table.num_rows
        if source is not None:
            keep = [k and s == source for k, s in zip(keep, table["source"].to_pylist())]
        if dropped_files and "drop_reason" in table.column_names:
            found = table["drop_reason"].to_pylist()
            reasons.update(r for r in found if r)
            if reason is not None:
                keep = [k and r == reason for k, r in zip(keep, found)]
        if where is not None:
            keep = [k and w for k, w in zip(keep, where[1](table))]
        candidates += [(path, i) for i, k in enumerate(keep) if k]
    if source is not None and source not in sources:
        raise TokenmillError(f"stage {stage!r} has no {'dropped ' if dropped_files else ''}documents of source "
                             f"{source!r}; sources: {', '.join(sorted(sources)) or 'none'}")
    if reason is not None and reason not in reasons:
        raise TokenmillError(f"stage {stage!r} dropped no documents for {reason!r}; reasons: "
                             f"{', '.join(sorted(reasons)) or 'none'}")
    chosen = sorted(random.Random(seed).sample(candidates, min(n, len(candidates))))
    by_file: dict[Path, list[int]] = {}
    for path, i in chosen:
        by_file.setdefault(path, []).append(i)
    rows: list[dict] = []
    for path, idx in by_file.items():
        rows += pq.read_table(path).take(idx).to_pylist()
    return rows


def samples(run=None, stage: str = "clean", source: str | None = None, n: int = 5, seed: int = 0,
            dropped: str | bool | None = None, columns: Sequence[str] | None = None) -> list[dict]:
    """``n`` random documents of ``stage`` (kept; or dropped: ``dropped=True`` any reason, ``dropped="reason"`` one).

    Rows are dicts of the shard's columns (id, text, source, subset, meta, annotations, drop_reason when dropped),
    restricted to ``columns`` if given.
    """
    rows = _pick(run, stage, source, n, seed, dropped)
    if columns is not None:
        rows = [{c: r.get(c) for c in columns} for r in rows]
    return rows


def samples_per_source(run=None, stage: str = "clean", n: int = 2, seed: int = 0) -> dict[str, list[dict]]:
    """``n`` random kept documents of each source of a stage."""
    sources = sorted(manifest(run, stage)["by_source"])
    return {s: samples(run, stage, source=s, n=n, seed=seed) for s in sources}


def samples_per_reason(run=None, stage: str = "clean", n: int = 1, seed: int = 0) -> dict[str, list[dict]]:
    """``n`` random dropped documents for each drop reason of a stage."""
    reasons = sorted({r["reason"] for r in drop_counts(run, stage)})
    return {r: samples(run, stage, n=n, seed=seed, dropped=r) for r in reasons}


def drop_counts(run=None, stage: str = "clean") -> list[dict]:
    """Documents dropped per reason and source (from the manifest), most first: reason, source, docs, percent."""
    table = manifest(run, stage).get("drop_table", {})
    rows = [{"reason": reason, "source": source, "docs": cell["docs"], "percent": cell["percent"]}
            for reason, cells in table.items() for source, cell in cells.items()]
    return sorted(rows, key=lambda r: (-r["docs"], r["reason"], r["source"]))


def before_after(run=None, doc_id: str | None = None, before: str = "sample", after: str = "clean",
                 seed: int = 0, step: str | None = None) -> dict:
    """A document's text in ``before`` (its input stage) and in ``after`` (clean), with a line diff.

    Without ``doc_id``, a random document that cleaning changed (``clean_steps`` not empty, or naming ``step``,
    e.g. ``"escape_repair"``) is chosen by ``seed``. Changes inside a line's line ending or trailing space show in
    ``diff`` as repr lines.
    ``after_text`` is the cleaned text, or the text as dropped with ``drop_reason`` set.
    """
    if doc_id is None:
        changed = cleaned_ids(run, n=1, seed=seed, stage=after, step=step)
        if not changed:
            raise TokenmillError(f"no document was changed by {after!r}")
        doc_id = changed[0]
    old = find_doc(run, before, doc_id)
    new = find_doc(run, after, doc_id)
    if old is None and new is None:
        raise TokenmillError(f"no document {doc_id!r} in {before!r} or {after!r}")
    old_text = old["text"] if old else None
    new_text = new["text"] if new else None
    diff = list(difflib.unified_diff((old_text or "").splitlines(), (new_text or "").splitlines(),
                                     before, after, lineterm="", n=1))
    if not diff and old_text != new_text:
        diff = list(difflib.unified_diff([repr(x) for x in (old_text or "").splitlines(keepends=True)],
                                         [repr(x) for x in (new_text or "").splitlines(keepends=True)],
                                         before, after, lineterm="", n=0))
    new = new or {}
    return {"id": doc_id, "source": (old or new).get("source"), "subset": (old or new).get("subset"),
            "before_text": old_text, "after_text": new_text, "drop_reason": new.get("drop_reason"),
            "clean_steps": new.get("clean_steps"), "escape_counts": _json(new.get("escape_counts")),
            "changed": old_text != new_text, "diff": diff}


def cleaned_ids(run=None, n: int = 5, seed: int = 0, stage: str = "clean", step: str | None = None) -> list[str]:
    """Ids of ``n`` random kept documents that ``stage`` changed (``clean_steps`` not empty, or containing ``step``)."""
    def changed(table):
        if "clean_steps" not in table.column_names:
            return [False] * table.num_rows
        return [bool(s) and (step is None or step in s) for s in table["clean_steps"].to_pylist()]
    return [r["id"] for r in _pick(run, stage, None, n, seed, None, where=(["clean_steps"], changed))]


_LEAK = re.compile(r"\\[ntr\"/\\]|\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}|&(?:[a-zA-Z]{2,8}|#\d{2,5});|(?:%[0-9A-Fa-f]{2}){2,}")


def _json(value):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def excerpt(text: str, width: int = 240) -> str:
    """``width`` characters of ``text`` around its first escape-like sequence (its start when there is none)."""
    m = _LEAK.search(text or "")
    start = max(0, (m.start() if m else 0) - width // 3)
    return ("..." if start else "") + (text or "")[start:start + width] + ("..." if start + width < len(text or "") else "")


def escape_leaks(run=None, n: int = 5, seed: int = 0, stage: str = "clean") -> list[dict]:
    """Examples of escape leaks: dropped (``escape_<kind>``), repaired, and kept with leaks counted (flagged).

    Up to ``n`` of each status, random by ``seed``; each with id, source, subset, status, drop_reason,
    escape_score, escape_counts (dict), clean_steps and an ``excerpt`` around the first escape-like sequence.
    """
    def dropped_leak(table):
        return [bool(r) and r.startswith("escape_") for r in table["drop_reason"].to_pylist()]

    def repaired(table):
        return [bool(s) and "escape_repair" in s for s in table["clean_steps"].to_pylist()]

    def flagged(table):
        steps, counts = table["clean_steps"].to_pylist(), table["escape_counts"].to_pylist()
        return [not (s and "escape_repair" in s) and bool(_json(c)) for s, c in zip(steps, counts)]

    out = []
    kinds = [("dropped", True, (["drop_reason"], dropped_leak)),
             ("repaired", None, (["clean_steps"], repaired)),
             ("flagged", None, (["clean_steps", "escape_counts"], flagged))]
    for status, dropped, where in kinds:
        if dropped and not shard_files(run, stage, dropped=True):
            continue
        for r in _pick(run, stage, None, n, seed, dropped, where=where):
            out.append({"id": r["id"], "source": r["source"], "subset": r.get("subset"), "status": status,
                        "drop_reason": r.get("drop_reason"), "escape_score": r.get("escape_score"),
                        "escape_counts": _json(r.get("escape_counts")), "clean_steps": r.get("clean_steps"),
                        "excerpt": excerpt(r["text"])})
    return out


def leak_summary(run=None, stage: str = "clean") -> list[dict]:
    """Per source, from the clean manifest's ``report.leaks``: documents, documents with leaks, percent."""
    by_source = manifest(run, stage).get("report", {}).get("leaks", {}).get("by_source", {})
    return [{"source": s, "docs": e["docs"], "docs_with_leaks": e["docs_with_leaks"], "percent": e["percent"]}
            for s, e in sorted(by_source.items())]
