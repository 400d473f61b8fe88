"""The files `transformers` reads beside a `tokenizer.json`, so `AutoTokenizer.from_pretrained(<run>/tokenize)` (and
Megatron's HuggingFace tokenizer wrapper, which calls it) knows the end-of-text token the token files end each
document with. `tokenizer.json` alone loads, but with no ``eos_token``: training code that appends or looks for it
gets None.
"""

from __future__ import annotations

import json

TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"


def transformers_files(eos_token: str) -> dict[str, bytes]:
    """{file name: bytes} to write beside `tokenizer.json` (the same bytes for the same token: reruns match).

    ``PreTrainedTokenizerFast`` is the class every `transformers` version since 4.0 maps to a bare `tokenizer.json`;
    ``clean_up_tokenization_spaces`` off, so that ``decode`` gives back the text `tokenizers` decodes (4.x cleaned
    spaces before punctuation by default). `special_tokens_map.json` as `save_pretrained` of transformers 4.x
    writes it, for tools that read the special tokens from there.
    """
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos_token,
              "clean_up_tokenization_spaces": False}
    return {TOKENIZER_CONFIG: _json(config), SPECIAL_TOKENS_MAP: _json({"eos_token": eos_token})}


def _json(value: dict) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
