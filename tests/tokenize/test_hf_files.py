"""The files beside `tokenizer.json` make `transformers.AutoTokenizer` load the run's tokenizer with its end-of-text
token and the same ids as `tokenizers` (the real `transformers`, offline, from the local folder only)."""

from __future__ import annotations

import pytest

from tokenmill.tokenize import hf_files
from tokenmill.tokenize.tokenizer import train_bpe

TEXTS = ["The river , he said . It rose at dawn !", "Ein Dorf am Meer: 3 Häuser, 12 Boote.", "  spaces  and\ttabs\n"]


def load_folder(folder):
    """AutoTokenizer from ``folder`` only (local_files_only; the tests also set HF_HUB_OFFLINE=1)."""
    transformers = pytest.importorskip("transformers", reason="transformers is in the `test` extra")
    return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def test_auto_tokenizer_knows_the_end_of_text_token(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok = train_bpe([t * 5 for t in TEXTS] * 10, 400, "<|endoftext|>")
    (tmp_path / "tokenizer.json").write_text(tok.tokenizer.to_str(), encoding="utf-8")
    bare = load_folder(tmp_path)
    assert bare.eos_token is None  # the friction the files fix: tokenizer.json alone has no end-of-text token
    for name, data in hf_files.transformers_files("<|endoftext|>").items():
        (tmp_path / name).write_bytes(data)
    hf = load_folder(tmp_path)
    assert hf.eos_token == "<|endoftext|>" and hf.eos_token_id == tok.eos_id
    for text, ids in zip(TEXTS, tok.encode_documents(TEXTS)):
        assert hf.encode(text, add_special_tokens=False) == ids[:-1].tolist()
        assert hf.decode(ids[:-1].tolist()) == tok.decode(ids[:-1]) == text  # no clean-up of " ," and " ."


def test_the_files_are_the_same_bytes_every_time():
    assert hf_files.transformers_files("<|e|>") == hf_files.transformers_files("<|e|>")
    assert b'"eos_token": "<|e|>"' in hf_files.transformers_files("<|e|>")[hf_files.TOKENIZER_CONFIG]
