"""The clean stage's filters: each step (escapes, normalization, PII, blocklist, language, quality, classifiers) as a
`Filter`.

The steps themselves are pure functions over text in their own modules; a filter here only carries a step's
results onto the batch (text, columns, stats) and names its drops.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from tokenmill.documents import canonical_json
from tokenmill.stages.clean.classifiers import Classifier, ClassifierConfig, configured, load
from tokenmill.stages.clean.filter import Batch, Filter
from tokenmill.stages.clean.stats import WORST_EXAMPLES
from tokenmill.text.escapes import ESCAPE_DROP_REASONS, EscapePolicy, apply_policy
from tokenmill.text.langid import LangidConfig, identify, mismatch
from tokenmill.text.normalize import NormalizeConfig, normalize_document
from tokenmill.text.pii import PiiConfig, blocked, load_blocklist, replace_pii
from tokenmill.text.quality import FAMILY_REASONS, QUALITY_SCORE_COLUMNS, QualityConfig, family_reasons
from tokenmill.text.quality import quality_scores
from tokenmill.text.score_histogram import BINNING, QUANTILES, histogram_rows, quantile


class EscapeFilter(Filter):
    """Escape leaks on the raw text (the OPT lesson): scored, repaired where unambiguous, dropped above a threshold."""

    name = "escapes"
    setting = "escapes"
    drop_reasons = ESCAPE_DROP_REASONS
    adds = (pa.field("escape_score", pa.float32()), pa.field("escape_counts", pa.string()))
    edits = True

    def start(self, batch: Batch) -> None:
        batch.columns["escape_score"] = np.zeros(len(batch), dtype=np.float32)
        batch.columns["escape_counts"] = ["{}"] * len(batch)

    def process(self, batch: Batch, rows: list[int], settings: EscapePolicy) -> list[str | None]:
        reasons = []
        for i in rows:
            outcome = apply_policy(batch.texts[i], settings)
            scan = outcome.scan
            batch.columns["escape_score"][i] = scan.score
            if scan.counts:  # else the "{}" of `start`
                batch.columns["escape_counts"][i] = canonical_json(dict(sorted(scan.counts.items())))
            batch.stats.leaks(batch.ids[i], batch.sources[i], batch.subsets[i], scan, outcome)
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


class NormalizeFilter(Filter):
    """Unicode and whitespace normalization (code's own whitespace kept; a document judged code keeps its
    characters)."""

    name = "normalize"
    setting = "normalize"
    edits = True

    def process(self, batch: Batch, rows: list[int], settings: NormalizeConfig) -> None:
        for i in rows:
            done = normalize_document(batch.texts[i], settings)
            batch.texts[i] = done.text
            batch.steps[i] += done.changed
            batch.stats.count("normalize", done.counted())

    def report(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        return {"normalize": stats.get("normalize", {})}


class PiiFilter(Filter):
    """E-mail addresses, IP addresses and phone numbers replaced by placeholders."""

    name = "pii"
    setting = "pii"
    edits = True

    def process(self, batch: Batch, rows: list[int], settings: PiiConfig) -> None:
        for i in rows:
            batch.texts[i], found = replace_pii(batch.texts[i], settings)
            if found:
                batch.steps[i].append("pii:" + "+".join(sorted(found)))
                batch.stats.add("pii", found)

    def report(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        return {"pii": stats.get("pii", {})}


class BlocklistFilter(Filter):
    """Documents whose `meta.url` lies on a blocked domain (the list file is the stage's `blocklist` path)."""

    name = "blocklist"
    drop_reasons = ("blocked_domain",)

    def __init__(self) -> None:
        super().__init__()
        self.domains: frozenset[str] | None = None

    def setup(self, paths: Mapping[str, str | None]) -> None:
        if paths.get("blocklist") is not None:
            with open(paths["blocklist"], encoding="utf-8") as f:
                self.domains = load_blocklist(f)

    def process(self, batch: Batch, rows: list[int], settings: None) -> list[str | None]:
        if not self.domains:
            return [None] * len(rows)
        return ["blocked_domain" if blocked(json.loads(batch.metas[i]).get("url"), self.domains) else None
                for i in rows]


class EmptyFilter(Filter):
    """Documents with nothing but whitespace left (e.g. only zero-width or control characters, which normalization
    removes)."""

    name = "empty"
    drop_reasons = ("empty_after_cleaning",)

    def process(self, batch: Batch, rows: list[int], settings: None) -> list[str | None]:
        return [None if batch.texts[i].strip() else "empty_after_cleaning" for i in rows]


class LangidFilter(Filter):
    """fastText language identification: the document's language becomes the identified one; a confident mismatch
    with the source's declared language drops it."""

    name = "langid"
    setting = "langid"
    drop_reasons = ("wrong_language",)

    def process(self, batch: Batch, rows: list[int], settings: LangidConfig) -> list[str | None]:
        found, scores = identify([batch.texts[i] for i in rows], settings.quick_chars, settings.quick_min_score)
        reasons = []
        for i, lang, score in zip(rows, found, scores):
            expected = batch.langs[i]
            batch.langs[i], batch.lang_scores[i] = lang, score
            reasons.append("wrong_language" if mismatch(expected, lang, float(score), settings) else None)
        batch.stats.langs(batch.sources, batch.langs, rows)
        return reasons

    def report(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        return {"languages": stats.get("languages", {})}


class QualityScores(Filter):
    """Every quality score column for the documents still kept, apart from any threshold (STYLE 4): words are
    split once for all the families, and rows sharing quality settings are measured together (vectorised)."""

    name = "quality_scores"
    setting = "quality"
    adds = tuple(pa.field(name, dtype) for name, dtype in QUALITY_SCORE_COLUMNS.items())

    def start(self, batch: Batch) -> None:
        for name, dtype in QUALITY_SCORE_COLUMNS.items():
            batch.columns[name] = np.full(len(batch), np.nan, dtype=dtype.to_pandas_dtype())

    def process(self, batch: Batch, rows: list[int], settings: QualityConfig) -> None:
        scores = quality_scores([batch.texts[i] for i in rows], [batch.langs[i] for i in rows], settings)
        at = np.asarray(rows, dtype=np.int64)  # once, not once per column
        for name, values in scores.items():
            batch.columns[name][at] = values


class _QualityFamily(Filter):
    """One family of quality rules, on the scores `QualityScores` left in the batch."""

    setting = "quality"

    def process(self, batch: Batch, rows: list[int], settings: QualityConfig) -> Sequence[str | None]:
        at = np.asarray(rows, dtype=np.int64)  # once, not once per column
        scores = {name: batch.columns[name][at] for name in QUALITY_SCORE_COLUMNS}
        return family_reasons(self.name, scores, [batch.langs[i] for i in rows], settings)


class GopherQualityFilter(_QualityFamily):
    """Gopher's quality rules on words (Rae et al. 2021), outside the CJK languages."""

    name = "gopher_quality"
    drop_reasons = FAMILY_REASONS["gopher_quality"]


class GopherRepetitionFilter(_QualityFamily):
    """Gopher's repetition rules (lines, paragraphs, word n-grams), outside the CJK languages."""

    name = "gopher_repetition"
    drop_reasons = FAMILY_REASONS["gopher_repetition"]


class C4Filter(_QualityFamily):
    """C4's document rules (Raffel et al. 2020) on the lines C4 would keep, outside the CJK languages."""

    name = "c4"
    drop_reasons = FAMILY_REASONS["c4"]


class CJKQualityFilter(_QualityFamily):
    """Character-based rules for Chinese and Japanese, in place of the three word families."""

    name = "cjk"
    drop_reasons = FAMILY_REASONS["cjk"]


class ClassifierFilter(Filter):
    """fastText quality classifiers (`classifiers.py`): each scores EVERY document, kept or already dropped, into
    `<name>_score`, and drops the still-kept ones below its threshold as `low_<name>_score`: the threshold given,
    or the cut of a `top_fraction` rule (`batch.cuts`, computed by the `score` phase, `top_fraction.py`).

    Its columns and reasons depend on the config, so `build` declares them on the instance: one per classifier name
    in the stage's list and the overrides' lists (none: the filter adds nothing). Documents an earlier filter
    dropped are scored too, so that an audit sees what the classifier thinks of them (what the heuristics and the
    model disagree on): this costs fastText's time on the whole input instead of the kept part (docs/clean.md).
    A document whose source or subset has no such classifier (an override's list without it) gets NaN."""

    name = "classifiers"
    setting = "classifiers"

    def __init__(self) -> None:
        super().__init__()
        self.keys: dict[str, str] = {}
        """Each configured model path (as written) -> the config key that names it (`classifiers[0].model`)."""
        self.loaded: dict[str, Classifier] = {}
        self.config: Any = None

    @classmethod
    def build(cls, config: Any, overrides: Sequence[Any]) -> "ClassifierFilter":
        f = cls()
        f.config = config
        names: dict[str, None] = {}
        for key, c in configured(config) if hasattr(config, "classifiers") else ():
            names.setdefault(c.name)
            f.keys.setdefault(c.model, f"{key}.model")
        f.drop_reasons = tuple(f"low_{n}_score" for n in names)
        f.adds = tuple(pa.field(f"{n}_score", pa.float32()) for n in names)
        return f

    def setup(self, paths: Mapping[str, str | None]) -> None:
        for model, key in self.keys.items():
            if paths.get(key) is not None:  # the stage gives every model's file; else loaded by its path on first use
                # With the sha256 the stage's identity recorded on the driver, after the driver's full check: the
                # worker refuses other bytes, and reads every weight again only if this node has not checked them.
                self.loaded[model] = load(paths[key], paths.get(f"{key}.sha256"))

    def start(self, batch: Batch) -> None:
        for column in self.adds:
            batch.columns[column.name] = np.full(len(batch), np.nan, dtype=np.float32)

    def run(self, batch: Batch, settings_of) -> None:
        from tokenmill.classifier.score import score_texts

        rules: dict[int, str] = {}
        for settings, rows in self.groups(batch, settings_of, list(range(len(batch)))):
            at = np.asarray(rows, dtype=np.int64)
            texts = [batch.texts[i] for i in rows]
            sources = [batch.sources[i] for i in rows]
            # A top_fraction rule's pool: what the filters before the classifiers kept, whatever the others drop.
            pool = np.fromiter((batch.reasons[i] is None for i in rows), dtype=bool, count=len(rows))
            for c in settings:
                loaded = self.loaded.get(c.model) or self._load(c)
                scores = score_texts(loaded.model, texts, loaded.options, c.label)
                batch.columns[c.column][at] = scores
                threshold = c.keep.threshold
                if c.keep.top_fraction is not None:
                    # A rule is named by its entry's config key; the settings resolve to these same objects.
                    rules = rules or {id(e): key for key, e in configured(self.config)}
                    rule = rules[id(c)]
                    if batch.cuts is None:  # the score phase: rank only
                        batch.ranked[rule] = scores[pool]
                        continue
                    threshold = batch.cuts[rule]
                below = scores.astype(np.float64) < threshold
                kept = np.fromiter((batch.reasons[i] is None for i in rows), dtype=bool, count=len(rows))
                batch.stats.classified(c.name, sources, scores, below, below & kept, threshold)
                self.decide(batch, rows, [c.reason if b else None for b in below & kept])

    def _load(self, c: ClassifierConfig) -> Classifier:
        # A filter run without the stage's setup (a test on one batch): the model by its path as written.
        self.loaded[c.model] = load(c.model)
        return self.loaded[c.model]

    def report(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        """Per classifier and source: documents scored, below the threshold, dropped, the thresholds applied, the
        score histogram and quantiles read from it (nothing when no classifier is configured)."""
        if "classifiers" not in stats:
            return {}
        out, summary = {}, []
        for name, by_source in sorted(stats["classifiers"].items()):
            sources = {}
            for source, e in sorted(by_source.items()):
                percent = round(100.0 * e["dropped"] / e["scored"], 3) if e["scored"] else 0.0
                qs = {f"p{round(q * 100):02d}": quantile(e["histogram"], q) for q in QUANTILES}
                sources[source] = {
                    "scored": e["scored"], "below_threshold": e["below_threshold"], "dropped": e["dropped"],
                    "percent_dropped": percent, "thresholds": dict(sorted(e["thresholds"].items())),
                    "quantiles": {k: None if v is None else float(f"{v:.6g}") for k, v in qs.items()},
                    "histogram": histogram_rows(e["histogram"]),
                }
                thresholds = " / ".join(sorted(e["thresholds"]))
                median = qs["p50"]
                summary.append(f"classifier {name} on {source}: {e['dropped']:,} of {e['scored']:,} documents dropped "
                               f"below {thresholds} ({percent:.2f}%), median score {median:.3g}")
            out[name] = {"bins": BINNING, "by_source": sources}
        return {"classifiers": out, "summary": summary}


FILTERS: tuple[type[Filter], ...] = (
    EscapeFilter, NormalizeFilter, PiiFilter, BlocklistFilter, EmptyFilter, LangidFilter,
    QualityScores, GopherQualityFilter, GopherRepetitionFilter, C4Filter, CJKQualityFilter, ClassifierFilter,
)
"""The clean chain, in order: escape checks see the raw text; a document keeps the first reason it gets."""
