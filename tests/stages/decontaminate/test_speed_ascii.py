"""A batch of ASCII text is tokenised from its bytes, any other from its UTF-32 code points: the same tokens, spans and
hashes as the regex tokenizer either way, on real text (Pile documents, the standard library's own .py files) and
hostile text."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest

from tokenmill.stages.decontaminate.ngrams import normalize_tokens, token_hashes, tokenize_batch

HOSTILE = ["", "\x00", "a\x00b\x00\x00c", "\r", "x\r\ny\rz", "A" * 300_000, "word_with_underscores __ _", "   ",
           "MiXeD CaSe 123abc ABC123", "\t\x0b\x0c\x1c\x1f!@#$%^&*()"]


def _ascii_texts(shared: Path) -> list[str]:
    pile = json.loads((shared / "pile" / "pearl_pile_texts.json").read_text(encoding="utf-8"))
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("**/*.py"))[:200]
    code = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    return [t for t in pile + code if t.isascii()] + HOSTILE


@pytest.mark.parametrize("mixed", [False, True])
def test_an_ascii_batch_is_the_regex_tokenizer(shared_data, mixed):
    texts = _ascii_texts(shared_data)
    assert len(texts) > 500
    if mixed:  # one character past ASCII: the general path, for the same texts
        texts = texts + ["café ΣΑΣ", "x\ud800y z", "e\u0301cole İstanbul", "中文English混合，测试。", "𝔘𝔫𝔦 😀"]
    batch = tokenize_batch(texts, False, cuts=True)
    for i, text in enumerate(texts):
        tokens, spans = normalize_tokens(text)
        lo, hi = batch.offsets[i], batch.offsets[i + 1]
        assert list(zip(batch.starts[lo:hi].tolist(), batch.ends[lo:hi].tolist())) == spans, i
        assert batch.hashes[lo:hi].tolist() == token_hashes(tokens).tolist(), i
