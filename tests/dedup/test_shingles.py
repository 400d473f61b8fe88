"""Shingling: normalisation, word vs character n-grams, determinism, short and empty texts."""

import re
import subprocess
import sys

import numpy as np

from tokenmill.dedup import shingles
from tokenmill.dedup.shingles import (exact_hash, normalized, shingle_hashes, shingle_hashes_many, uses_chars,
                                      words)

TEXT = "The quick brown fox jumps over the lazy dog, while 3 cats watch the_fox from a tree."


def test_words_and_normalized():
    assert words("Hello, WORLD_x 42 café!") == ["hello", "world", "x", "42", "café"]
    assert normalized("  A  b,\n\tc ") == "a b c"
    assert words("") == [] and normalized("!!") == ""


def test_alnum_table_matches_regex():
    table = shingles._alnum()
    for c in list(range(0, 0x3000)) + list(range(0x4E00, 0x4F00)) + list(range(0x1F600, 0x1F650)):
        assert table[c] == bool(re.fullmatch(r"[^\W_]", chr(c))), hex(c)


def test_exact_hash():
    assert len(exact_hash(TEXT)) == 16
    assert exact_hash("Hello,   World!") == exact_hash("hello world")
    assert exact_hash("hello world") != exact_hash("hello worlds")


def _reference(text, n):
    w = words(text)
    return {tuple(w[i:i + n]) for i in range(max(1, len(w) - n + 1))} if w else set()


def test_word_shingles_sorted_unique_and_counted():
    h = shingle_hashes(TEXT, "en")
    assert h.dtype == np.uint64 and np.all(np.diff(h.astype(object)) > 0)
    assert len(h) == len(_reference(TEXT, 5))
    assert len(shingle_hashes("a b a b a b a b", None, word_ngram=2)) == 2  # "a b", "b a"


def test_punctuation_and_case_do_not_matter():
    assert np.array_equal(shingle_hashes(TEXT, None), shingle_hashes(TEXT.upper().replace(",", " ;; "), None))


def test_one_word_edit_changes_only_nearby_shingles():
    edited = TEXT.replace("lazy", "sleepy")
    a, b = set(shingle_hashes(TEXT, None).tolist()), set(shingle_hashes(edited, None).tolist())
    assert len(a ^ b) == 2 * 5


def test_short_and_empty_texts():
    assert shingle_hashes("", None).shape == (0,) and shingle_hashes("", "zh").shape == (0,)
    assert shingle_hashes(" ,.!? ", None).shape == (0,)
    assert len(shingle_hashes("one two", None)) == 1
    assert len(shingle_hashes("我们", "zh")) == 1
    assert not np.array_equal(shingle_hashes("one two", None), shingle_hashes("one three", None))
    assert not np.array_equal(shingle_hashes("one", None), shingle_hashes("one one", None))


def test_cjk_uses_characters():
    assert uses_chars("zh") and uses_chars("ja-JP") and uses_chars("th") and not uses_chars("en")
    assert not uses_chars(None)
    zh = "今天天气很好，我们一起去公园散步，然后在湖边喝茶聊天，直到太阳下山才回家。"
    changed = zh.replace("湖", "河")
    a, b = set(shingle_hashes(zh, "zh").tolist()), set(shingle_hashes(changed, "zh").tolist())
    assert len(a) == 29  # 33 characters after dropping punctuation
    assert len(a & b) / len(a | b) > 0.7
    assert len(a - b) == 5  # only the 5 character 5-grams covering the changed character
    # as space-delimited text it is ~2 "words" and one shingle: the change would replace everything
    assert len(shingle_hashes(zh, None)) == 1


def test_seed_and_ngram_change_hashes():
    assert not np.array_equal(shingle_hashes(TEXT, None, seed=1), shingle_hashes(TEXT, None))
    assert len(shingle_hashes(TEXT, None, word_ngram=3)) == len(_reference(TEXT, 3))


def test_many_equals_single():
    texts = ["", "x", TEXT, "我们今天去公园玩", "a b c d e", "__ --", TEXT.upper(), "日本語のテキストです" * 20]
    langs = [None, None, "en", "zh", None, None, "en", "ja"]
    many = shingle_hashes_many(texts, langs)
    for text, lang, got in zip(texts, langs, many):
        assert np.array_equal(got, shingle_hashes(text, lang))
    assert all(np.array_equal(x, y) for x, y in zip(shingle_hashes_many(texts[:3], None),
                                                       [shingle_hashes(t, None) for t in texts[:3]]))


def test_groups_larger_than_memory_bound(monkeypatch):
    monkeypatch.setattr(shingles, "_GROUP_CODEPOINTS", 50)
    texts = [TEXT * 3, "a b", TEXT, "", "x y z"]
    expected = [shingle_hashes(t, None) for t in texts]
    monkeypatch.undo()
    assert all(np.array_equal(a, b) for a, b in zip(shingle_hashes_many(texts, None), expected))


def test_deterministic_across_processes():
    code = ("from tokenmill.dedup.shingles import shingle_hashes; "
            f"print(shingle_hashes({TEXT!r}, None).tolist(), shingle_hashes('我们今天去公园玩', 'zh').tolist())")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": str(seed), "PATH": ""}).stdout for seed in (1, 2)}
    assert len(runs) == 1
    assert runs.pop().strip() == str(shingle_hashes(TEXT, None).tolist()) + " " + str(
        shingle_hashes("我们今天去公园玩", "zh").tolist())
