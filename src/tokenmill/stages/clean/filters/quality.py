"""The quality filters: every quality score measured once (`QualityScores`), then each family's rules on them (Gopher
quality, Gopher repetition, C4, and the character-based CJK rules), all set by the one `quality` block."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from tokenmill.stages.clean.filter import Batch, Case, Filter, Setting
from tokenmill.text.quality import FAMILY_REASONS, QUALITY_SCORE_COLUMNS, QualityConfig, family_reasons
from tokenmill.text.quality import C4Config, CJKQualityConfig, GopherQualityConfig, GopherRepetitionConfig
from tokenmill.text.quality import quality_scores

QUALITY = Setting("quality", QualityConfig, QualityConfig(), dumped=("stage", "override"), doc=(
    "Gopher quality, Gopher repetition and C4 rules (character-based measures for Chinese and Japanese); a family "
    "null turns it off. E.g. fewer words in an override for short-form sources such as Reddit comments."))
"""The one settings block of every quality filter."""

# ----------------------------------------------------------------------------------------------------------------
# One input per reason: each family alone, with only the rule under test switched on
# ----------------------------------------------------------------------------------------------------------------

WORDS = "river mountain forest village harbor market bridge castle garden meadow valley island".split()
HAN = "春夏秋冬东南西北上下左右"
FAMILIES = {"gopher_quality": GopherQualityConfig, "gopher_repetition": GopherRepetitionConfig, "c4": C4Config,
            "cjk": CJKQualityConfig}


def _off(model: type, **on: Any) -> Any:
    """`model` with every optional rule off but those in `on`."""
    fields = {name: None for name, f in model.model_fields.items() if f.default is not None and not f.is_required()
              and "None" in str(f.annotation)}
    lists = {name: () for name in ("top_n_grams", "dup_n_grams") if name in model.model_fields}
    flags = {name: False for name, f in model.model_fields.items() if f.annotation is bool}
    return model(**{**fields, **lists, **flags, **on})


def only(family: str, **on: Any) -> QualityConfig:
    """The quality block with `family` alone, and in it only the rules in `on`."""
    return QualityConfig(**{name: (_off(model, **on) if name == family else None) for name, model in FAMILIES.items()})


def _repetition_cases(family: str, lang: str) -> dict[str, Case]:
    units, sep = (WORDS, " ") if lang == "en" else (list(HAN), "")
    para = sep.join(units[:6]) + "."

    def repeated(part: list[str]) -> str:
        return sep.join(part * 3)

    cases = {
        "empty_text": ("", {}),
        "duplicate_paragraphs": (f"{para}\n\n{para}\n\n{para}", {"dup_para_frac": 0.3}),
        "duplicate_paragraph_chars": (f"{para}\n\n{para}", {"dup_para_char_frac": 0.2}),
        "duplicate_lines": (f"{para}\n{para}\n{para}", {"dup_line_frac": 0.3}),
        "duplicate_line_chars": (f"{para}\n{para}", {"dup_line_char_frac": 0.2}),
        **{f"dominant_{n}_gram": (repeated(units[:n]) * 2, {"top_n_grams": ((n, 0.2),)}) for n in (2, 3, 4)},
        **{f"duplicate_{n}_grams": (repeated(units), {"dup_n_grams": ((n, 0.1),)}) for n in range(5, 11)},
    }
    return {reason: Case(text, lang, only(family, **on)) for reason, (text, on) in cases.items()}


def _cases(family: str) -> dict[str, Case]:
    """The family's cases: a text, its language and the rule that drops it."""
    rules = {
        "gopher_quality": ("en", (
            ("too_few_words", "Too short.", {"min_doc_words": 50}),
            ("too_many_words", "one two three four five", {"max_doc_words": 3}),
            ("short_average_word", "a b c d e", {"min_avg_word_length": 3}),
            ("long_average_word", "antidisestablishmentarianism supercalifragilistic", {"max_avg_word_length": 10}),
            ("too_many_hashes", "# tags #one #two here", {"max_symbol_word_ratio": 0.1}),
            ("too_many_ellipses", "wait... what... no... yes...", {"max_symbol_word_ratio": 0.1}),
            ("too_many_bullet_lines", "- one\n- two\n- three", {"max_bullet_lines_ratio": 0.9}),
            ("too_many_ellipsis_lines", "one…\ntwo…\nthree", {"max_ellipsis_lines_ratio": 0.3}),
            ("too_few_alphabetic_words", "1 2 3 4 5 words", {"max_non_alpha_words_ratio": 0.8}),
            ("too_few_stop_words", "Cats sleep", {"min_stop_words": 2}),
        )),
        "gopher_repetition": ("en", ()),
        "c4": ("en", (
            ("lorem_ipsum", "Lorem ipsum dolor sit amet.", {"filter_lorem_ipsum": True}),
            ("curly_bracket", "Put the { brace here now.", {"filter_curly_bracket": True}),
            ("too_few_sentences", "Only one sentence here.", {"min_num_sentences": 5}),
        )),
        "cjk": ("zh", (
            ("too_few_chars", "短文。", {"min_chars": 50}),
            ("too_many_chars", HAN + "。", {"max_chars": 5}),
            ("too_few_cjk_chars", "Mostly Latin text 中。", {"min_cjk_char_ratio": 0.15}),
            ("too_many_bullet_lines", "- 春\n- 夏\n- 秋", {"max_bullet_lines_ratio": 0.9}),
            ("too_many_ellipsis_lines", "春…\n夏…\n秋", {"max_ellipsis_lines_ratio": 0.3}),
            ("too_few_stop_chars", "春夏秋冬。", {"min_stop_chars": 1}),
            ("too_few_sentences", "春夏秋冬", {"min_sentences": 1}),
        )),
    }
    lang, listed = rules[family]
    cases = _repetition_cases(family, lang) if family in ("gopher_repetition", "cjk") else {}
    return {**cases, **{reason: Case(text, lang, only(family, **on)) for reason, text, on in listed}}


class QualityScores(Filter):
    """Every quality score column for the documents still kept, apart from any threshold (STYLE 4): words are
    split once for all the families, and rows sharing quality settings are measured together (vectorised)."""

    name = "quality_scores"
    order = 70
    settings = QUALITY
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

    settings = QUALITY

    def process(self, batch: Batch, rows: list[int], settings: QualityConfig) -> Sequence[str | None]:
        at = np.asarray(rows, dtype=np.int64)  # once, not once per column
        scores = {name: batch.columns[name][at] for name in QUALITY_SCORE_COLUMNS}
        return family_reasons(self.name, scores, [batch.langs[i] for i in rows], settings)


class GopherQualityFilter(_QualityFamily):
    """Gopher's quality rules on words (Rae et al. 2021), outside the CJK languages."""

    name = "gopher_quality"
    order = 71
    drop_reasons = FAMILY_REASONS["gopher_quality"]
    cases = _cases("gopher_quality")


class GopherRepetitionFilter(_QualityFamily):
    """Gopher's repetition rules (lines, paragraphs, word n-grams), outside the CJK languages."""

    name = "gopher_repetition"
    order = 72
    drop_reasons = FAMILY_REASONS["gopher_repetition"]
    cases = _cases("gopher_repetition")


class C4Filter(_QualityFamily):
    """C4's document rules (Raffel et al. 2020) on the lines C4 would keep, outside the CJK languages."""

    name = "c4"
    order = 73
    drop_reasons = FAMILY_REASONS["c4"]
    cases = _cases("c4")


class CJKQualityFilter(_QualityFamily):
    """Character-based rules for Chinese and Japanese, in place of the three word families."""

    name = "cjk"
    order = 74
    drop_reasons = FAMILY_REASONS["cjk"]
    cases = _cases("cjk")
