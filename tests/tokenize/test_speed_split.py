"""tiktoken's split pattern with its lookahead-free alternatives in one group (`SPLIT_PATTERN`) cuts the same pieces,
so gives the same ids, as the possessive form it replaced (frozen below) and `GPT2_PATTERN`, text by text and in the
joined batch call, on real and hostile text (GPT-2's and a trained tokenizer); a pattern that cuts one piece
differently is caught."""

from __future__ import annotations

import numpy as np
import pytest
import regex

from tests.conftest import SHARED_DATA
from tests.tokenize.conftest import web_texts
from tests.tokenize.test_fast_engine import adversarial_texts, every_category_texts
from tests.tokenize.test_speed_encode import HOSTILE, real_texts, whitespace_mazes
from tokenmill.tokenize import fast_engine
from tokenmill.tokenize.fast_engine import SEPARATOR, tiktoken_encoding
from tokenmill.tokenize.tokenizer import load_tokenizer, train_bpe

OLD_SPLIT_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
"""`SPLIT_PATTERN` as it was (03eebc4): tiktoken's own form of the GPT-2 pattern."""
BROKEN = [r"""(?:'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+)|\s+(?!\S)|\s""",  # `$` left off
          r"""(?:'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+$)|\s""",  # no whitespace-run rule
          r"""(?: ?[^\s\p{L}\p{N}]+|'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+|\s+$)|\s+(?!\S)|\s"""]  # symbols first
"""Patterns one step off `SPLIT_PATTERN`: the comparisons below must tell each from it."""
SURROGATES = ["a \ud800 b", "\udfff  ", "x\ud83d\ude00 ", "  \ud800"]
"""Lone surrogates: `encode_ordinary` replaces them; the joined call refuses such a batch (the per-text path)."""


@pytest.fixture(scope="module")
def tokenizers():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA}")
    gpt2 = load_tokenizer(str(SHARED_DATA / "tokenizer" / "gpt2_tokenizer.json"))
    return {"gpt2": gpt2, "trained": train_bpe(web_texts(SHARED_DATA)[:600], 4096)}  # the demo's kind


@pytest.fixture(scope="module")
def texts():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA}")
    return (real_texts(SHARED_DATA) + HOSTILE + adversarial_texts(seed=11, n=300) + every_category_texts()
            + whitespace_mazes(seed=13) + ["\x00\x00 \x00", "\r\r\n \r", "\u2003\u2003x", "\u3000中文\u3000\u3000"])


def _with_pattern(encoding, pattern: str):
    import tiktoken

    return tiktoken.Encoding(f"pattern-{hash(pattern)}", pat_str=pattern, mergeable_ranks=encoding._mergeable_ranks,
                             special_tokens=encoding._special_tokens)


def _utf8(text: str) -> bool:
    """Whether the text has no lone surrogate (the joined call takes it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _joined(encoding, texts: list[str]) -> np.ndarray:
    return encoding.encode_to_numpy(SEPARATOR.join(texts) + SEPARATOR, allowed_special={SEPARATOR})


def test_the_pieces_are_the_old_patterns(texts):
    """The pattern's meaning apart from any engine: the `regex` module cuts every text into the same pieces."""
    new, old = regex.compile(fast_engine.SPLIT_PATTERN), regex.compile(OLD_SPLIT_PATTERN)
    for text in texts + SURROGATES:
        assert new.findall(text) == old.findall(text), repr(text[:80])
    gpt2 = regex.compile(fast_engine.GPT2_PATTERN)
    for text in texts[:3000]:
        assert new.findall(text) == gpt2.findall(text), repr(text[:80])


# GPT-2's vocabulary is the slow variant: test_speed_encode.py checks its ids under SPLIT_PATTERN against GPT2_PATTERN's.
@pytest.mark.parametrize("name", [pytest.param("gpt2", marks=pytest.mark.slow), "trained"])
def test_the_ids_are_the_old_patterns(tokenizers, texts, name):
    """tiktoken (fancy-regex, the engine that runs it) gives the old pattern's ids text by text and per joined batch
    (where `$` is the end of each document's slice, not of the batch)."""
    encoding = tiktoken_encoding(tokenizers[name]).encoding
    assert encoding._pat_str == fast_engine.SPLIT_PATTERN
    old = _with_pattern(encoding, OLD_SPLIT_PATTERN)
    for text in texts + SURROGATES:
        assert encoding.encode_ordinary(text) == old.encode_ordinary(text), repr(text[:80])
    plain = [t for t in texts if SEPARATOR not in t and _utf8(t)]
    for start in range(0, len(plain), 500):
        batch = plain[start:start + 500]
        assert np.array_equal(_joined(encoding, batch), _joined(old, batch))


@pytest.mark.parametrize("pattern", BROKEN)
def test_a_pattern_one_step_off_is_caught(tokenizers, texts, pattern):
    """The comparisons above can fail: each broken pattern cuts some text differently, and changes some ids."""
    assert any(regex.findall(pattern, t) != regex.findall(OLD_SPLIT_PATTERN, t) for t in texts)
    encoding = tiktoken_encoding(tokenizers["gpt2"]).encoding
    broken, old = _with_pattern(encoding, pattern), _with_pattern(encoding, OLD_SPLIT_PATTERN)
    assert any(broken.encode_ordinary(t) != old.encode_ordinary(t) for t in texts)
