"""Evaluation-set contamination found by the decontaminate stage (docs/decontaminate.md): every hit from
``decontaminate/hits.parquet`` counted per evaluation set and source, the manifest's per-set summary, and examples.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.errors import TokenmillError
from tokenmill.inspect.runs import manifest, stage_dir


def hits(run=None) -> pa.Table:
    """``hits.parquet``: id, source, subset, evalset, item, field, rule ("ngram", or "whole" for a short field
    matched whole), start, end, text (the matched span)."""
    path = stage_dir(run, "decontaminate") / "hits.parquet"
    if not path.is_file():
        raise TokenmillError(f"{path} does not exist: the decontaminate stage has not completed")
    return pq.read_table(path)


def contamination_hits(run=None) -> list[dict]:
    """Per evaluation set and source: hits (matched n-gram spans), documents and evaluation items involved."""
    groups: dict[tuple[str, str], dict[str, set | int]] = {}
    for r in hits(run).to_pylist():
        g = groups.setdefault((r["evalset"], r["source"]), {"hits": 0, "documents": set(), "items": set()})
        g["hits"] += 1
        g["documents"].add(r["id"])
        g["items"].add(r["item"])
    return [{"evalset": e, "source": s, "hits": g["hits"], "documents": len(g["documents"]), "items": len(g["items"])}
            for (e, s), g in sorted(groups.items())]


def evalset_summary(run=None) -> list[dict]:
    """Per evaluation set, from the manifest: items; n and how many items were checkable by n-gram, as a whole
    (short fields), or not at all (too short, no text); the segments checked (a field, or each line of a
    multiple-choice prompt) by n-gram and as a whole, of how many; items found in the corpus, and their fraction."""
    report = manifest(run, "decontaminate").get("report", {})
    return [{"evalset": name, "items": e["items"], "n": e.get("n"), "checked_ngram": e.get("checked_ngram"),
             "checked_whole": e.get("checked_whole"),
             "too_short": e.get("not_checkable", {}).get("too_short"),
             "no_text": e.get("not_checkable", {}).get("no_text"),
             "segments": e.get("segments", {}).get("total"),
             "segments_ngram": e.get("segments", {}).get("ngram"),
             "segments_whole": e.get("segments", {}).get("whole"),
             "found": e["found"], "fraction": e["fraction"]}
            for name, e in report.get("evalsets", {}).items()]


def _merge(spans: list[dict]) -> str:
    """The text of overlapping n-gram hits joined by their offsets; gaps shown as " ... "."""
    text, end = "", None
    for h in sorted(spans, key=lambda h: (h["start"], h["end"])):
        if end is None or h["start"] >= end or len(h["text"]) != h["end"] - h["start"]:
            text += ("" if end is None else " ... ") + h["text"]
        elif h["end"] > end:
            text += h["text"][end - h["start"]:]
        end = h["end"] if end is None else max(end, h["end"])
    return text


def hit_examples(run=None, n: int = 5, seed: int = 0) -> list[dict]:
    """``n`` random (document, item) matches, by ``seed``: id, source, evalset, item, fields, n-gram hits, and the
    matched text (the overlapping n-grams joined)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in hits(run).to_pylist():
        groups.setdefault((r["id"], r["item"]), []).append(r)
    keys = sorted(random.Random(seed).sample(sorted(groups), min(n, len(groups))))
    out = []
    for k in keys:
        spans = groups[k]
        first = spans[0]
        out.append({"id": first["id"], "source": first["source"], "subset": first["subset"],
                    "evalset": first["evalset"], "item": first["item"],
                    "fields": sorted({h["field"] for h in spans}), "hits": len(spans), "text": _merge(spans)})
    return out
