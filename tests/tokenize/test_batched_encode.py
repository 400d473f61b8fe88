"""The tokenize stage's batched paths give what the per-document ones give: flat encodings, batched token-file
writes, file splits at `max_tokens_per_file`, the two-pass training sample, the per-process unpickled tokenizer."""

from __future__ import annotations

import heapq
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.tokenize.conftest import neox_like, web_texts
from tokenmill.tokenize.bundle import SplitFiles, docs_schema
from tokenmill.tokenize.sample import id_key, training_sample
from tokenmill.tokenize.fast_engine import encode_checked, encode_flat, tiktoken_encoding
from tokenmill.tokenize.indexed import IndexedWriter
from tokenmill.tokenize.tokenizer import _loaded, load_tokenizer


@pytest.fixture
def gpt2(shared_data):
    return load_tokenizer(str(shared_data / "tokenizer" / "gpt2_tokenizer.json"))


@pytest.mark.parametrize("engine", ["tiktoken", "tokenizers"])
@pytest.mark.parametrize("which", ["gpt2", "neox"])
def test_encode_flat_is_encode_checked_back_to_back(shared_data, gpt2, engine, which):
    tok = gpt2 if which == "gpt2" else _loaded(neox_like(shared_data), "<|endoftext|>")
    texts = web_texts(shared_data)[:300] + ["", "a <|endoftext|> b", "  spaces\t\ttabs  \n\n\n x" + " " * 30]
    encoder = tiktoken_encoding(tok) if engine == "tiktoken" else None
    assert (encoder is not None) == (engine == "tiktoken")
    docs, used = encode_checked(tok, encoder, texts)
    flat, lengths, used_flat = encode_flat(tok, encoder, texts)
    assert used == used_flat == engine
    assert lengths.tolist() == [len(d) for d in docs]
    assert np.array_equal(flat, np.concatenate(docs))
    assert flat[np.cumsum(lengths) - 1].tolist() == [tok.eos_id] * len(texts)


def test_add_documents_writes_what_add_document_writes():
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 65536, size=int(rng.integers(0, 50))) for _ in range(40)]
    one, batched = IndexedWriter(np.uint16), IndexedWriter(np.uint16)
    for doc in docs:
        one.add_document(doc)
    batched.add_documents(np.concatenate(docs[:25]), [len(d) for d in docs[:25]])
    batched.add_documents(np.concatenate(docs[25:]), [len(d) for d in docs[25:]])
    a, b = one.finalize(), batched.finalize()
    assert bytes(a[0]) == bytes(b[0]) and a[1] == b[1]
    with pytest.raises(ValueError, match="do not fit uint16"):
        IndexedWriter(np.uint16).add_documents(np.array([1, 65536]), [2])
    with pytest.raises(ValueError, match="do not split"):
        IndexedWriter(np.uint16).add_documents(np.array([1, 2, 3]), [1, 1])


class _Ctx:
    def __init__(self):
        self.files: dict[str, bytes] = {}

    def write(self, relpath, data):
        self.files[relpath] = bytes(data)


@pytest.mark.parametrize("max_tokens", [1, 7, 40, 10**9])
def test_split_files_close_after_the_document_that_fills_them(max_tokens):
    """As the per-document loop did: a file is written after the document that brings it to max_tokens."""
    rng = np.random.default_rng(max_tokens)
    n = 60
    lengths = rng.integers(1, 12, size=n)
    tokens = rng.integers(0, 1000, size=int(lengths.sum()))
    table = pa.table({"id": [f"d{i}" for i in range(n)], "source": ["s"] * n, "subset": [None] * n})
    ctx = _Ctx()
    out = SplitFiles("train", "k", np.dtype(np.uint16), max_tokens, table, {"tiktoken"}, ctx)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for lo, hi in ((0, 13), (13, 14), (14, 60)):  # batches of any size
        out.add(np.arange(lo, hi), lengths[lo:hi], tokens[starts[lo]:starts[hi]])
    out.flush()
    expected, in_file, current = [], 0, []
    for i, length in enumerate(lengths):
        current.append(i)
        in_file += int(length)
        if in_file >= max_tokens:
            expected.append(current)
            in_file, current = 0, []
    if current:
        expected.append(current)
    assert [f["documents"] for f in out.files] == [len(e) for e in expected]
    assert (out.tokens, out.documents) == (int(lengths.sum()), n)
    for number, rows in enumerate(expected):
        stem = f"train/k.{number:04d}"
        side = pq.read_table(pa.BufferReader(ctx.files[f"{stem}.docs.parquet"]))
        assert side.schema.equals(docs_schema())
        assert side.column("id").to_pylist() == [f"d{i}" for i in rows]
        assert side.column("tokens").to_pylist() == lengths[rows].tolist()
        body = np.frombuffer(ctx.files[f"{stem}.bin"], dtype="<u2")
        assert np.array_equal(body, np.concatenate([tokens[starts[i]:starts[i + 1]] for i in rows]))
        assert ctx.files[f"{stem}.engine"] == b"tiktoken"


def _sample_in_one_pass(tables, seed, n):
    """The sample as the stage chose it before the two passes: every document's text in a heap."""
    heap = []
    for table in tables:
        for doc_id, text in zip(table.column("id").to_pylist(), table.column("text").to_pylist()):
            item = (-id_key(seed, doc_id), doc_id, text)
            if len(heap) < n:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
    return [text for _, _, text in sorted(heap, key=lambda x: (-x[0], x[1]))]


@pytest.mark.parametrize("n", [1, 5, 37, 1000])
def test_training_sample_reads_back_the_same_documents(tmp_path, n):
    rng = np.random.default_rng(n)
    tables, paths = [], []
    for s in range(4):
        ids = [f"doc-{int(i)}" for i in rng.integers(0, 150, size=120)]  # repeated ids: equal keys, text decides
        table = pa.table({"id": ids, "text": [f"text {s}-{j}" for j in range(120)]})
        path = str(tmp_path / f"s{s}.parquet")
        pq.write_table(table, path, row_group_size=16)  # many row groups: only some are read back
        tables.append(table)
        paths.append(path)
    assert training_sample(paths, None, 7, n) == _sample_in_one_pass(tables, 7, n)


def test_unpickled_tokenizer_is_built_once_per_process_and_keeps_specials_as_text(gpt2):
    data = pickle.dumps(gpt2)
    a, b = pickle.loads(data), pickle.loads(data)  # noqa: S301 - the bytes pickled on the line above
    assert a is b and a.sha256 == gpt2.sha256 and a.eos_id == gpt2.eos_id
    assert a.text_encoder.encode_special_tokens
    assert gpt2.eos_id not in a.encode_documents(["a <|endoftext|> b"])[0][:-1].tolist()
