"""The clean stage's per-shard counts: documents, escape leaks and their worst examples, edits, PII, languages."""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

from tokenmill.documents import NO_SUBSET

WORST_EXAMPLES = 20
"""Leaking documents named in the manifest's leak report, worst first."""


class CleanStats:
    """Per-shard counts for the leak report and the other cleaning steps (summed across shards by the manifest)."""

    def __init__(self):
        self.data: dict[str, Any] = {"docs": {}, "leaks": {}, "examples": [], "normalize": {}, "pii": {}, "languages": {}}

    def docs(self, sources: Sequence[str], subsets: Sequence[str | None]) -> None:
        """Count documents per source and subset (tallied in C, then added in first-seen order, as one by one)."""
        for (source, subset), n in Counter(zip(sources, subsets)).items():
            key = subset if subset is not None else NO_SUBSET
            per = self.data["docs"].setdefault(source, {})
            per[key] = per.get(key, 0) + n

    def leaks(self, doc_id: str, source: str, subset: str | None, scan, outcome) -> None:
        if not scan.counts:
            return
        entry = self.data["leaks"].setdefault(source, {}).setdefault(subset if subset is not None else NO_SUBSET, {
            "docs_any": 0, "by_kind": {}, "repaired": 0, "dropped": 0})
        entry["docs_any"] += 1
        for kind, count in scan.counts.items():
            k = entry["by_kind"].setdefault(kind, {"docs": 0, "occurrences": 0})
            k["docs"] += 1
            k["occurrences"] += count
        entry["by_kind"].setdefault("_chars", {"docs": 0, "occurrences": 0})["occurrences"] += scan.chars
        entry["repaired"] += bool(outcome.repaired)
        entry["dropped"] += outcome.drop_reason is not None
        self.data["examples"].append({"id": doc_id, "source": source, "subset": subset, "score": round(float(scan.score), 6),
                                      "kinds": dict(sorted(scan.counts.items())), "action": outcome.drop_reason or
                                      ("repaired" if outcome.repaired else "kept")})
        self.data["examples"] = sorted(self.data["examples"], key=lambda e: (-e["score"], e["id"]))[:WORST_EXAMPLES]

    def count(self, section: str, names) -> None:
        for name in names:
            self.data[section][name] = self.data[section].get(name, 0) + 1

    def add(self, section: str, counts: Mapping[str, int]) -> None:
        for name, value in counts.items():
            self.data[section][name] = self.data[section].get(name, 0) + value

    def langs(self, sources, langs, rows) -> None:
        for (source, lang), n in Counter(zip(map(sources.__getitem__, rows), map(langs.__getitem__, rows))).items():
            per = self.data["languages"].setdefault(source, {})
            per[lang] = per.get(lang, 0) + n

    def classified(self, name: str, sources: Sequence[str], scores, below, dropped, threshold: float) -> None:
        """One classifier's scores of some documents (numpy arrays, one value per document of `sources`): per source,
        documents scored, below the threshold, dropped (below it and still kept), the threshold applied (documents
        per threshold) and the score histogram (`text/score_histogram.py`). The section exists only when a classifier
        ran, so a config without one writes the stats it always wrote."""
        import numpy as np

        from tokenmill.text.score_histogram import bin_counts

        per_name = self.data.setdefault("classifiers", {}).setdefault(name, {})
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

    def to_json(self) -> dict[str, Any]:
        return self.data
