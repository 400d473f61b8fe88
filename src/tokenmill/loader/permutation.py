"""A keyed bijection on [0, n): a Feistel network with cycle walking, the shuffle that needs no index.

Megatron-LM builds and caches a shuffle index on disk (minutes on large data, Megatron-LM#795); nanoGPT samples
random offsets with replacement. A Feistel network over the smallest even-bit domain that holds ``n`` is a
permutation of that domain for any round function; applying it again while the value lies outside [0, n)
("cycle walking", Black and Rogaway 2002) restricts it to a permutation of [0, n). The domain is below 4n, so on
average fewer than four applications are needed, and any position is computed in O(1) time and memory.
"""

from __future__ import annotations

import hashlib

import numpy as np

ROUNDS = 6
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_U64 = (1 << 64) - 1
_M1_INT, _M2_INT, _GOLDEN_INT = int(_M1), int(_M2), int(_GOLDEN)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a well-tested 64-bit avalanche, vectorised."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def round_keys(*parts: object) -> tuple[int, ...]:
    """ROUNDS 64-bit keys derived from ``parts`` (seed, data fingerprint, seq_len, epoch...) by BLAKE2b."""
    digest = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8 * ROUNDS).digest()
    return tuple(int.from_bytes(digest[8 * i : 8 * i + 8], "little") for i in range(ROUNDS))


class FeistelPermutation:
    """``perm(positions)`` maps positions in [0, n) to a permutation of [0, n) fixed by ``keys``."""

    def __init__(self, n: int, keys: tuple[int, ...]):
        if n < 0:
            raise ValueError(f"n must be non-negative, got {n}")
        self.n = int(n)
        bits = max(2, (self.n - 1).bit_length())
        self.half = (bits + 1) // 2
        self.mask = np.uint64((1 << self.half) - 1)
        self.keys = tuple(np.uint64(k) for k in keys)
        self._int_keys = tuple(int(k) for k in keys)

    def _once(self, x: np.ndarray) -> np.ndarray:
        h = np.uint64(self.half)
        left, right = x >> h, x & self.mask
        for key in self.keys:
            left, right = right, left ^ (_mix((right + key) * _GOLDEN) & self.mask)
        return (left << h) | right

    def _one(self, x: int) -> int:
        """The same permutation for one position in Python integers: faster than numpy for a micro-batch."""
        half, mask, n = self.half, int(self.mask), self.n
        while True:
            left, right = x >> half, x & mask
            for key in self._int_keys:
                z = (((right + key) & _U64) * _GOLDEN_INT) & _U64
                z = ((z ^ (z >> 30)) * _M1_INT) & _U64
                z = ((z ^ (z >> 27)) * _M2_INT) & _U64
                left, right = right, left ^ ((z ^ (z >> 31)) & mask)
            x = (left << half) | right
            if x < n:
                return x

    def __call__(self, positions) -> np.ndarray:
        x = np.asarray(positions, dtype=np.int64)
        if x.size and (int(x.min()) < 0 or int(x.max()) >= self.n):
            raise IndexError(f"positions must lie in [0, {self.n})")
        if self.n <= 1:
            return x.copy()
        if x.size <= 32:
            return np.array([self._one(int(v)) for v in x.ravel()], dtype=np.int64).reshape(x.shape)
        y = self._once(x.astype(np.uint64))
        outside = y >= np.uint64(self.n)
        while outside.any():
            y[outside] = self._once(y[outside])
            outside = y >= np.uint64(self.n)
        return y.astype(np.int64)
