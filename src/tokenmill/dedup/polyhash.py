"""Polynomial hashes of uint64 runs in O(1) each from prefix sums, and the murmur3 finaliser: shared by dedup
shingles and decontamination n-grams."""

from __future__ import annotations

import numpy as np

U64 = np.uint64
BASE = 0x9E3779B97F4A7C15  # odd, hence invertible mod 2^64
BASE_INV = pow(BASE, -1, 1 << 64)
LEN_MIX = 0xD6E8FEB86659FD93  # added n times so that runs of different lengths never share a hash
_S33, _FMIX1, _FMIX2 = U64(33), U64(0xFF51AFD7ED558CCD), U64(0xC4CEB9FE1A85EC53)
_pow = np.ones(1, dtype=U64)
_ipow = np.ones(1, dtype=U64)


def powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """B^j and B^-j mod 2^64 for j < n (cached, grown by doubling)."""
    global _pow, _ipow
    if len(_pow) < n:
        size = 1 << (n - 1).bit_length()
        pw = np.empty(size, dtype=U64)
        ipw = np.empty(size, dtype=U64)
        pw[0] = ipw[0] = 1
        pw[1:] = BASE
        ipw[1:] = BASE_INV
        np.multiply.accumulate(pw, out=pw)
        np.multiply.accumulate(ipw, out=ipw)
        _pow, _ipow = pw, ipw
    return _pow[:n], _ipow[:n]


def fmix64(x: np.ndarray) -> None:
    """murmur3 64-bit finaliser, in place."""
    x ^= x >> _S33
    x *= _FMIX1
    x ^= x >> _S33
    x *= _FMIX2
    x ^= x >> _S33
