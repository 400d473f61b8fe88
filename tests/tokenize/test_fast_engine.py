"""The tiktoken engine: used only where it is exactly the tokenizer, checked per batch, else tokenizers."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, normalizers

from tokenmill.tokenize.fast_engine import encode_checked, tiktoken_encoding
from tokenmill.tokenize.tokenizer import _loaded, load_tokenizer, train_bpe

TEXTS = ["plain ascii text", "  spaces\t\ttabs  \n\n\n x", "naïve café — “quotes” 中文", "a <|endoftext|> b", ""]


@pytest.fixture
def gpt2(shared_data):
    return load_tokenizer(str(shared_data / "tokenizer" / "gpt2_tokenizer.json"))


def test_gpt2_uses_tiktoken_with_identical_ids(gpt2, shared_data):
    texts = json.load(open(shared_data / "pile" / "pearl_pile_texts.json", encoding="utf-8"))[:200] + TEXTS
    encoding = tiktoken_encoding(gpt2)
    assert encoding is not None
    fast, engine = encode_checked(gpt2, encoding, texts)
    assert engine == "tiktoken"
    assert [list(x) for x in fast] == [list(x) for x in gpt2.encode_documents(texts)]


def test_trained_tokenizer_is_checked_too():
    texts = [f"document {i} about rivers and mountains, naïve café {i * 3}" for i in range(200)]
    tok = train_bpe(texts, vocab_size=500)
    ids, engine = encode_checked(tok, tiktoken_encoding(tok), texts + TEXTS)
    assert [list(x) for x in ids] == [list(x) for x in tok.encode_documents(texts + TEXTS)]
    assert engine in ("tiktoken", "tokenizers")


def test_a_normalizer_keeps_tokenizers(gpt2):
    spec = json.loads(gpt2.tokenizer.to_str())
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    tokenizer.normalizer = normalizers.NFC()
    tok = _loaded(tokenizer, "<|endoftext|>")
    assert tiktoken_encoding(tok) is None
    assert encode_checked(tok, None, TEXTS)[1] == "tokenizers"


def test_a_mismatch_falls_back_for_the_whole_batch(gpt2):
    class Wrong:
        def encode_ordinary_batch(self, texts, num_threads=1):
            return [[1, 2, 3] for _ in texts]

    ids, engine = encode_checked(gpt2, Wrong(), TEXTS)
    assert engine == "tokenizers" and [list(x) for x in ids] == [list(x) for x in gpt2.encode_documents(TEXTS)]
