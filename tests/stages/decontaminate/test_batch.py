"""Batch tokenization and matching: the same tokens, spans, hashes and matches as the per-document regex path."""

from __future__ import annotations

import numpy as np
import pytest

from tokenmill.stages.decontaminate import ngrams
from tokenmill.stages.decontaminate.ngrams import (
    _BOUNDARY,
    build_index,
    char_tokens,
    find_matches,
    find_matches_batch,
    normalize_tokens,
    token_hashes,
    tokenize_batch,
)

# Texts where a vectorized tokenizer could part from the regex: empty and token-less texts, final sigma (str.lower's
# one context rule), a lowercase longer than its capital (İ), underscores, combining marks, full-width and non-Latin
# digits, title case, astral letters and emoji, a lone surrogate, CJK beside Latin, boundaries of every kind.
TRICKY = ["", "  \n ", "ΟΔΟΣ ΑΣ'Α ΣΑΣ.", "İstanbul İİ iİ", "foo_bar baz__qux _x_", "e\u0301cole cafe\u0301",
          "ＡＢＣ１２３ ٣٤٥ ⅻ ²", "ǅemal ǈ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 😀 ok", "x\ud800y z", "中文English混合，测试。",
          "a (b) [c] {d} \"e\" “f” «g» |h| •i *j #k >l …m 。n？o！p：q；r（s）「t」『u』【v】《w》、x",
          "line\nbreak\ttab\u2028sep, comma - hyphen; end", "a"]


@pytest.mark.parametrize("chars", [False, True])
def test_tokenize_batch_is_the_regex_tokenizer(chars):
    batch = tokenize_batch(TRICKY, chars, cuts=True)
    tokenize = char_tokens if chars else normalize_tokens
    for i, text in enumerate(TRICKY):
        tokens, spans = tokenize(text)
        lo, hi = batch.offsets[i], batch.offsets[i + 1]
        assert list(zip(batch.starts[lo:hi].tolist(), batch.ends[lo:hi].tolist())) == spans, text
        assert batch.hashes[lo:hi].tolist() == token_hashes(tokens).tolist(), text
        # Gap g of a text holds a boundary, or is its start or end.
        gaps = [text[:spans[0][0]] if spans else text] + [text[a[1]:b[0]] for a, b in zip(spans, spans[1:])]
        expected = [True] + [bool(_BOUNDARY.search(g)) for g in gaps[1:]] + [True] if spans else [True]
        assert batch.cuts[lo:hi + 1].tolist() == expected, text


QUESTION = ("Which river flows through the ancient city that served as capital of the eastern empire "
            "during the long reign of Justinian")
SHORT = "What is two plus two"
ZH = "请问长江流经的第一座省会城市是哪里以及它的别称是什么"


@pytest.fixture(scope="module")
def index():
    return build_index([("trivia", "q1", "question", QUESTION, "en"), ("trivia", "q2", "question", SHORT, "en"),
                        ("trivia", "q3", "question", "Name the capital city of the eastern empire today please", "en"),
                        ("cmrc", "c1", "question", ZH, "zh")], word_n=13, char_n=13)


def test_batch_matches_are_per_text_matches_and_never_span_two_texts(index, monkeypatch):
    words = QUESTION.split()
    texts = [f"Quiz night. {QUESTION}? Nobody knew.", "Start " + " ".join(words[:10]),  # 10 words, then the next 10
             " ".join(words[10:20]) + " end", f"{SHORT}\nwas the first question.", f"Q: {SHORT}.", "我们" + ZH + "。",
             ZH[:12], ZH[12:24], "", "no match here at all", f"ΟΔΟΣ {QUESTION} ΑΣ"]
    languages = ["en", "en", "en", "en", None, "zh", "zh", "zh", "en", "en", "en"]
    monkeypatch.setattr(ngrams, "_BATCH_CHARS", 64)  # several batches per kind too
    batched = find_matches_batch(texts, languages, index)
    assert batched == [find_matches(t, lang, index) for t, lang in zip(texts, languages)]
    found = [bool(m) for m in batched]
    # The split question (texts 1 and 2, 6 and 7) is found in neither half: a window never joins two texts.
    assert found == [True, False, False, True, True, True, False, False, False, False, True]
    assert [texts[0][s:e] for s, e, _ in batched[0]][0] == " ".join(words[:13])
    assert all(np.diff([s for s, _, _ in m]).min(initial=0) >= 0 for m in batched)  # by start
