"""The tiktoken engine: used only where it is, by construction, the tokenizer's own encoding; else tokenizers.

Every check compares with HF `tokenizers`' `encode(text, add_special_tokens=False)` of the tokenizer as given (with
`encode_special_tokens` on, so special-token strings are text), never with tokenmill's own encoder."""

from __future__ import annotations

import json
import random
import sys
import unicodedata

import pytest
from tokenizers import Tokenizer, normalizers

from tests.tokenize.conftest import neox_like, web_texts
from tokenmill.tokenize.fast_engine import _bytes_to_unicode, encode_checked, tiktoken_encoding
from tokenmill.tokenize.tokenizer import _loaded, load_tokenizer, train_bpe

TEXTS = ["plain ascii text", "  spaces\t\ttabs  \n\n\n x", "naïve café — “quotes” 中文", "a <|endoftext|> b", ""]


def own_ids(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    """The tokenizer's own ids; for a text holding a special token's string, with encode_special_tokens on."""
    as_text = Tokenizer.from_str(tokenizer.to_str())
    as_text.encode_special_tokens = True
    specials = [t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special]
    odd = [any(s in t for s in specials) for t in texts]
    plain = iter(tokenizer.encode_batch([t for t, o in zip(texts, odd) if not o], add_special_tokens=False))
    special = iter(as_text.encode_batch([t for t, o in zip(texts, odd) if o], add_special_tokens=False))
    return [next(special if o else plain).ids for o in odd]


def why_not_fast(tok) -> str:
    from tokenmill.tokenize import fast_engine

    return fast_engine.why_not_fast(tok)


def fast_ids(tok, texts):
    encoding = tiktoken_encoding(tok)
    assert encoding is not None, why_not_fast(tok)
    ids, engine = encode_checked(tok, encoding, texts)
    assert engine == "tiktoken" and all(x[-1] == tok.eos_id for x in ids)
    return [list(x[:-1]) for x in ids]


@pytest.fixture
def gpt2(shared_data):
    return load_tokenizer(str(shared_data / "tokenizer" / "gpt2_tokenizer.json"))


def adversarial_texts(seed: int, n: int = 400) -> list[str]:
    """Whitespace runs, every Unicode category, long digit runs, mixed scripts, special-token strings, contractions,
    glued together at random (a seeded generator: the same texts every run)."""
    rng = random.Random(seed)
    by_category: dict[str, list[str]] = {}
    for cp in range(0, sys.maxunicode + 1, 7):
        if unicodedata.category(chr(cp)) != "Cs":  # a lone surrogate is not text either library takes
            by_category.setdefault(unicodedata.category(chr(cp)), []).append(chr(cp))
    spaces = [" ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\u00a0", "\u1680", "\u2003", "\u2028", "\u3000",
              "\u200b", "\x85"]
    words = ["hello", "Straße", "мир", "κόσμος", "中文文本", "العربية", "हिन्दी", "한국어", "👩‍👩‍👧", "e\u0301",
             "ﬁ", "Ⅻ", "x²", "٣٤٥", "１２３", "'s", "'S", "'ll", "’s", "n't", "'", "<|endoftext|>", "<|padding|>",
             "<|endoftext", "|>", "<|", "To", "\\", "...", "--", "$1,000.00", "\ufeff", "\ufffd", "\U0001F600"]

    def fragment() -> str:
        kind = rng.randrange(6)
        if kind == 0:
            return "".join(rng.choice(spaces) for _ in range(rng.randint(1, 3))) * rng.randint(1, 30)
        if kind == 1:
            chars = by_category[rng.choice(sorted(by_category))]
            return "".join(rng.choice(chars) for _ in range(rng.randint(1, 6)))
        if kind == 2:
            return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 400)))
        return rng.choice(words)

    return ["".join(fragment() for _ in range(rng.randint(1, 40))) for _ in range(n)]


def every_category_texts() -> list[str]:
    """Up to 40 code points of every Unicode category (surrogates and unassigned ones included), each between
    letters, digits, spaces, an apostrophe and itself."""
    by_category: dict[str, list[int]] = {}
    for cp in range(sys.maxunicode + 1):
        by_category.setdefault(unicodedata.category(chr(cp)), []).append(cp)
    rng = random.Random(0)
    texts = []
    for category, cps in sorted(by_category.items()):
        for cp in rng.sample(cps, min(40, len(cps))):
            c = chr(cp) if category != "Cs" else "\ufffd"  # a lone surrogate is not valid text for either library
            texts.append(f"a{c}b {c}{c} 1{c}2 \t{c}  {c}x'{c}s {c}\n{c}")
    return texts


def test_gpt2_uses_tiktoken_with_identical_ids(gpt2, shared_data):
    texts = web_texts(shared_data) + TEXTS
    assert fast_ids(gpt2, texts) == own_ids(gpt2.tokenizer, texts)


@pytest.mark.parametrize("name", ["gpt2", "neox_like", "trained"])
def test_adversarial_text_gives_identical_ids(name, shared_data):
    if name == "trained":
        tok = train_bpe(web_texts(shared_data)[:300], vocab_size=2000)
    else:
        tokenizer = neox_like(shared_data) if name == "neox_like" else \
            Tokenizer.from_file(str(shared_data / "tokenizer" / "gpt2_tokenizer.json"))
        tok = _loaded(tokenizer, "<|endoftext|>")
    texts = adversarial_texts(seed=11) + every_category_texts()
    assert fast_ids(tok, texts) == own_ids(tok.tokenizer, texts)


def test_neox_like_added_tokens_are_split_as_tokenizers_does(neox, shared_data):
    """Runs of spaces are non-special added tokens: "  To" is `"  "` + `"To"`, as the tokenizer gives it."""
    tok = _loaded(neox, "<|endoftext|>")
    texts = web_texts(shared_data) + ["Hello.  To be", "a" + " " * 30 + "b", "x  <|padding|>  <|endoftext|>  y"]
    ours, theirs = fast_ids(tok, texts), own_ids(neox, texts)
    assert ours == theirs
    two = neox.token_to_id("  ")
    assert ours[-3][2:4] == [two, neox.token_to_id("To")]
    assert sum(any(i > tok.eos_id for i in ids) for ids in ours) > 100  # the added tokens are used, not avoided


def test_trained_tokenizer_uses_tiktoken_with_identical_ids(shared_data):
    texts = [f"document {i} about rivers and mountains, naïve café {i * 3}" for i in range(200)]
    tok = train_bpe(texts, vocab_size=500)
    more = texts + TEXTS + web_texts(shared_data)[:300]
    assert fast_ids(tok, more) == own_ids(tok.tokenizer, more)


def test_ranks_follow_the_merge_order_not_the_ids(gpt2, shared_data):
    """Ids that do not follow the merge order (here the first 300 merged tokens' ids reversed): tiktoken must still
    merge in the merges' order, and give the tokenizer's ids."""
    spec = json.loads(gpt2.tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    made = ["".join(m) if isinstance(m, list) else m.replace(" ", "") for m in spec["model"]["merges"][:300]]
    ids = [vocab[t] for t in made]
    for t, i in zip(made, reversed(ids)):
        vocab[t] = i
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    tok = _loaded(tokenizer, "<|endoftext|>")
    texts = web_texts(shared_data)[:400] + TEXTS
    assert fast_ids(tok, texts) == own_ids(tokenizer, texts)
    assert tiktoken_encoding(tok).id_of_rank is not None  # ranks are not the ids here


def tiny_bpe(merges: list[tuple[str, str]]) -> Tokenizer:
    """A byte-level BPE: the 256 bytes, then one token per merge, then `<|endoftext|>`."""
    chars = sorted(_bytes_to_unicode(), key=lambda c: _bytes_to_unicode()[c])
    vocab = {c: i for i, c in enumerate(chars)}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    spec = {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
            "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                                  "use_regex": True},
            "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                                "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": [list(m) for m in merges]}}
    return Tokenizer.from_str(json.dumps(spec))


def test_a_token_its_merges_cannot_reach_keeps_tokenizers():
    """Merges a+b, b+c, then a+bc: BPE never reaches "abc" (it merges a+b first and has no ab+c), but tiktoken,
    merging by the rank of the merged bytes, would: ranks in merge order alone are not enough."""
    import tiktoken

    tokenizer = tiny_bpe([("a", "b"), ("b", "c"), ("a", "bc")])
    tok = _loaded(tokenizer, "<|endoftext|>")
    assert tokenizer.encode("xabc").tokens == ["x", "ab", "c"]
    naive = tiktoken.Encoding("naive", pat_str=r"\S+|\s+", special_tokens={}, mergeable_ranks={
        **{bytes([b]): i for i, b in enumerate(sorted(_bytes_to_unicode().values()))},
        b"ab": 256, b"bc": 257, b"abc": 258})
    assert naive.encode_ordinary("xabc") != tokenizer.encode("xabc").ids  # what the load check rules out
    assert tiktoken_encoding(tok) is None
    assert "'abc'" in why_not_fast(tok)
    texts = [f"document {i} with nothing odd" for i in range(40)] + ["xabc abc"]
    ids, engine = encode_checked(tok, tiktoken_encoding(tok), texts)
    assert engine == "tokenizers" and [list(x[:-1]) for x in ids] == own_ids(tokenizer, texts)


def test_a_merge_of_unmade_parts_keeps_tokenizers(gpt2):
    """GPT-2 without the merge that makes "he": " the" can no longer be made, whatever the vocabulary says."""
    spec = json.loads(gpt2.tokenizer.to_str())
    spec["model"]["merges"] = [m for m in spec["model"]["merges"] if m not in (["h", "e"], "h e")]
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    tok = _loaded(tokenizer, "<|endoftext|>")
    assert tiktoken_encoding(tok) is None
    assert "no earlier merge made" in why_not_fast(tok)
    texts = [f"plain document number {i}" for i in range(40)] + ["the theme of the day"]
    ids, engine = encode_checked(tok, tiktoken_encoding(tok), texts)
    assert engine == "tokenizers" and [list(x[:-1]) for x in ids] == own_ids(tokenizer, texts)


def test_a_normalizer_keeps_tokenizers(gpt2):
    spec = json.loads(gpt2.tokenizer.to_str())
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    tokenizer.normalizer = normalizers.NFC()
    tok = _loaded(tokenizer, "<|endoftext|>")
    assert tiktoken_encoding(tok) is None
    assert "normalizer" in why_not_fast(tok)
    assert encode_checked(tok, None, TEXTS)[1] == "tokenizers"


def test_added_tokens_overlapping_a_special_keep_tokenizers(neox):
    from tokenizers import AddedToken

    neox.add_tokens([AddedToken("|>", normalized=False, special=False)])
    tok = _loaded(neox, "<|endoftext|>")
    assert tiktoken_encoding(tok) is None
    assert "overlaps the special token" in why_not_fast(tok)
