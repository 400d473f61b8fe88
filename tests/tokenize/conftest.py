"""Tokenizers for the tokenize tests, built from the shared GPT-2 files (nothing is downloaded)."""

from __future__ import annotations

import gzip
import json

import pytest
from tokenizers import AddedToken, Tokenizer

DOLMA = "commoncrawl/dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz"


def neox_like(shared_data) -> Tokenizer:
    """GPT-2 plus what GPT-NeoX-20B adds: non-special tokens for runs of 2..24 spaces (ids 50257-50279 here,
    50254-50276 there) and a special `<|padding|>`."""
    tokenizer = Tokenizer.from_file(str(shared_data / "tokenizer" / "gpt2_tokenizer.json"))
    tokenizer.add_tokens([AddedToken(" " * n, normalized=True, special=False) for n in range(24, 1, -1)])
    tokenizer.add_special_tokens([AddedToken("<|padding|>", normalized=False, special=True)])
    return tokenizer


def web_texts(shared_data) -> list[str]:
    """Real web documents (697 from a Common Crawl WET file, as dolma keeps them) and 1000 Pile documents."""
    with gzip.open(shared_data / DOLMA, "rt", encoding="utf-8") as f:
        web = [json.loads(line)["text"] for line in f]
    return web + json.load(open(shared_data / "pile" / "pearl_pile_texts.json", encoding="utf-8"))


@pytest.fixture
def neox(shared_data) -> Tokenizer:
    return neox_like(shared_data)
