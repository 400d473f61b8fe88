"""N-gram normalisation, hashing, the evaluation index and match finding."""

from __future__ import annotations

import numpy as np
import pytest

from tokenmill.stages.decontaminate.ngrams import (
    build_index,
    char_tokens,
    find_matches,
    ngram_hashes,
    normalize_tokens,
)

# 21 words: any 13 consecutive ones form an indexed n-gram.
QUESTION = ("Which river flows through the ancient city that served as capital of the eastern empire "
            "during the long reign of Justinian")
QWORDS = QUESTION.split()
FILLER = ("Our gardening club met on Tuesday to discuss tomatoes, compost bins and the best time for pruning "
          "roses before winter arrives. ") * 3
ZH_QUESTION = "请问长江流经的第一座省会城市是哪里以及它的别称是什么"  # made up, 26 characters
ZH_FILLER = "今天天气很好，我们一起去公园散步，看到了很多美丽的花朵和小鸟。"


def _index(**kw):
    kw = {"word_n": 13, "char_n": 13, **kw}  # fixed n: these tests are about the n-gram mechanics
    return build_index([
        ("trivia", "q1", "question", QUESTION, "en"),
        ("trivia", "q2", "question", "What is two plus two", "en"),  # 5 words: matched whole
        ("trivia", "q3", "answer", "Constantinople", "en"),  # 1 word: too short to check
        ("reading", "r7", "passage", "Completely unrelated passage text about baking bread with sourdough "
                                     "starter and rye flour in a cold oven overnight", "en"),
        ("cmrc", "c1", "question", ZH_QUESTION, "zh"),
        ("cmrc", "c2", "question", "太短了", "zh"),  # too short
    ], **kw)


def test_normalize_tokens_case_punctuation_whitespace():
    assert normalize_tokens("The  Cat, sat")[0] == normalize_tokens("the cat sat")[0] == ["the", "cat", "sat"]
    assert normalize_tokens("  \t\n")[0] == []
    assert normalize_tokens("don't snake_case 3.14 Ünïcode")[0] == ["don", "t", "snake", "case", "3", "14",
                                                                    "ünïcode"]


def test_spans_map_back_to_original_text():
    text = "  Hello,\tWORLD!! (naïve) café—x_y 42  "
    tokens, spans = normalize_tokens(text)
    assert tokens == ["hello", "world", "naïve", "café", "x", "y", "42"]
    assert [text[s:e] for s, e in spans] == ["Hello", "WORLD", "naïve", "café", "x", "y", "42"]
    assert [text[s:e].lower() for s, e in spans] == tokens


def test_char_tokens_drop_punctuation_and_spaces_keep_spans():
    text = "你好，世界！ A1 。"
    tokens, spans = char_tokens(text)
    assert tokens == ["你", "好", "世", "界", "a", "1"]
    assert [text[s:e] for s, e in spans] == ["你", "好", "世", "界", "A", "1"]


def test_ngram_hashes_shape_and_equality():
    toks = "a b c d a b c".split()
    h = ngram_hashes(toks, 3)
    assert h.dtype == np.uint64 and len(h) == 5
    assert h[0] == h[4] and len(set(h[:4].tolist())) == 4  # "a b c" twice, the rest distinct
    assert len(ngram_hashes(toks, 8)) == 0 and len(ngram_hashes([], 1)) == 0
    assert ngram_hashes(["a", "b"], 2)[0] != ngram_hashes(["b", "a"], 2)[0]  # order matters
    assert ngram_hashes(["ab", "c"], 2)[0] != ngram_hashes(["a", "bc"], 2)[0]  # token boundaries matter
    assert ngram_hashes(toks, 2)[0] != ngram_hashes(toks[:1], 1)[0]
    # Deterministic: same n-gram in different contexts gets the same hash.
    assert ngram_hashes(["x", "a", "b", "c"], 3)[1] == h[0]
    with pytest.raises(ValueError):
        ngram_hashes(toks, 0)


def test_index_layout_and_coverage():
    idx = _index()
    assert {k: c.fields for k, c in idx.coverage.items()} == {
        "trivia": {"ngram": 1, "whole": 1, "too_short": 1, "no_text": 0},
        "reading": {"ngram": 1, "whole": 0, "too_short": 0, "no_text": 0},
        "cmrc": {"ngram": 1, "whole": 0, "too_short": 1, "no_text": 0}}
    assert idx.n == {"trivia": 13, "reading": 13, "cmrc": 13}
    assert idx.word_lengths == {"ngram": (13,), "whole": (5,)}
    assert idx.char_lengths == {"ngram": (13,), "whole": ()}
    assert idx.hashes.dtype == np.uint64
    assert np.all(idx.hashes[1:] > idx.hashes[:-1])  # sorted, unique
    # q1: 21 words, r7: 18 words, c1: 26 characters; q2 whole (one hash)
    assert len(idx.hashes) == (21 - 12) + (18 - 12) + (26 - 12) + 1
    assert idx.nbytes() >= idx.hashes.nbytes + idx.owners.offsets.nbytes
    first = int(ngram_hashes([w.lower() for w in QWORDS[:13]], 13)[0])
    assert idx.owners_of(first) == [("trivia", "q1", "question")]
    assert idx.owners_of(12345) == []


def test_shared_ngram_has_all_owners_once():
    idx = build_index([
        ("a", "1", "q", QUESTION, "en"),
        ("a", "1", "q", QUESTION + " again", "en"),  # same entry twice: one owner
        ("b", "9", "ctx", "prefix " + QUESTION, "en"),
    ])
    first = int(ngram_hashes([w.lower() for w in QWORDS[:13]], 13)[0])
    assert idx.owners_of(first) == [("a", "1", "q"), ("b", "9", "ctx")]


def _owners(text, lang, idx):
    return {o for _, _, h in find_matches(text, lang, idx) for o in idx.owners_of(h)}


def test_verbatim_13gram_found_with_span():
    idx = _index()
    gram = " ".join(QWORDS[4:17])
    doc = FILLER + gram + " " + FILLER
    matches = find_matches(doc, "en", idx)
    assert len(matches) == 1
    s, e, h = matches[0]
    assert doc[s:e] == gram
    assert idx.owners_of(h) == [("trivia", "q1", "question")]


def test_case_and_spacing_changes_still_match():
    idx = _index()
    gram = QWORDS[0:13]
    mangled = "  ".join(w.upper() if i % 2 else w for i, w in enumerate(gram))
    mangled = mangled.replace("through", "through,\n").replace("city", "CITY;")
    doc = FILLER + '"' + mangled + '?" ' + FILLER
    matches = find_matches(doc, "en", idx)
    assert len(matches) == 1
    s, e, _ = matches[0]
    assert doc[s:e] == mangled.rstrip()
    assert _owners(doc, "en", idx) == {("trivia", "q1", "question")}


def test_twenty_word_fragment_gives_overlapping_matches():
    idx = _index()
    frag = " ".join(QWORDS[1:21])  # 20 words -> 8 thirteen-grams
    doc = FILLER + frag + ". " + FILLER
    matches = find_matches(doc, "en", idx)
    assert len(matches) == 8
    assert min(s for s, _, _ in matches) == doc.index(frag)
    assert max(e for _, e, _ in matches) == doc.index(frag) + len(frag)
    assert [s for s, _, _ in matches] == sorted(s for s, _, _ in matches)
    assert _owners(doc, "en", idx) == {("trivia", "q1", "question")}


def test_twelve_word_overlap_not_found():
    idx = _index()
    doc = FILLER + " ".join(QWORDS[5:17]) + " " + FILLER  # 12 words
    assert find_matches(doc, "en", idx) == []
    # 13 words but one changed: no match either
    changed = QWORDS[0:13]
    changed[6] = "modern"
    assert find_matches(FILLER + " ".join(changed) + " " + FILLER, "en", idx) == []


def test_short_field_matches_whole_one_word_never():
    idx = _index()
    doc = "Constantinople. What is two plus two? Constantinople."
    (s, e, h), = find_matches(doc, "en", idx)
    assert doc[s:e] == "What is two plus two"
    assert idx.owners_with_rule(h) == [("trivia", "q2", "question", "whole")]
    # Whole words only: not inside longer words, not part of it.
    for near in ("Somewhat is two plus twofold", "what is two plus", "what is two plus three", "Constantinople"):
        assert find_matches(f"{FILLER} {near} {FILLER}", "en", idx) == [], near
    # A segment of its own: a line, a sentence, a quote, a list entry; not a phrase inside a sentence.
    for doc in ("what is two plus two", "Quiz:\n1) What is two plus two\n2) Next", 'He said "what is two plus two"',
                "Intro. What is two plus two? Then"):
        assert len(find_matches(doc, "en", idx)) == 1, doc
    for doc in ("I asked what is two plus two and left", "Intro, what is two plus two, then", "so-what is two plus two"):
        assert find_matches(doc, "en", idx) == [], doc


def test_smaller_n_is_respected():
    idx = _index(word_n=5)
    doc = FILLER + "what is TWO plus two!" + FILLER
    assert _owners(doc, "en", idx) == {("trivia", "q2", "question")}
    (_, _, h), = find_matches(doc, "en", idx)
    assert idx.owners_with_rule(h)[0][3] == "ngram"
    assert idx.coverage["trivia"].fields == {"ngram": 2, "whole": 0, "too_short": 1, "no_text": 0}


def test_chinese_question_planted_in_chinese_text():
    idx = _index(char_n=13)
    planted = "请问：长江流经的第一座省会城市是哪里？以及它的别称是什么"  # punctuation added
    doc = ZH_FILLER + planted + ZH_FILLER
    matches = find_matches(doc, "zh", idx)
    assert len(matches) == len(ZH_QUESTION) - 13 + 1
    assert _owners(doc, "zh", idx) == {("cmrc", "c1", "question")}
    assert min(s for s, _, _ in matches) == doc.index(planted)
    assert max(e for _, e, _ in matches) == doc.index(planted) + len(planted)
    # 12 characters of the question are not enough
    assert find_matches(ZH_FILLER + ZH_QUESTION[3:15] + ZH_FILLER, "zh", idx) == []
    # Tagged by region too; as English (word tokens) the run is one token and cannot match
    assert len(find_matches(doc, "zh-Hans", idx)) == len(matches)
    assert find_matches(doc, "en", idx) == []


def test_empty_inputs():
    idx = build_index([])
    assert len(idx.hashes) == 0 and idx.coverage == {}
    assert find_matches(QUESTION, "en", idx) == []
    assert find_matches("", "en", _index()) == []
    assert idx.owners_of(0) == []


def test_find_matches_tokenises_like_normalize_tokens():
    # Greek final sigma and Turkish dotted I lowercase context-sensitively / to two characters.
    text = "ΟΔΟΣ Σοφία ΑΣ İstanbul İİ ŞEHİR straße ǅemal ΣΑΣ. " * 3
    toks, _ = normalize_tokens(text)
    idx = build_index([("s", "i", "f", text, "en")], word_n=4)
    found = find_matches(text, "en", idx)
    assert [h for _, _, h in found] == ngram_hashes(toks, 4).tolist()
    assert [text[s:e].lower() for s, e, _ in found[:1]] == [text[:text.index("İstanbul") + 8].lower()]


def test_lookup_prefilter_exact():
    rng = np.random.default_rng(3)
    idx = _index()
    member = idx.hashes[rng.integers(0, len(idx.hashes), 50)]
    other = rng.integers(0, 2**63, 5000, dtype=np.int64).astype(np.uint64) * np.uint64(2) + np.uint64(1)
    q = np.concatenate([other, member])
    assert np.array_equal(idx.lookup(q), np.flatnonzero(np.isin(q, idx.hashes)))
    assert len(idx.lookup(member)) == 50


def test_token_hash_cache_never_changes_a_hash(monkeypatch):
    import xxhash

    from tokenmill.stages.decontaminate import ngrams

    monkeypatch.setattr(ngrams, "_CACHE_MAX", 4)  # cleared again and again
    # A fresh cache: the process-wide one already holds these words when other tests ran first.
    monkeypatch.setattr(ngrams, "_TOKEN_HASHES", ngrams._TokenHashCache())
    tokens = ["the", "cat", "x" * 40, "the", "naïve", "5", "cat", "dog", "eel", "the"] * 3
    expected = [xxhash.xxh3_64_intdigest(t.encode("utf-8")) for t in tokens]
    assert ngrams.token_hashes(tokens).tolist() == expected == ngrams.token_hashes(tokens).tolist()
    assert len(ngrams._TOKEN_HASHES) <= 4 and "x" * 40 not in ngrams._TOKEN_HASHES
