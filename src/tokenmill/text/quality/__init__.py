"""Document quality: datatrove's Gopher quality, Gopher repetition and C4 rules; character rules for Chinese, Japanese.

Scores first, thresholds second (STYLE 4): `quality_scores` measures every document and returns one column per
measure (`QUALITY_SCORE_COLUMNS`); `quality_reasons` compares the columns with the config's thresholds and names
the first rule a document fails (`QUALITY_DROP_REASONS`). `quality` does both.

The rules are datatrove's (`GopherQualityFilter`, `GopherRepetitionFilter`, `C4QualityFilter`, datatrove 0.10),
re-implemented over whole batches because datatrove's per-document code stops at the first failing rule (we keep
every score) and spends most of its time building n-gram strings; `tests/text/test_quality.py` checks that
keep/drop agrees with datatrove's own filters on real web text. Two things differ on purpose:

- Words come from a regex tokenizer (`split_words`), not spaCy (datatrove's default for English: not a dependency
  here, and about 9x slower by the project's measure, ~200 documents/s). Like spaCy it splits punctuation off
  words and keeps numbers (`1,000`, `3.14`) and URLs whole. `RegexWordTokenizer` puts the same tokenizer into
  datatrove's filters for the agreement test. Punctuation tokens count as words in the alphabetic-word ratio, as
  they do with spaCy in datatrove: at the default 0.8, about a third of real web and Pile documents fail it.
- C4's line edits: datatrove's C4 filter rewrites `doc.text` without the lines it rejects (no terminal
  punctuation, fewer than 3 words, "javascript", cookie/terms-of-use lines). tokenmill only scores and filters
  documents and never edits text: the C4 rules decide on the lines C4 would keep, and `c4_removed_char_frac`
  records the share of characters C4 would have cut, for a later stage or a threshold to act on.

Documents whose language (`langs`) is in `CJKQualityConfig.languages` (Chinese, Japanese) get character-based
rules instead: a Chinese article has almost no spaces, so Gopher's word counts would drop every one.

One module per idea: `words` (the tokenizer), `config` (the rule families' settings), `ngrams` (the n-gram
engine), `measures` (the score columns), `lines` (the line measures of a whole chunk, by Arrow), `rules` (thresholds
and reasons), `reference` (datatrove's own filters).
"""

from tokenmill.text.quality.config import (
    DUP_N_GRAM_SIZES,
    TOP_N_GRAM_SIZES,
    C4Config,
    CJKQualityConfig,
    GopherQualityConfig,
    GopherRepetitionConfig,
    QualityConfig,
)
from tokenmill.text.quality.measures import QUALITY_SCORE_COLUMNS, cjk_profile, quality_scores
from tokenmill.text.quality.reference import datatrove_filters
from tokenmill.text.quality.rules import (
    FAMILY_REASONS,
    QUALITY_DROP_REASONS,
    family_reasons,
    quality,
    quality_reasons,
)
from tokenmill.text.quality.words import RegexWordTokenizer, count_sentences, split_words

__all__ = [
    "C4Config", "CJKQualityConfig", "DUP_N_GRAM_SIZES", "FAMILY_REASONS", "GopherQualityConfig",
    "GopherRepetitionConfig", "QUALITY_DROP_REASONS", "QUALITY_SCORE_COLUMNS", "QualityConfig", "RegexWordTokenizer",
    "TOP_N_GRAM_SIZES", "cjk_profile", "count_sentences", "datatrove_filters", "family_reasons", "quality",
    "quality_reasons", "quality_scores", "split_words",
]
