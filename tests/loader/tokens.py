"""Small token datasets in the tokenize stage's layout (tokens.json, .bin/.idx, .docs.parquet) for loader tests."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from tokenmill.tokenize import bundle, tokens_json
from tokenmill.tokenize.indexed import IndexedWriter

EOS = 0
TOKENIZER_SHA256 = hashlib.sha256(b"no tokenizer file: ids only").hexdigest()


def write_dataset(root: Path, sources: dict[str, list[list[int]]], files_per_source: int = 2,
                  split: str = "train", vocab_size: int = 65000, head_bytes: int | None = None,
                  every_sha256: bool = True) -> Path:
    """Documents (token lists, without EOS) per source, spread over files; returns the tokens.json path.

    Every document gets the EOS id appended, as the tokenize stage writes them; a sidecar names each document
    ``<source>-<n>``. ``head_bytes``: each file's head recorded as the stage records it (`bundle.head_record`),
    of that many bytes instead of the stage's `HEAD_BYTES` (these files are smaller). ``every_sha256``: the ``.idx``
    and ``.docs.parquet`` sha256 recorded as well as the ``.bin``'s, as the stage records them (off: only the
    ``.bin``'s, an index the loader refuses unless ``allow_unhashed``).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    (root / split).mkdir(exist_ok=True)
    entries = []
    for source, docs in sources.items():
        chunks = np.array_split(np.arange(len(docs)), files_per_source)
        for part, chunk in enumerate(chunks):
            if not len(chunk):
                continue
            prefix = f"{split}/{source}.{part:04d}"
            w = IndexedWriter(np.uint16 if vocab_size <= 65536 else np.int32)
            ids, lengths = [], []
            for i in chunk:
                doc = list(docs[i]) + [EOS]
                w.add_document(np.array(doc))
                ids.append(f"{source}-{i}")
                lengths.append(len(doc))
            bin_path, idx_path = w.write(root / prefix)
            pq.write_table(pa.table({"id": ids, "source": [source] * len(ids), "subset": [None] * len(ids),
                                     "tokens": lengths}, schema=pa.schema([("id", pa.string()), ("source", pa.string()),
                                                                           ("subset", pa.string()),
                                                                           ("tokens", pa.int64())])),
                           str(root / prefix) + ".docs.parquet")
            entries.append({"prefix": prefix, "documents": len(ids), "tokens": sum(lengths),
                            "by_source": {source: {"documents": len(ids), "tokens": sum(lengths)}},
                            "sha256": {".bin": hashlib.sha256(bin_path.read_bytes()).hexdigest()}})
            if every_sha256:
                for ext, p in ((".idx", idx_path), (".docs.parquet", Path(f"{root / prefix}.docs.parquet"))):
                    entries[-1]["sha256"][ext] = hashlib.sha256(p.read_bytes()).hexdigest()
            head = None if head_bytes is None else bundle.head_record(bin_path.read_bytes(), head_bytes)
            if head is not None:
                entries[-1]["head"] = head
    path = root / tokens_json.FILE
    # A second call with another split adds it to the same index.
    splits = {sp: e["files"] for sp, e in tokens_json.read(path).splits.items()} if path.exists() else {}
    splits[split] = entries
    index = tokens_json.build({"file": tokens_json.TOKENIZER_FILE, "sha256": TOKENIZER_SHA256, "vocab_size": vocab_size,
                               "eos_id": EOS}, "uint16" if vocab_size <= 65536 else "int32", splits)
    path.write_bytes(tokens_json.dumps(index))  # as the tokenize stage writes it
    return path


def labelled_docs(n_docs: int, rng: np.random.Generator, base: int = 1, min_len: int = 3,
                  max_len: int = 60) -> list[list[int]]:
    """Document i is made only of the token ``base + i``: every token names its document."""
    return [[base + i] * int(rng.integers(min_len, max_len)) for i in range(n_docs)]


def stream_tokens(tokens_json: Path, source: str) -> np.ndarray:
    """The naive reference: a source's files read whole and concatenated in tokens.json order."""
    from tokenmill.tokenize.indexed import IndexedReader
    from tokenmill.tokenize.tokens_json import read

    index = read(tokens_json)
    parts = [np.asarray(IndexedReader(index.prefix_path(e)).tokens, dtype=np.int64)
             for e in index.files("train") if source in e["by_source"]]
    return np.concatenate(parts)
