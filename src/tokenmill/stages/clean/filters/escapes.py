"""The escape filter: escape leaks on the raw text (the OPT lesson) scored, repaired where unambiguous, dropped above a
threshold; the manifest's leak report."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from tokenmill.documents import NO_SUBSET, canonical_json
from tokenmill.stages.clean.filter import Batch, Case, Filter, Setting
from tokenmill.text.escapes import (ESCAPE_DROP_REASONS, EscapeOutcome, EscapePolicy, EscapeScan, apply_policy,
                                    may_leak)

WORST_EXAMPLES = 20
"""Leaking documents named in the manifest's leak report, worst first."""

KIND_EXAMPLES = [
    # (kind, a text with that kind only, occurrences, characters): the filter's cases and the scanner's tests
    ("literal_newline", r"First line.\nSecond line.\nThird line follows here.", 2, 4),
    ("literal_tab", r"Name:\tAlice\tBob went home early today.", 2, 4),
    ("literal_cr", r"Old Mac text\rends lines this way\rand so on, you see.", 2, 4),
    ("escaped_quote", r"He said \"no\" and then it\'s over, they say.", 3, 6),
    ("escaped_slash", r"See https:\/\/example.com\/about for more details.", 3, 6),
    ("escaped_backslash", r"The left side \\ the right side of the page.", 1, 2),
    ("backslash_run", r"Une fois \\\\ puis encore \\\\\\ et voila la fin.", 2, 10),
    ("unicode_escape", r"A caf\u00e9 in Paris, na\u00efve, with a smile \ud83d\ude00 today.", 4, 24),
    ("hex_escape", r"It\xe2\x80\x99s raining again in the city tonight.", 3, 12),
    ("double_escaped", r"one\\ntwo says \\\"hi\\\" to caf\\u00e9 now.", 4, 3 + 4 + 4 + 7),
    ("html_entity", "Tom &amp; Jerry&#39;s &#x27;show&#x27;&nbsp;is &quot;on&quot; now.", 7, 5 + 5 + 6 + 6 + 6 + 6 + 6),
    ("percent_encoding", "The file was saved as Quarterly%20Report%3A%20Final before lunch.", 3, 9),
]


class EscapeFilter(Filter):
    """Escape leaks on the raw text (the OPT lesson): scored, repaired where unambiguous, dropped above a threshold."""

    name = "escapes"
    order = 10
    settings = Setting("escapes", EscapePolicy, EscapePolicy(), dumped=("stage", "override"), doc=(
        "What to do with text that still carries escapes from an upstream serialization (the OPT lesson), e.g. "
        "`{mode: flag}` for a subset of code."))
    drop_reasons = ESCAPE_DROP_REASONS
    adds = (pa.field("escape_score", pa.float32()), pa.field("escape_counts", pa.string()))
    edits = True
    sections = {"leaks": {}, "examples": []}
    cases = {f"escape_{kind}": Case(text, settings=EscapePolicy(mode="drop", threshold=0.0))
             for kind, text, *_ in KIND_EXAMPLES}

    def start(self, batch: Batch) -> None:
        batch.columns["escape_score"] = np.zeros(len(batch), dtype=np.float32)
        batch.columns["escape_counts"] = ["{}"] * len(batch)

    def process(self, batch: Batch, rows: list[int], settings: EscapePolicy) -> list[str | None]:
        reasons = []
        for i in rows:
            if not may_leak(batch.texts[i]):  # kept as it is, with `start`'s score 0 and "{}"
                reasons.append(None)
                continue
            outcome = apply_policy(batch.texts[i], settings)
            scan = outcome.scan
            batch.columns["escape_score"][i] = scan.score
            if scan.counts:  # else the "{}" of `start`
                batch.columns["escape_counts"][i] = canonical_json(dict(sorted(scan.counts.items())))
                _count_leak(batch, i, scan, outcome)
            if outcome.repaired:
                batch.steps[i].append("escape_repair:" + "+".join(outcome.repaired))
            if outcome.drop_reason is None:  # a dropped document keeps its text as it came
                batch.texts[i] = outcome.text
            reasons.append(outcome.drop_reason)
        return reasons

    def report(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        """The leak report: per source and subset, documents and characters per escape kind, and the worst ids."""
        docs = stats.get("docs", {})
        leaks = stats.get("leaks", {})
        by_source = {}
        summary = []
        for source in sorted(docs):
            total = sum(docs[source].values())
            kinds = leaks.get(source, {})
            affected = sum(v["docs_any"] for v in kinds.values()) if kinds else 0
            subsets = {}
            for subset, n in sorted(docs[source].items()):
                entry = kinds.get(subset, {})
                subsets[subset] = {
                    "docs": n,
                    "docs_with_leaks": entry.get("docs_any", 0),
                    "percent": round(100.0 * entry.get("docs_any", 0) / n, 3) if n else 0.0,
                    "by_kind": entry.get("by_kind", {}),
                    "repaired": entry.get("repaired", 0),
                    "dropped": entry.get("dropped", 0),
                }
            percent = round(100.0 * affected / total, 3) if total else 0.0
            by_source[source] = {"docs": total, "docs_with_leaks": affected, "percent": percent, "subsets": subsets}
            if affected:
                summary.append(f"escape leaks in {source}: {affected:,} of {total:,} documents ({percent:.2f}%)")
        worst = sorted(stats.get("examples", []), key=lambda e: (-e["score"], e["id"]))[:WORST_EXAMPLES]
        return {"leaks": {"by_source": by_source, "worst": worst}, "summary": summary}


def _count_leak(batch: Batch, i: int, scan: EscapeScan, outcome: EscapeOutcome) -> None:
    """Row `i`'s leaks into the `leaks` section (per source and subset, per kind) and the worst `examples`."""
    source, subset = batch.sources[i], batch.subsets[i]
    entry = batch.stats.section("leaks").setdefault(source, {}).setdefault(subset if subset is not None else NO_SUBSET, {
        "docs_any": 0, "by_kind": {}, "repaired": 0, "dropped": 0})
    entry["docs_any"] += 1
    for kind, count in scan.counts.items():
        k = entry["by_kind"].setdefault(kind, {"docs": 0, "occurrences": 0})
        k["docs"] += 1
        k["occurrences"] += count
    entry["by_kind"].setdefault("_chars", {"docs": 0, "occurrences": 0})["occurrences"] += scan.chars
    entry["repaired"] += bool(outcome.repaired)
    entry["dropped"] += outcome.drop_reason is not None
    examples = batch.stats.section("examples", [])
    examples.append({"id": batch.ids[i], "source": source, "subset": subset, "score": round(float(scan.score), 6),
                     "kinds": dict(sorted(scan.counts.items())), "action": outcome.drop_reason or
                     ("repaired" if outcome.repaired else "kept")})
    batch.stats.data["examples"] = sorted(examples, key=lambda e: (-e["score"], e["id"]))[:WORST_EXAMPLES]
