"""The band files' rows: the exact hash read back whole whichever way a band file carries it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import xxhash

from tokenmill.dedup.bands import exact_digests


def test_exact_hashes_come_back_whole_from_either_band_file_format():
    """The 128-bit exact hash travels as key (first 8 bytes) and `exact` (last 8); a band file of a run begun
    before that split carries the digest whole, and resuming such a run reads it the same."""
    digests = [xxhash.xxh3_128_digest(str(i).encode()) for i in range(5)] + [b"ab" + b"\0" * 14]
    halves = np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 2)
    split = exact_digests(halves[:, 0].copy(), pa.chunked_array([pa.array(halves[:, 1], pa.uint64())]))
    whole = exact_digests(halves[:, 0].copy(), pa.chunked_array([pa.array(digests, pa.binary(16))]))
    assert split.dtype == whole.dtype == np.dtype("S16")
    assert split.tolist() == whole.tolist() == np.array(digests, dtype="S16").tolist()
    assert exact_digests(np.zeros(0, np.uint64), pa.chunked_array([], pa.uint64())).shape == (0,)
