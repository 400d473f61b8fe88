"""One source's per-shard token files of a split, joined into files of about equal size, cut at documents."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from tokenmill.tokenize.bundle import BIN, DOCS, ENGINE
from tokenmill.tokenize.indexed import IDX, build_index, parse_index

if TYPE_CHECKING:
    import pyarrow as pa


def plan_files(parts: Sequence[Mapping[str, Any]], max_tokens: int) -> list[dict[str, Any]]:
    """The files that `parts` (one source's per-shard files of one split, each ``{prefix, tokens}``, in stream order)
    are joined into: ``n = ceil(total / max_tokens)`` files, file ``i`` holding the documents that start in tokens
    ``[lo, hi) = [i * total // n, (i + 1) * total // n)`` of the parts back to back. Each comes with the parts it reads
    (``{prefix, start, tokens}``, ``start`` being the part's first token in that stream).

    Cut by tokens, not by whole parts: every file holds about ``total / n`` tokens (up to its last document more), at
    least half of ``max_tokens`` when there are two or more, so no source ends in a sliver of a file that a trainer
    rounds up to a whole sample; a small split (at most ``max_tokens``) is one file. Only the parts' token counts
    decide it, so any worker count gives the same files."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    starts = np.concatenate([[0], np.cumsum([int(p["tokens"]) for p in parts], dtype=np.int64)])
    total = int(starts[-1])
    n = -(-total // max_tokens)
    files = []
    for i in range(n):
        lo, hi = i * total // n, (i + 1) * total // n
        # A part is read when a document of it may start in [lo, hi): it begins before hi and ends after lo.
        reads = [{"prefix": p["prefix"], "start": int(starts[j]), "tokens": int(p["tokens"])}
                 for j, p in enumerate(parts) if starts[j] < hi and starts[j + 1] > lo]
        files.append({"lo": lo, "hi": hi, "parts": reads})
    return files


def join_parts(reads: Sequence[Mapping[str, Any]], lo: int, hi: int, read: Callable[[str], bytes],
               read_range: Callable[[str, int, int], bytes]) -> tuple[bytearray, bytes, "pa.Table", str] | None:
    """One planned file (`plan_files`): the documents of `reads` that start in stream tokens ``[lo, hi)``, as
    ``(bin, idx, sidecar table, engine)``; None when no document starts there (one document longer than the
    range). `read(path)` gives a whole file's bytes, `read_range(path, offset, size)` a ``.bin``'s range. Raises
    ValueError naming the part whose files no longer hold what the encode phase recorded."""
    import pyarrow as pa

    from tokenmill.tokenize.bundle import read_docs

    pieces: list[tuple[str, int, int, np.ndarray, "pa.Table"]] = []
    engines: set[str] = set()
    dtype = None
    for part in reads:
        prefix = part["prefix"]
        index = parse_index(read(prefix + IDX), prefix + IDX)
        if index.num_tokens != part["tokens"]:
            raise ValueError(f"{prefix}{IDX}: {index.num_tokens} tokens where the encode phase wrote {part['tokens']}: "
                             "the stage's intermediate files changed since; rerun the stage")
        if dtype is not None and index.dtype != dtype:
            raise ValueError(f"{prefix}{IDX}: dtype {index.dtype}, where the parts before it hold {dtype}")
        dtype = index.dtype
        lengths = index.sequence_lengths.astype(np.int64)
        doc_starts = part["start"] + np.cumsum(lengths) - lengths
        first, stop = np.searchsorted(doc_starts, [lo, hi])
        if first == stop:
            continue
        offset = int(index.sequence_pointers[first])
        size = int(lengths[first:stop].sum()) * dtype.itemsize
        side = read_docs(read(prefix + DOCS)).slice(int(first), int(stop - first))
        pieces.append((prefix, offset, size, lengths[first:stop], side))
        engines.update(read(prefix + ENGINE).decode().split("+"))
    if not pieces:
        return None
    out = bytearray(sum(size for _, _, size, _, _ in pieces))
    at = 0
    for prefix, offset, size, _, _ in pieces:
        data = read_range(prefix + BIN, offset, size)
        if len(data) != size:
            raise ValueError(f"{prefix}{BIN}: {len(data)} bytes at offset {offset} where its {IDX} describes {size}: "
                             "the stage's intermediate files changed since; rerun the stage")
        out[at:at + size] = data
        at += size
    lengths = np.concatenate([p[3] for p in pieces])
    side = pa.concat_tables([p[4] for p in pieces]).combine_chunks()
    return out, build_index(dtype, lengths), side, "+".join(sorted(engines))
