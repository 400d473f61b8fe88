"""The clean stage: escape-leak checks on the raw text, then normalization, PII, blocklist, language and quality."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from tokenmill.pipeline.documents import canonical_json
from tokenmill.pipeline.stage import Processed, Stage
from tokenmill.pipeline.stats import NO_SUBSET
from tokenmill.stages.clean.config import CleanConfig
from tokenmill.stages.clean.escapes import ESCAPE_DROP_REASONS, apply_policy
from tokenmill.stages.clean.langid import identify, mismatch
from tokenmill.stages.clean.normalize import normalize_with_layout
from tokenmill.stages.clean.pii import blocked, load_blocklist, replace_pii
from tokenmill.stages.clean.quality import QUALITY_DROP_REASONS, QUALITY_SCORE_COLUMNS, quality

WORST_EXAMPLES = 20
"""Leaking documents named in the manifest's leak report, worst first."""

CLEAN_COLUMNS = (
    pa.field("lang", pa.string()),
    pa.field("lang_score", pa.float32()),
    pa.field("escape_score", pa.float32()),
    pa.field("escape_counts", pa.string()),
    pa.field("clean_steps", pa.string()),
)


class CleanStage(Stage):
    name = "clean"
    needs = frozenset({"id", "text", "source", "subset", "meta"})
    adds = (*CLEAN_COLUMNS, *(pa.field(name, dtype) for name, dtype in QUALITY_SCORE_COLUMNS.items()))
    drop_reasons = (*ESCAPE_DROP_REASONS, "blocked_domain", "empty_after_cleaning", "wrong_language",
                    *QUALITY_DROP_REASONS)

    config: CleanConfig

    def __init__(self, config: CleanConfig, run):
        super().__init__(config, run)
        self.blocklist_path = None
        if config.blocklist is not None:
            path = Path(config.blocklist)
            self.blocklist_path = str(path if path.is_absolute() else Path(run.base_dir) / path)
        self._blocklist: frozenset[str] | None = None

    def identity(self) -> dict[str, Any]:
        identity = super().identity()
        identity["languages"] = {name: s.language for name, s in sorted(self.run.sources.items())}
        if self.blocklist_path is not None:
            # The list's content, not where it lies: the same list elsewhere gives the same output.
            identity["config"]["blocklist"] = "sha256:" + hashlib.sha256(Path(self.blocklist_path).read_bytes()).hexdigest()
        return identity

    def setup(self, shared: Mapping[str, Any]) -> None:
        if self.blocklist_path is not None:
            with open(self.blocklist_path, encoding="utf-8") as f:
                self._blocklist = load_blocklist(f)

    def setting(self, name: str, source: str, subset: str | None):
        """`escapes`, `normalize` or `quality` for a document: the most specific override that sets it (source and
        subset, then subset, then source), else the stage's own."""
        best, rank = getattr(self.config, name), -1
        for o in self.config.overrides:
            if getattr(o, name) is None:
                continue
            if (o.source is not None and o.source != source) or (o.subset is not None and o.subset != subset):
                continue
            r = (o.subset is not None) * 2 + (o.source is not None)
            if r > rank:
                best, rank = getattr(o, name), r
        return best

    def process(self, table: pa.Table, shared: Mapping[str, Any]) -> Processed:
        if self._blocklist is None and self.blocklist_path is not None:
            self.setup(shared)
        ids = table.column("id").to_pylist()
        texts = table.column("text").to_pylist()
        sources = table.column("source").to_pylist()
        subsets = table.column("subset").to_pylist()
        metas = table.column("meta").to_pylist()
        n = len(texts)
        reasons: list[str | None] = [None] * n
        out_texts = list(texts)
        escape_scores = np.zeros(n, dtype=np.float32)
        escape_counts = ["{}"] * n
        steps: list[list[str]] = [[] for _ in range(n)]
        stats = _Stats()

        for i in range(n):
            source, subset = sources[i], subsets[i]
            stats.doc(source, subset)
            outcome = apply_policy(texts[i], self.setting("escapes", source, subset))
            scan = outcome.scan
            escape_scores[i] = scan.score
            escape_counts[i] = canonical_json(dict(sorted(scan.counts.items())))
            stats.leaks(ids[i], source, subset, scan, outcome)
            if outcome.repaired:
                steps[i].append("escape_repair:" + "+".join(outcome.repaired))
            if outcome.drop_reason is not None:
                reasons[i] = outcome.drop_reason
                continue
            text, changed, layout = normalize_with_layout(outcome.text, self.setting("normalize", source, subset))
            steps[i] += changed
            stats.count("normalize", changed if layout is None else [*changed, layout])
            if self.config.pii is not None:
                text, found = replace_pii(text, self.config.pii)
                if found:
                    steps[i].append("pii:" + "+".join(sorted(found)))
                    stats.add("pii", found)
            out_texts[i] = text
            if self._blocklist and blocked(json.loads(metas[i]).get("url"), self._blocklist):
                reasons[i] = "blocked_domain"
            elif not text.strip():
                reasons[i] = "empty_after_cleaning"

        alive = [i for i in range(n) if reasons[i] is None]
        langs = [self.run.sources[s].language for s in sources]
        lang_scores = np.zeros(n, dtype=np.float32)
        if self.config.langid is not None and alive:
            found, scores = identify([out_texts[i] for i in alive])
            for i, lang, score in zip(alive, found, scores):
                expected = langs[i]
                langs[i], lang_scores[i] = lang, score
                if mismatch(expected, lang, float(score), self.config.langid):
                    reasons[i] = "wrong_language"
            stats.langs(sources, langs, alive)
        alive = [i for i in alive if reasons[i] is None]
        score_columns = {name: np.full(n, np.nan, dtype=dtype.to_pandas_dtype()) for name, dtype in QUALITY_SCORE_COLUMNS.items()}
        groups: dict[int, tuple[Any, list[int]]] = {}
        for i in alive:  # rows sharing quality rules are scored together (vectorised per group)
            rules = self.setting("quality", sources[i], subsets[i])
            groups.setdefault(id(rules), (rules, []))[1].append(i)
        for rules, rows in groups.values():
            scores, quality_reasons = quality([out_texts[i] for i in rows], [langs[i] for i in rows], rules)
            for name, values in scores.items():
                score_columns[name][rows] = values
            for i, reason in zip(rows, quality_reasons):
                reasons[i] = reason

        out = table.set_column(table.schema.get_field_index("text"), "text", pa.array(out_texts, pa.string()))
        columns = {
            "lang": pa.array(langs, pa.string()),
            "lang_score": pa.array(lang_scores),
            "escape_score": pa.array(escape_scores),
            "escape_counts": pa.array(escape_counts, pa.string()),
            "clean_steps": pa.array([",".join(s) for s in steps], pa.string()),
            **{name: pa.array(values, QUALITY_SCORE_COLUMNS[name]) for name, values in score_columns.items()},
        }
        for name, column in columns.items():
            if name in out.column_names:  # an earlier run of a stage that also annotates (re-cleaning)
                out = out.set_column(out.schema.get_field_index(name), name, column)
            else:
                out = out.append_column(name, column)
        return Processed(out, pa.array(reasons, pa.string()), stats.to_json())

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
        return {
            "leaks": {"by_source": by_source, "worst": worst},
            "normalize": stats.get("normalize", {}),
            "pii": stats.get("pii", {}),
            "languages": stats.get("languages", {}),
            "summary": summary,
        }


class _Stats:
    """Per-shard counts for the leak report and the other cleaning steps (summed across shards by the manifest)."""

    def __init__(self):
        self.data: dict[str, Any] = {"docs": {}, "leaks": {}, "examples": [], "normalize": {}, "pii": {}, "languages": {}}

    def doc(self, source: str, subset: str | None) -> None:
        key = subset if subset is not None else NO_SUBSET
        per = self.data["docs"].setdefault(source, {})
        per[key] = per.get(key, 0) + 1

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
        for i in rows:
            per = self.data["languages"].setdefault(sources[i], {})
            per[langs[i]] = per.get(langs[i], 0) + 1

    def to_json(self) -> dict[str, Any]:
        return self.data
