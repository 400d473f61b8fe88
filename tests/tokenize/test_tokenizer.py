"""Tokenizers: GPT-2 files give tokenizers' own ids; special-token strings in documents are text; eos is read."""

from __future__ import annotations

import json

import pytest

from tokenmill.errors import ConfigError
from tokenmill.tokenize.tokenizer import load_gpt2_files, load_tokenizer, train_bpe


@pytest.fixture
def gpt2(shared_data):
    tok = shared_data / "tokenizer"
    return load_gpt2_files(str(tok / "encoder.json"), str(tok / "vocab.bpe")), load_tokenizer(str(tok / "gpt2_tokenizer.json"))


def pile_texts(shared_data, n=200):
    return json.load(open(shared_data / "pile" / "pearl_pile_texts.json", encoding="utf-8"))[:n]


def test_gpt2_files_give_tokenizers_own_ids(gpt2, shared_data):
    from_files, reference = gpt2
    assert from_files.eos_id == reference.eos_id == 50256 and from_files.vocab_size == 50257
    texts = pile_texts(shared_data) + ["  spaces\tand\ttabs  ", "naïve café — “quotes”", "中文文本"]
    ours = from_files.encode_documents(texts)
    theirs = reference.tokenizer.encode_batch(texts, add_special_tokens=False)
    assert all(list(a[:-1]) == t.ids for a, t in zip(ours, theirs))


def test_special_token_text_is_ordinary_text(gpt2):
    tok = gpt2[1]
    doc = "a forum post that writes <|endoftext|> in the middle"
    (ids,) = tok.encode_documents([doc])
    assert list(ids).count(tok.eos_id) == 1 and ids[-1] == tok.eos_id
    assert tok.decode(ids[:-1]) == doc
    assert tok.count_special_strings([doc, "clean"]) == 1


def test_round_trip_chinese_and_pile(gpt2, shared_data):
    tok = gpt2[1]
    zh = [line.split("\t", 1)[1] for line in (shared_data / "chinese" / "thucnews_cnews.val.txt").read_text(encoding="utf-8").splitlines(keepends=True)][:50]
    texts = pile_texts(shared_data, 100) + zh
    for text, ids in zip(texts, tok.encode_documents(texts)):
        assert tok.decode(ids[:-1]) == text


def test_trained_tokenizer_reads_its_own_eos_and_missing_eos_is_an_error(tmp_path):
    texts = [f"document number {i} talks about rivers, mountains and {i * 7} small towns." for i in range(300)]
    tok = train_bpe(texts, vocab_size=400)
    assert tok.vocab_size <= 400 and tok.eos_id == tok.tokenizer.token_to_id("<|endoftext|>") != 50256
    assert tok.decode(tok.encode_documents(texts[:1])[0][:-1]) == texts[0]
    path = tmp_path / "tok.json"
    tok.tokenizer.save(str(path))
    with pytest.raises(ConfigError, match="no end-of-text token '<eos>'"):
        load_tokenizer(str(path), eos_token="<eos>")
    (tmp_path / "bad.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(ConfigError, match="is not a tokenizer.json"):
        load_tokenizer(str(tmp_path / "bad.json"))


def test_non_special_added_tokens_give_the_tokenizers_own_ids(neox, shared_data):
    """GPT-NeoX-style runs of spaces are added tokens that are not special: they are kept, so every real document
    encodes to `encode(text, add_special_tokens=False)` of the tokenizer as given ("  To" is "  " + "To")."""
    from tests.tokenize.conftest import web_texts
    from tokenmill.tokenize.tokenizer import _loaded

    tok = _loaded(neox, "<|endoftext|>")
    texts = web_texts(shared_data)
    ours = [list(ids[:-1]) for ids in tok.encode_documents(texts)]
    theirs = [e.ids for e in neox.encode_batch(texts, add_special_tokens=False)]
    assert sum(a != b for a, b in zip(ours, theirs)) == 0
    assert sum(any(i > tok.eos_id for i in ids) for ids in ours) > 100  # documents where the added tokens apply
    (doc,) = tok.encode_documents(["Hello.  To be"])
    assert list(doc[2:4]) == [neox.token_to_id("  "), neox.token_to_id("To")]


def test_special_token_strings_stay_text_beside_added_tokens(neox):
    """With added tokens kept, special-token strings are still text: no eos or padding id inside a document."""
    import pickle

    from tokenmill.tokenize.tokenizer import _loaded

    tok = pickle.loads(pickle.dumps(_loaded(neox, "<|endoftext|>")))  # noqa: S301 - our own object, as a Ray worker receives it
    doc = "x  <|padding|>  <|endoftext|>  y"
    (ids,) = tok.encode_documents([doc])
    specials = {neox.token_to_id("<|padding|>"), tok.eos_id}
    assert not specials & set(ids[:-1].tolist()) and ids[-1] == tok.eos_id
    as_text = neox.__class__.from_str(neox.to_str())
    as_text.encode_special_tokens = True
    assert list(ids[:-1]) == as_text.encode(doc, add_special_tokens=False).ids
    assert neox.token_to_id("  ") in ids.tolist() and tok.decode(ids[:-1]) == doc
    assert tok.count_special_strings([doc, "clean"]) == 1
