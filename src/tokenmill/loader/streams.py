"""Token streams: the token files of one source in a `tokens.json`, read as one concatenated stream of tokens.

A stream is what the tokenize stage wrote for one source of one split: its ``.bin`` files in ``tokens.json`` order,
each document's ids followed by its end-of-text id. Sample ``i`` of a stream is tokens ``[i L, i L + L + 1)``
(``L = seq_len``): inputs and labels shifted by one, the last token shared with the next sample, as GPT-3, OPT and
Megatron-LM cut their data. Files are opened lazily (startup reads only ``tokens.json``) and kept in a small cache,
so thousands of files never exhaust file descriptors. A `tokens.json` given as a URI (``s3://``, ``file://``) makes
remote streams: their files are read from the node's bounded cache (``prefetch.TokenFetcher``), fetched on demand.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tokenmill.tokenize import bundle, tokens_json
from tokenmill.tokenize.indexed import IndexedReader, parse_index
from tokenmill.tokenize.tokens_json import DataError

OPEN_FILES = 128
HEAD = "head"
"""Marks a file read by its recorded head only (`TokenStream.parts`, the fetcher's keys)."""


@dataclass(frozen=True)
class TokenFile:
    prefix: Path | str
    """A local path, or a URI (a remote stream's file) without the extension."""
    tokens: int
    documents: int
    sha256: str
    """Of the ``.bin``, as `tokens.json` records it (part of the stream's fingerprint)."""
    idx_sha256: str = ""
    """Of the ``.idx``, as recorded ("" when the index has none)."""
    head_bytes: int = 0
    """The length of the ``.bin``'s head whose sha256 is recorded (0: none; the file is only fetched whole)."""
    head_sha256: str = ""
    docs_sha256: str = ""
    """Of the ``.docs.parquet`` sidecar (attribution reads it), as recorded ("" when the index has none)."""

    @property
    def name(self) -> str:
        """The file's name without its folder (the same for a local path and a URI)."""
        return self.prefix.name if isinstance(self.prefix, Path) else self.prefix.rsplit("/", 1)[-1]


@dataclass
class TokenStream:
    """One source's token files of one split, read as a single stream."""

    name: str
    dataset: int
    source: str
    files: list[TokenFile]
    dtype: np.dtype
    fetcher: Any = field(default=None, repr=False)
    """Set for a remote stream: where its files come from (``prefetch.TokenFetcher``)."""
    heads: bool = False
    """A remote stream whose cache cannot hold all the data: a sample running into a file reads its head only."""
    _starts: np.ndarray = field(init=False, repr=False)
    _starts_list: list = field(init=False, repr=False)
    """``_starts`` as Python ints, for `file_range`'s bisect (a few hundred ns where numpy's searchsorted on two
    scalars costs microseconds)."""
    _open: OrderedDict = field(init=False, repr=False, default_factory=OrderedDict)
    _doc_ends: dict = field(init=False, repr=False, default_factory=dict)
    _views: dict = field(init=False, repr=False, default_factory=dict)
    _heads: dict = field(init=False, repr=False, default_factory=dict)
    """Remote streams: file -> (its head's tokens, its .idx path), for a file held by its head only."""

    def __post_init__(self):
        sizes = np.array([f.tokens for f in self.files], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._starts_list = self._starts.tolist()

    def __getstate__(self):
        # Memory maps are reopened in each DataLoader worker, never pickled (that would copy the data).
        state = dict(self.__dict__)
        state["_open"] = OrderedDict()
        state["_doc_ends"] = {}
        state["_views"] = {}
        state["_heads"] = {}
        return state

    @property
    def tokens(self) -> int:
        return int(self._starts[-1])

    def file_range(self, start: int, stop: int) -> range:
        """The files holding tokens ``[start, stop)`` (``stop > start``)."""
        starts = self._starts_list
        return range(bisect.bisect_right(starts, start) - 1, bisect.bisect_right(starts, stop - 1))

    def samples(self, seq_len: int) -> int:
        return max(0, (self.tokens - 1) // seq_len)

    @property
    def fingerprint(self) -> str:
        text = json.dumps([[f.name, f.tokens, f.sha256] for f in self.files])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def reader(self, i: int) -> IndexedReader:
        reader = self._open.get(i)
        if reader is None:
            f = self.files[i]
            try:
                reader = IndexedReader(f.prefix if self.fetcher is None else self.fetcher.local(self, i))
            except ValueError as exc:
                raise DataError(f"stream {self.name}: {f.prefix}: {exc}") from None
            self._check_tokens(i, reader.num_tokens)
            if reader.dtype.newbyteorder("=") != self.dtype.newbyteorder("="):
                raise DataError(f"{f.prefix}.idx has dtype {reader.dtype}, tokens.json says {self.dtype}")
            # A plain ndarray view of the map: slicing np.memmap itself costs a subclass finalizer per slice.
            self._open[i] = reader
            self._views[i] = reader.tokens.view(np.ndarray)
            if len(self._open) > OPEN_FILES:
                evicted, _ = self._open.popitem(last=False)
                self._views.pop(evicted, None)
        else:
            self._open.move_to_end(i)
        return reader

    def _check_tokens(self, i: int, found: int) -> None:
        """File ``i``'s ``.idx`` counts ``found`` tokens: what `tokens.json` records, else a DataError naming it."""
        f = self.files[i]
        if found != f.tokens:
            raise DataError(f"{f.prefix}.idx holds {found} tokens but tokens.json says {f.tokens}: "
                            "the files changed after tokenize; rerun the tokenize stage")

    def forget(self, i: int, head: bool = False) -> None:
        """Close file ``i``'s memory map, or its head's (a remote file is about to be released to eviction)."""
        if head:
            self._heads.pop(i, None)
            return
        self._open.pop(i, None)
        self._views.pop(i, None)

    def parts(self, start: int, stop: int) -> list[tuple]:
        """What a remote stream's tokens ``[start, stop)`` read: ``(file,)`` for a whole file, ``(file, HEAD)`` for
        the next file's recorded head when they run from one file into the next only as far as that head holds (the
        head is read instead of the whole file)."""
        files = self.file_range(start, stop)
        if self.heads and len(files) == 2:
            nxt = files[1]
            if (stop - self._starts_list[nxt]) * self.dtype.itemsize <= self.files[nxt].head_bytes:
                return [(files[0],), (nxt, HEAD)]
        return [(i,) for i in files]

    def set_head(self, i: int, bin_path, idx_path) -> None:
        """File ``i`` is held by its head: the tokens in ``bin_path`` (its first bytes, verified), its ``.idx``."""
        self._heads[i] = (np.memmap(bin_path, dtype=self.dtype, mode="r").view(np.ndarray), Path(idx_path))

    def file_tokens(self, i: int) -> np.ndarray:
        """Every token of file ``i`` (a read-only view of its memory map)."""
        view = self._views.get(i)
        if view is None:
            self.reader(i)
            view = self._views[i]
        return view

    def read(self, start: int, count: int, out: np.ndarray | None = None) -> np.ndarray:
        """Tokens ``[start, start + count)`` of the stream as int64 (crossing file ends as needed)."""
        if start < 0 or start + count > self.tokens:
            raise IndexError(f"tokens [{start}, {start + count}) outside stream {self.name} of {self.tokens}")
        out = np.empty(count, dtype=np.int64) if out is None else out
        i = int(np.searchsorted(self._starts, start, side="right")) - 1
        done = 0
        while done < count:
            offset = start + done - int(self._starts[i])
            take = min(count - done, self.files[i].tokens - offset)
            if take > 0:
                head = self._heads.get(i) if i not in self._views else None
                view = head[0] if head is not None and offset + take <= len(head[0]) else self.file_tokens(i)
                out[done:done + take] = view[offset:offset + take]
                done += take
            i += 1
        return out

    def document_ends(self, i: int) -> np.ndarray:
        """Cumulative token ends of file ``i``'s documents, in stream coordinates."""
        ends = self._doc_ends.get(i)
        if ends is None:
            head = self._heads.get(i) if i not in self._open else None
            if head is not None:  # held by its head: the documents from its .idx alone
                parsed = parse_index(head[1].read_bytes(), head[1])
                self._check_tokens(i, parsed.num_tokens)
                lengths = parsed.sequence_lengths
            else:
                lengths = self.reader(i).sequence_lengths
            ends = int(self._starts[i]) + np.cumsum(lengths, dtype=np.int64)
            if len(self._doc_ends) >= OPEN_FILES:
                self._doc_ends.clear()
            self._doc_ends[i] = ends
        return ends

    def documents(self, start: int, stop: int) -> list[tuple[int, int, int, int]]:
        """Documents overlapping stream tokens ``[start, stop)``: (file, document in file, doc start, doc end)."""
        found = []
        i = int(np.searchsorted(self._starts, start, side="right")) - 1
        while i < len(self.files) and int(self._starts[i]) < stop:
            ends = self.document_ends(i)
            d = int(np.searchsorted(ends, start, side="right"))
            while d < len(ends):
                doc_start = int(ends[d - 1]) if d else int(self._starts[i])
                if doc_start >= stop:
                    break
                found.append((i, d, doc_start, int(ends[d])))
                d += 1
            i += 1
        return found

    def boundaries(self, start: int, stop: int) -> np.ndarray:
        """Stream positions in ``(start, stop)`` where a document starts."""
        out = []
        i = int(np.searchsorted(self._starts, start, side="right")) - 1
        while i < len(self.files) and int(self._starts[i]) < stop:
            ends = self.document_ends(i)
            lo, hi = np.searchsorted(ends, [start, stop - 1], side="right")
            out.append(ends[lo:hi])
            i += 1
        return np.concatenate(out) if out else np.empty(0, np.int64)


def _read_index(raw, store) -> tokens_json.TokensIndex:
    if store is not None and isinstance(raw, str) and "://" in raw:
        from tokenmill.loader.remote import read_index

        return read_index(raw, store)  # its prefixes are URIs: the stream's files are remote
    return tokens_json.read(raw)


def load_streams(paths: list[str | Path], split: str, store=None) -> tuple[list[TokenStream], dict]:
    """The streams of ``split`` in each `tokens.json`, in order: by dataset, then source name. Also the index info.
    With ``store`` (a ``remote.ObjectStore``), a path that is a URI is read through it, and its files are URIs."""
    if not paths:
        raise ValueError("paths: give at least one tokens.json")
    streams: list[TokenStream] = []
    info: dict = {}
    for d, raw in enumerate(paths):
        index = _read_index(raw, store)
        tok = index.tokenizer
        this = {"vocab_size": tok["vocab_size"], "eos_id": tok["eos_id"], "dtype": index.data["dtype"]}
        if info and {k: info[k] for k in this} != this:
            raise DataError(f"{index.path}: tokenizer {this} differs from {paths[0]}'s "
                            f"{dict((k, info[k]) for k in this)}; datasets mixed in one loader must share a tokenizer")
        info = {**this, "tokenizer_sha256": tok.get("sha256"), "tokenizer_file": str(index.tokenizer_path)}
        by_source: dict[str, list[TokenFile]] = {}
        for entry in index.files(split):
            sources = sorted(entry["by_source"]) or ["(unknown)"]
            hashes = entry["sha256"]
            head = entry.get("head") or {}
            f = TokenFile(index.prefix_path(entry), entry["tokens"], entry["documents"], hashes.get(bundle.BIN, ""),
                          hashes.get(bundle.IDX, ""), head.get("bytes", 0), head.get("sha256", ""),
                          hashes.get(bundle.DOCS, ""))
            by_source.setdefault("+".join(sources), []).append(f)
        for source in sorted(by_source):
            name = source if len(paths) == 1 else f"{d}/{source}"
            streams.append(TokenStream(name, d, source, by_source[source], index.dtype))
    return streams, info
