"""The token-file bundle has one owner (tokenmill.tokenize.bundle): its file names, the head record of a `.bin`, and
the entry read back from the files equal to the one written with them."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa

from tokenmill.tokenize import bundle


def test_the_head_record_is_the_sha256_of_the_bins_first_bytes():
    raw = bytes(range(256)) * 1024  # 256 KiB
    assert bundle.head_record(raw) == {"bytes": bundle.HEAD_BYTES,
                                       "sha256": hashlib.sha256(raw[:bundle.HEAD_BYTES]).hexdigest()}
    assert bundle.head_record(raw[:bundle.HEAD_BYTES]) is None  # no longer than its head: fetched whole
    assert bundle.head_record(raw[:100], 64)["sha256"] == hashlib.sha256(raw[:64]).hexdigest()




class _Files:
    """A stage folder in memory: what `SplitFiles` writes through `write`."""

    def __init__(self):
        self.files: dict[str, bytes] = {}

    def write(self, relpath, data):
        self.files[relpath] = bytes(data)


def test_the_entry_read_back_from_a_bundle_is_the_one_written_with_it():
    """`SplitFiles` writes each file's .bin, .idx, .docs.parquet and .engine and makes its tokens.json entry from
    the bytes in hand; `read_entry` makes it again from the files alone (the index phase's path for a file whose
    size changed): the same entry, the recorded one kept only while every size agrees."""
    rng = np.random.default_rng(0)
    n = 300
    lengths = rng.integers(1, 2000, size=n)  # a file past HEAD_BYTES, so an entry with a head
    tokens = rng.integers(0, 65536, size=int(lengths.sum()))
    table = pa.table({"id": [f"d{i}" for i in range(n)], "source": ["web" if i % 3 else "books" for i in range(n)],
                      "subset": [None if i % 2 else "en" for i in range(n)]})
    out = _Files()
    split = bundle.SplitFiles("train", "shard", np.dtype(np.uint16), 200_000, table, {"tiktoken", "tokenizers"}, out)
    split.add(np.arange(n), lengths, tokens)
    split.flush()
    assert len(split.files) >= 2 and any("head" in f for f in split.files)
    assert sorted(out.files) == sorted(f"{f['prefix']}{ext}" for f in split.files
                                       for ext in (*bundle.HASHED, bundle.ENGINE))
    sizes = {path: len(raw) for path, raw in out.files.items()}
    for written in split.files:
        prefix = written["prefix"]
        read = bundle.read_entry(out.files.__getitem__, prefix, prefix)
        recorded = bundle.recorded_entry(written, sizes, prefix, 2)
        assert read == recorded == {k: written[k] for k in bundle.ENTRY_KEYS if k in written}
        assert read["engine"] == "tiktoken+tokenizers" and set(read["sha256"]) == set(bundle.HASHED)
        assert read["by_source"]["web"]["subsets"]["(none)"]["documents"] > 0
        docs = bundle.read_docs(out.files[prefix + bundle.DOCS])
        assert docs.schema.equals(bundle.docs_schema()) and docs.column("tokens").to_pylist() == \
            [int(lengths[int(i[1:])]) for i in docs.column("id").to_pylist()]
        # A file whose size differs from what was recorded: the recorded entry is not used.
        assert bundle.recorded_entry(written, {**sizes, prefix + bundle.DOCS: sizes[prefix + bundle.DOCS] + 1},
                                     prefix, 2) is None
