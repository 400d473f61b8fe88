"""Quality rules: scores against the config's thresholds, family by family; the first rule a document fails names it.

Four families, in the order datatrove runs its filters: Gopher quality, Gopher repetition and C4 on words (every
language outside `cjk.languages`), and the CJK character rules on the rest. Within a family, rules run in
datatrove's order. `family_reasons` decides one family (the clean chain runs one filter per family);
`quality_reasons` all four, `quality` measures and decides.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tokenmill.text.quality.config import (
    DUP_N_GRAM_SIZES,
    TOP_N_GRAM_SIZES,
    CJKQualityConfig,
    GopherRepetitionConfig,
    QualityConfig,
)
from tokenmill.text.quality.measures import cjk_profile, quality_scores

GOPHER_QUALITY_REASONS: tuple[str, ...] = (
    "too_few_words", "too_many_words", "short_average_word", "long_average_word", "too_many_hashes",
    "too_many_ellipses", "too_many_bullet_lines", "too_many_ellipsis_lines", "too_few_alphabetic_words",
    "too_few_stop_words",
)
REPETITION_REASONS: tuple[str, ...] = (
    "empty_text", "duplicate_paragraphs", "duplicate_paragraph_chars", "duplicate_lines", "duplicate_line_chars",
    *(f"dominant_{n}_gram" for n in TOP_N_GRAM_SIZES),
    *(f"duplicate_{n}_grams" for n in DUP_N_GRAM_SIZES),
)
C4_REASONS: tuple[str, ...] = ("lorem_ipsum", "curly_bracket", "too_few_sentences")
CJK_REASONS: tuple[str, ...] = (
    "too_few_chars", "too_many_chars", "too_few_cjk_chars", "too_many_bullet_lines", "too_many_ellipsis_lines",
    "too_few_stop_chars", *REPETITION_REASONS, "too_few_sentences",
)

FAMILY_REASONS: dict[str, tuple[str, ...]] = {
    "gopher_quality": GOPHER_QUALITY_REASONS,
    "gopher_repetition": REPETITION_REASONS,
    "c4": C4_REASONS,
    "cjk": CJK_REASONS,
}
"""Each family (a `QualityConfig` field) and the reasons it may give, in the order the families run."""

QUALITY_DROP_REASONS: tuple[str, ...] = tuple(dict.fromkeys(r for family in FAMILY_REASONS.values() for r in family))
"""Every reason `quality` may give (the families' reasons in family order, each once), named for the failure.
`dominant_<n>_gram`: the most frequent n-gram covers too many characters; `duplicate_<n>_grams`: too many
characters sit in repeated n-grams."""

Rules = list[tuple[np.ndarray, str]]
"""(failing mask over all documents, reason), in the order the rules run."""


def _gopher_quality_rules(config: QualityConfig, s: dict[str, np.ndarray], langs: Sequence[str]) -> Rules:
    rules: Rules = []
    g = config.gopher_quality
    if g is None:
        return rules
    if g.stop_word_languages is not None:
        allowed = set(g.stop_word_languages)
        stop_rule = np.fromiter((lang in allowed for lang in langs), dtype=bool, count=len(langs))
    else:
        stop_rule = np.ones(len(langs), dtype=bool)
    with np.errstate(invalid="ignore"):  # NaN compares False: a measure not taken never fails its rule
        words, mean = s["gopher_words"], s["gopher_mean_word_length"]
        for value, mask, reason in (
            (g.min_doc_words, lambda v: words < v, "too_few_words"),
            (g.max_doc_words, lambda v: words > v, "too_many_words"),
            (g.min_avg_word_length, lambda v: mean < v, "short_average_word"),
            (g.max_avg_word_length, lambda v: mean > v, "long_average_word"),
            (g.max_symbol_word_ratio, lambda v: s["gopher_hash_ratio"] > v, "too_many_hashes"),
            (g.max_symbol_word_ratio, lambda v: s["gopher_ellipsis_ratio"] > v, "too_many_ellipses"),
            (g.max_bullet_lines_ratio, lambda v: s["gopher_bullet_line_ratio"] > v, "too_many_bullet_lines"),
            (g.max_ellipsis_lines_ratio, lambda v: s["gopher_ellipsis_line_ratio"] > v, "too_many_ellipsis_lines"),
            (g.max_non_alpha_words_ratio, lambda v: s["gopher_alpha_word_ratio"] < v, "too_few_alphabetic_words"),
            (g.min_stop_words, lambda v: stop_rule & (s["gopher_stop_words"] < v), "too_few_stop_words"),
        ):
            if value is not None:
                rules.append((mask(value), reason))
    return rules


def _gopher_repetition_rules(config: QualityConfig, s: dict[str, np.ndarray], langs: Sequence[str]) -> Rules:
    if config.gopher_repetition is None:
        return []
    with np.errstate(invalid="ignore"):
        return _repetition_rules(config.gopher_repetition, s)


def _c4_rules(config: QualityConfig, s: dict[str, np.ndarray], langs: Sequence[str]) -> Rules:
    rules: Rules = []
    if (c := config.c4) is None:
        return rules
    with np.errstate(invalid="ignore"):
        if c.filter_lorem_ipsum:
            rules.append((s["c4_lorem_ipsum_lines"] > 0, "lorem_ipsum"))
        if c.filter_curly_bracket:
            rules.append((s["c4_curly_bracket_lines"] > 0, "curly_bracket"))
        if c.min_num_sentences is not None:
            rules.append((s["c4_sentences"] < c.min_num_sentences, "too_few_sentences"))
    return rules


def _cjk_rules(config: QualityConfig, s: dict[str, np.ndarray], langs: Sequence[str]) -> Rules:
    return [] if config.cjk is None else _rules_cjk(config.cjk, s)


_FAMILY_RULES = {"gopher_quality": _gopher_quality_rules, "gopher_repetition": _gopher_repetition_rules,
                 "c4": _c4_rules, "cjk": _cjk_rules}


def family_reasons(
    family: str, scores: dict[str, np.ndarray], langs: Sequence[str], config: QualityConfig
) -> list[str | None]:
    """The first rule of `family` each document fails (None = passes, or the family does not measure it)."""
    n = len(langs)
    reasons = np.full(n, None, dtype=object)
    is_cjk = cjk_profile(langs, config)
    members = is_cjk if family == "cjk" else ~is_cjk
    for failing, reason in reversed(_FAMILY_RULES[family](config, scores, langs)):  # the earliest rule wins
        reasons[members & failing] = reason
    return reasons.tolist()


def _repetition_rules(
    r: GopherRepetitionConfig | CJKQualityConfig, s: dict[str, np.ndarray]
) -> Rules:
    rules = [(s["rep_dup_para_frac"] != s["rep_dup_para_frac"], "empty_text")]  # NaN: datatrove's "empty"
    for value, column, reason in (
        (r.dup_para_frac, "rep_dup_para_frac", "duplicate_paragraphs"),
        (r.dup_para_char_frac, "rep_dup_para_char_frac", "duplicate_paragraph_chars"),
        (r.dup_line_frac, "rep_dup_line_frac", "duplicate_lines"),
        (r.dup_line_char_frac, "rep_dup_line_char_frac", "duplicate_line_chars"),
    ):
        if value is not None:
            rules.append((s[column] > value, reason))
    rules += [(s[f"rep_top_{n}_gram_char_frac"] > v, f"dominant_{n}_gram") for n, v in r.top_n_grams]
    rules += [(s[f"rep_dup_{n}_gram_char_frac"] > v, f"duplicate_{n}_grams") for n, v in r.dup_n_grams]
    return rules


def _rules_cjk(cfg: CJKQualityConfig, s: dict[str, np.ndarray]) -> Rules:
    rules: Rules = []
    with np.errstate(invalid="ignore"):
        many_lines = s["cjk_lines"] >= cfg.line_rules_min_lines
        for value, mask, reason in (
            (cfg.min_chars, lambda v: s["cjk_chars"] < v, "too_few_chars"),
            (cfg.max_chars, lambda v: s["cjk_chars"] > v, "too_many_chars"),
            (cfg.min_cjk_char_ratio, lambda v: s["cjk_char_ratio"] < v, "too_few_cjk_chars"),
            (cfg.max_bullet_lines_ratio, lambda v: many_lines & (s["gopher_bullet_line_ratio"] > v),
             "too_many_bullet_lines"),
            (cfg.max_ellipsis_lines_ratio, lambda v: many_lines & (s["gopher_ellipsis_line_ratio"] > v),
             "too_many_ellipsis_lines"),
            (cfg.min_stop_chars, lambda v: s["cjk_stop_chars"] < v, "too_few_stop_chars"),
        ):
            if value is not None:
                rules.append((mask(value), reason))
        rules += _repetition_rules(cfg, s)
        if cfg.min_sentences is not None:
            rules.append((s["cjk_sentences"] < cfg.min_sentences, "too_few_sentences"))
    return rules


def quality_reasons(scores: dict[str, np.ndarray], langs: Sequence[str], config: QualityConfig) -> list[str | None]:
    """The first rule each document fails, from its scores and the config's thresholds (None = kept)."""
    reasons: list[str | None] = [None] * len(langs)
    for family in FAMILY_REASONS:
        for i, reason in enumerate(family_reasons(family, scores, langs, config)):
            if reasons[i] is None:
                reasons[i] = reason
    return reasons


def quality(
    texts: Sequence[str], langs: Sequence[str], config: QualityConfig
) -> tuple[dict[str, np.ndarray], list[str | None]]:
    """Scores per column for every document, and the first failing reason per document (None = kept)."""
    scores = quality_scores(texts, langs, config)
    return scores, quality_reasons(scores, langs, config)
