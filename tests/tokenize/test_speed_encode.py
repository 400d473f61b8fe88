"""The tiktoken engine's batch encode (one call on a batch's texts joined by a separator) gives exactly what one call
per text gives (`FastEncoder._each_flat`, the form it replaced) and the tokenizer's own ids, on real and hostile
text; a batch the joined call cannot take falls back to the per-text form."""

from __future__ import annotations

import csv
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from tests.conftest import SHARED_DATA
from tests.tokenize.conftest import neox_like, web_texts
from tokenmill.tokenize import fast_engine
from tokenmill.tokenize.fast_engine import SEPARATOR, encode_flat, tiktoken_encoding
from tokenmill.tokenize.tokenizer import _loaded, load_tokenizer, train_bpe

HOSTILE = ["", " ", "\n", "\r\n\r\n", "a\rb\r", "\x00", "a\x00b\x00", "\t\t x \t", "   trailing   ", "x" * 5,
           "\u00a0\u2003\u3000 unicode spaces\u2028\u2029\u0085", "中文文本，没有空格。", "e\u0301\u0301 combining a\u0308",
           "it's they're we've I'm you'll he'd 'S", "1234567890" * 30, "<|endoftext|>", "a <|endoftext|> b",
           "\U0001f600\U0001f468\u200d\U0001f469 emoji", "\ufeffbom", "\x1e\x1d\x1c", " " * 40 + "z", "z" + " " * 40,
           ("one long line without a break " * 10_000)[:300_000]]


def stdlib_texts(limit: int = 150) -> list[str]:
    """Python source (the standard library's own files): code, its whitespace runs and indentation."""
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:limit]
    return [f.read_text(encoding="utf-8", errors="replace") for f in files]


def chinese_texts(shared_data) -> list[str]:
    """Hotel reviews in Chinese (ChnSentiCorp): CJK without spaces, full-width punctuation."""
    with open(shared_data / "chinese" / "ChnSentiCorp_htl_all.csv", encoding="utf-8") as f:
        return [row[1] for row in list(csv.reader(f))[1:600]]


def real_texts(shared_data) -> list[str]:
    return web_texts(shared_data)[:900] + stdlib_texts() + chinese_texts(shared_data)


def tokenizers_ids(tok, texts: list[str]) -> list[list[int]]:
    """The tokenizer's own ids (special-token strings as text), each followed by the end-of-text id."""
    return [e.ids + [tok.eos_id] for e in tok.text_encoder.encode_batch(texts, add_special_tokens=False)]


@pytest.fixture(scope="module")
def tokenizers():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA}")
    shared_data = SHARED_DATA
    gpt2 = load_tokenizer(str(shared_data / "tokenizer" / "gpt2_tokenizer.json"))
    trained = train_bpe(web_texts(shared_data)[:600], 4096)  # the demo's kind: merge order is id order
    permuted = _permuted(gpt2)  # ranks are not the ids: the rank -> id map is taken
    return {"gpt2": gpt2, "trained": trained, "permuted": permuted}


def _permuted(gpt2):
    """GPT-2 with the ids of its first 300 merged tokens reversed, so that merge order is no longer id order."""
    import json

    spec = json.loads(gpt2.tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    made = ["".join(m) if isinstance(m, list) else m.replace(" ", "") for m in spec["model"]["merges"][:300]]
    for t, i in zip(made, reversed([vocab[t] for t in made])):
        vocab[t] = i
    tok = _loaded(Tokenizer.from_str(json.dumps(spec)), "<|endoftext|>")
    assert tiktoken_encoding(tok).id_of_rank is not None
    return tok


def _batches(texts: list[str], size: int):
    return [texts[i:i + size] for i in range(0, len(texts), size)]


@pytest.mark.parametrize("name", ["gpt2", "trained", "permuted"])
def test_joined_batches_equal_one_call_per_text_on_real_text(tokenizers, shared_data, name):
    tok = tokenizers[name]
    encoder = tiktoken_encoding(tok)
    texts = real_texts(shared_data)
    for batch in _batches(texts, 500):
        assert not any(SEPARATOR in t for t in batch)
        assert encoder._joined(batch) is not None  # the joined call itself, not its fallback, is what is compared
        new, old = encoder.encode_flat(batch, tok.eos_id), encoder._each_flat(batch, tok.eos_id)
        assert new[0].dtype == old[0].dtype == np.int64 and new[1].dtype == old[1].dtype
        assert np.array_equal(new[0], old[0]) and np.array_equal(new[1], old[1])
    flat, lengths, engine = encode_flat(tok, encoder, texts[:400])
    assert engine == "tiktoken"
    assert np.split(flat, np.cumsum(lengths)[:-1])[0].tolist() == tokenizers_ids(tok, texts[:1])[0]
    assert [d.tolist() for d in np.split(flat, np.cumsum(lengths)[:-1])] == tokenizers_ids(tok, texts[:400])


@pytest.mark.parametrize("name", ["gpt2", "trained", "permuted"])
def test_joined_batches_equal_one_call_per_text_on_hostile_text(tokenizers, name):
    tok = tokenizers[name]
    encoder = tiktoken_encoding(tok)
    texts = HOSTILE + [a + b for a in HOSTILE[:-1] for b in HOSTILE[:-1]]  # every pair, glued: edges meet edges
    assert encoder._joined(texts) is not None
    new, old = encoder.encode_flat(texts, tok.eos_id), encoder._each_flat(texts, tok.eos_id)
    assert np.array_equal(new[0], old[0]) and np.array_equal(new[1], old[1])
    assert [d.tolist() for d in np.split(new[0], np.cumsum(new[1])[:-1])] == tokenizers_ids(tok, texts)
    for one in HOSTILE:  # a batch of one text, and of that text twice
        for batch in ([one], [one, one]):
            new, old = encoder.encode_flat(batch, tok.eos_id), encoder._each_flat(batch, tok.eos_id)
            assert np.array_equal(new[0], old[0]) and np.array_equal(new[1], old[1])


@pytest.mark.parametrize("odd", [SEPARATOR, f"a{SEPARATOR}b", f"{SEPARATOR}{SEPARATOR}", "lone \ud800 surrogate",
                                 "\udfff", "pair \ud83d\ude00 of surrogates"])
def test_a_batch_the_joined_call_cannot_take_is_encoded_a_text_at_a_time(tokenizers, odd):
    tok = tokenizers["gpt2"]
    encoder = tiktoken_encoding(tok)
    batch = ["before", odd, "after  "]
    assert encoder._joined(batch) is None
    new, old = encoder.encode_flat(batch, tok.eos_id), encoder._each_flat(batch, tok.eos_id)
    assert np.array_equal(new[0], old[0]) and np.array_equal(new[1], old[1])
    if "\ud800" not in odd and "\udfff" not in odd and "\ud83d" not in odd:
        assert [d.tolist() for d in np.split(new[0], np.cumsum(new[1])[:-1])] == tokenizers_ids(tok, batch)


def test_the_separator_is_no_rank_and_encode_ordinary_ignores_it(tokenizers):
    for tok in tokenizers.values():
        encoder = tiktoken_encoding(tok)
        assert encoder.separator_rank == encoder.encoding.max_token_value
        assert encoder.separator_rank not in set(encoder.encoding._mergeable_ranks.values())
        # encode_ordinary (the per-text form, `encode`) sees the separator as text, never as the special token
        assert encoder.separator_rank not in encoder.encoding.encode_ordinary(f"a{SEPARATOR}b")


def test_neox_like_added_tokens_keep_their_path(shared_data):
    tok = _loaded(neox_like(shared_data), "<|endoftext|>")
    encoder = tiktoken_encoding(tok)
    texts = web_texts(shared_data)[:200] + HOSTILE[:-1]
    flat, lengths = encoder.encode_flat(texts, tok.eos_id)
    assert [d.tolist() for d in np.split(flat, np.cumsum(lengths)[:-1])] == tokenizers_ids(tok, texts)


def test_the_fallback_is_the_form_that_was_replaced(monkeypatch, tokenizers):
    """Where `_joined` gives up, `encode_flat` is `_each_flat`: break the joined call and the results still agree,
    so the comparisons above compare two different code paths."""
    tok = tokenizers["gpt2"]
    encoder = tiktoken_encoding(tok)
    batch = ["some text", "more  text "]
    monkeypatch.setattr(fast_engine.FastEncoder, "_joined", lambda self, texts: None)
    flat, lengths = encoder.encode_flat(batch, tok.eos_id)
    assert [d.tolist() for d in np.split(flat, np.cumsum(lengths)[:-1])] == tokenizers_ids(tok, batch)


def whitespace_mazes(seed: int, n: int = 3000) -> list[str]:
    """Short random strings over whitespace, letters, digits, symbols and apostrophes: every way a whitespace run can
    meet the other alternatives of the split pattern, and end a text."""
    import random

    rng = random.Random(seed)
    alphabet = [" ", "  ", "\n", "\r\n", "\t", "\u00a0", "\u3000", "a", "Z", "é", "中", "1", "٣", ".", "!", "'", "'s",
                "'ll", "'x", "\x1e", "\u0301", "\U0001f600"]
    return [("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))) for _ in range(n)]


@pytest.mark.parametrize("name", ["gpt2", "trained"])
def test_the_split_pattern_gives_the_gpt2_patterns_ids(tokenizers, shared_data, name):
    """tiktoken with `SPLIT_PATTERN` (the lookahead-free alternatives in one group, `\\s+$`, `\\s`) gives, text by
    text, the ids it gives with `GPT2_PATTERN` (the pattern it replaced), on real text, hostile text and whitespace
    mazes."""
    import tiktoken

    from tests.tokenize.test_fast_engine import adversarial_texts, every_category_texts

    encoding = tiktoken_encoding(tokenizers[name]).encoding
    assert encoding._pat_str == fast_engine.SPLIT_PATTERN
    gpt2_pattern = tiktoken.Encoding("gpt2-pattern", pat_str=fast_engine.GPT2_PATTERN,
                                     mergeable_ranks=encoding._mergeable_ranks, special_tokens={})
    texts = (real_texts(shared_data) + HOSTILE + adversarial_texts(seed=5, n=300) + every_category_texts()
             + whitespace_mazes(seed=7) + ["a \ud800 b", "\udfff  ", "x\ud83d\ude00 "])
    for text in texts:
        assert encoding.encode_ordinary(text) == gpt2_pattern.encode_ordinary(text), repr(text[:80])


def test_without_a_separator_rank_each_text_is_encoded_alone(tokenizers, shared_data):
    """tiktoken before 0.9 (no `encode_to_numpy`): the encoder is built without the separator, and `encode_flat` is
    the per-text form."""
    import dataclasses

    tok = tokenizers["gpt2"]
    encoder = dataclasses.replace(tiktoken_encoding(tok), separator_rank=-1)
    texts = web_texts(shared_data)[:100] + HOSTILE[:-1]
    assert encoder._joined(texts) is None
    flat, lengths = encoder.encode_flat(texts, tok.eos_id)
    assert [d.tolist() for d in np.split(flat, np.cumsum(lengths)[:-1])] == tokenizers_ids(tok, texts)


def test_an_old_tiktoken_gets_the_gpt2_pattern_and_no_separator(monkeypatch, tokenizers):
    import tiktoken

    monkeypatch.delattr(tiktoken.Encoding, "encode_to_numpy")
    encoder, reason = fast_engine._refusal(tokenizers["gpt2"])
    assert reason == "" and encoder.separator_rank == -1
    assert encoder.encoding._pat_str == fast_engine.GPT2_PATTERN
