"""datatrove's own quality filters at tokenmill's thresholds: the reference for the agreement tests and benchmarks."""

from __future__ import annotations

from datatrove.utils.word_tokenizers import WordTokenizer

from tokenmill.text.quality.config import QualityConfig
from tokenmill.text.quality.words import RegexWordTokenizer


def datatrove_filters(config: QualityConfig, tokenizer: WordTokenizer | None = None) -> list:
    """datatrove's GopherQuality, GopherRepetition and C4Quality filters configured as `config` (word rules only).

    `tokenizer` defaults to `RegexWordTokenizer()`: datatrove's English default is spaCy, which is not installed
    here, so the reference shares our words and sentences and the comparison tests the rule implementations.
    Differences by design: `stop_word_languages` does not exist in datatrove (give English text), and datatrove's
    C4 filter edits `doc.text` (put it last so the others see the original text, as here).
    """
    from datatrove.pipeline.filters.c4_filters import C4QualityFilter
    from datatrove.pipeline.filters.gopher_quality_filter import GopherQualityFilter
    from datatrove.pipeline.filters.gopher_repetition_filter import GopherRepetitionFilter

    tok = tokenizer if tokenizer is not None else RegexWordTokenizer()
    out = []
    if (g := config.gopher_quality) is not None:
        params = g.model_dump(exclude={"stop_words", "stop_word_languages"})
        out.append(GopherQualityFilter(**params, stop_words=list(g.stop_words), language=tok))
    if (r := config.gopher_repetition) is not None:
        out.append(GopherRepetitionFilter(**r.model_dump(), language=tok))
    if (c := config.c4) is not None:
        params = c.model_dump()
        for key in ("min_num_sentences", "min_words_per_line", "max_word_length"):
            params[key] = -1 if params[key] is None else params[key]
        out.append(C4QualityFilter(**params, split_paragraph=True, language=tok))
    return out
