"""MinHash signatures of shingle-hash sets, batched over many documents with numpy."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

EMPTY = np.iinfo(np.uint64).max  # every position of an empty set's signature (no real value reaches 2^32)
_CHUNK_BYTES = 6 << 20  # bound on the permutation matrix computed at once: about 5,000 shingles a chunk at 320
# permutations, the widths at which numpy 2.4 runs both broadcast passes fastest (4 MiB: 1.3x slower; docs/dedup.md)


class MinHasher:
    """num_perm keyed hash permutations; signature[i] = min over the set of h_i(x).

    Family ("affine32", as in datasketch >= 2.0): each 64-bit shingle hash (already well mixed by shingle_hashes)
    is folded to 32 bits, x = (v ^ v >> 32) mod 2^32, and h_i(x) = (a_i * x + b_i) mod 2^32 with a_i odd, so every
    h_i is a bijection of the 32-bit values (no collisions inside a permutation) and each signature position is an
    unbiased Jaccard estimator for hashed input. It is used instead of (a*x + b) mod (2^61 - 1) because numpy does
    it in two uint32 vector operations per element with no overflow handling, about 4x faster than 64-bit Mersenne
    arithmetic; the price is 32-bit shingle hashes, which only inflate similarity for sets of ~10^8 shingles.
    a_i, b_i come from np.random.default_rng(seed). Signatures are uint64 holding values < 2^32; an empty set gives
    EMPTY (2^64 - 1) everywhere, which no non-empty set can produce.
    """

    def __init__(self, num_perm: int = 320, seed: int = 1):
        if num_perm < 1:
            raise ValueError(f"num_perm must be >= 1, got {num_perm}")
        self.num_perm = num_perm
        self.seed = seed
        rng = np.random.default_rng(seed)
        self.a = (rng.integers(0, 1 << 32, num_perm, dtype=np.uint64) | np.uint64(1)).astype(np.uint32)
        self.b = rng.integers(0, 1 << 32, num_perm, dtype=np.uint64).astype(np.uint32)
        self._chunk = max(1, _CHUNK_BYTES // (4 * num_perm))  # shingles per chunk

    def signature(self, shingles: np.ndarray) -> np.ndarray:
        """(num_perm,) uint64 signature of one set of uint64 shingle hashes."""
        return self.signatures([shingles])[0]

    def signatures(self, shingle_sets: Sequence[np.ndarray]) -> np.ndarray:
        """(n, num_perm) uint64 signatures; sets are concatenated and permuted in memory-bounded chunks of rows,
        each reduced per document with np.minimum.reduceat (a document may span chunks)."""
        out = np.full((len(shingle_sets), self.num_perm), EMPTY, dtype=np.uint64)
        mins, nonempty = self.minima(shingle_sets)
        out[nonempty] = mins.T
        return out

    def minima(self, shingle_sets: Sequence[np.ndarray], perms: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The signatures' values of the non-empty sets for the first `perms` permutations (all by default),
        permutation-major: a (perms, m) uint32 array, and the indices of those m sets among `shingle_sets`."""
        perms = self.num_perm if perms is None else perms
        if not 1 <= perms <= self.num_perm:
            raise ValueError(f"perms must be in [1, {self.num_perm}], got {perms}")
        sizes = np.fromiter(map(len, shingle_sets), dtype=np.int64, count=len(shingle_sets))
        nonempty = np.flatnonzero(sizes)
        mins = np.full((perms, len(nonempty)), np.iinfo(np.uint32).max, dtype=np.uint32)
        if not len(nonempty):
            return mins, nonempty
        values = np.concatenate([np.asarray(shingle_sets[i], dtype=np.uint64) for i in nonempty])
        folded = (values ^ (values >> np.uint64(32))).astype(np.uint32)  # astype keeps the low 32 bits
        del values
        offsets = np.zeros(len(nonempty) + 1, dtype=np.int64)
        np.cumsum(sizes[nonempty], out=offsets[1:])
        total = int(offsets[-1])
        rows = min(max(1, self._chunk * self.num_perm // perms), total)  # the same bytes with fewer permutations
        buf = np.empty(perms * rows, dtype=np.uint32)
        a, b = self.a[:perms, None], self.b[:perms, None]
        for r0 in range(0, total, rows):
            r1 = min(r0 + rows, total)
            d0 = int(np.searchsorted(offsets, r0, side="right")) - 1
            d1 = int(np.searchsorted(offsets, r1, side="left"))
            perm = buf[: perms * (r1 - r0)].reshape(perms, r1 - r0)
            np.multiply(a, folded[None, r0:r1], out=perm)
            perm += b
            part = np.minimum.reduceat(perm, np.maximum(offsets[d0:d1], r0) - r0, axis=1)
            np.minimum(mins[:, d0:d1], part, out=mins[:, d0:d1])
        return mins, nonempty
