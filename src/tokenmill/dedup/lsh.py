"""LSH banding of MinHash signatures: candidate probability, band/row choice, vectorised band keys."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tokenmill.dedup.minhash import EMPTY, MinHasher

_GRID = 2001  # points of the numerical integral over [0, threshold]
_U64 = np.uint64
_K1 = _U64(0x9E3779B97F4A7C15)
_K2 = _U64(0xBF58476D1CE4E5B9)
_K3 = _U64(0x94D049BB133111EB)


def candidate_probability(s: float, bands: int, rows: int) -> float:
    """P(two documents with Jaccard s share at least one band) = 1 - (1 - s**rows)**bands."""
    return 1.0 - (1.0 - s ** rows) ** bands


def choose_bands(threshold: float, num_perm: int, min_recall: float = 0.99) -> tuple[int, int]:
    """(bands, rows) with bands * rows <= num_perm and P(candidate | s = threshold) >= min_recall that minimise
    the false-candidate area, the integral of P(candidate | s) over s in [0, threshold) (ties: fewer hashes used).

    Raises ValueError naming num_perm when no choice reaches min_recall (e.g. rows = 1 is the most sensitive;
    it fails only when bands would have to exceed num_perm).
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    if not 0.0 < min_recall < 1.0:
        raise ValueError(f"min_recall must be in (0, 1), got {min_recall}")
    if num_perm < 1:
        raise ValueError(f"num_perm must be >= 1, got {num_perm}")
    pairs = np.array([(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)], dtype=np.float64)
    bands, rows = pairs[:, 0:1], pairs[:, 1:2]
    recall = 1.0 - (1.0 - threshold ** rows[:, 0]) ** bands[:, 0]
    ok = recall >= min_recall
    if not ok.any():
        raise ValueError(f"num_perm={num_perm} cannot give recall {min_recall} at Jaccard {threshold}: "
                         f"best is {recall.max():.4f}; use more permutations or a lower min_recall")
    bands, rows = bands[ok], rows[ok]
    s = np.linspace(0.0, threshold, _GRID)[None, :]
    prob = 1.0 - (1.0 - s ** rows) ** bands
    area = ((prob[:, 1:] + prob[:, :-1]) * 0.5).sum(axis=1) * (threshold / (_GRID - 1))
    best = min(range(len(area)), key=lambda i: (round(float(area[i]), 12), bands[i, 0] * rows[i, 0], bands[i, 0]))
    return int(bands[best, 0]), int(rows[best, 0])


def band_keys(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, bands) uint64: a 64-bit hash of each band's `rows` signature values with the band index mixed in, so
    equal keys mean (up to 2^-64 collisions) equal rows in the same band. Uses the first bands * rows columns."""
    sig = np.asarray(signatures)
    if sig.ndim != 2:
        raise ValueError(f"signatures must be 2-D (n, num_perm), got shape {sig.shape}")
    if bands < 1 or rows < 1 or bands * rows > sig.shape[1]:
        raise ValueError(f"{bands} bands x {rows} rows does not fit {sig.shape[1]} signature columns")
    sig = sig.astype(_U64, copy=False)[:, : bands * rows].reshape(len(sig), bands, rows)
    keys = np.broadcast_to((np.arange(bands, dtype=_U64) + _U64(1)) * _K1, (len(sig), bands)).copy()
    for j in range(rows):
        keys ^= sig[:, :, j]
        _mix(keys)
    return keys


def minhash_band_keys(hasher: MinHasher, shingle_sets: Sequence[np.ndarray], bands: int, rows: int) -> np.ndarray:
    """band_keys(hasher.signatures(shingle_sets), bands, rows) without the whole signatures: only the bands * rows
    permutations the keys use, read permutation-major (a band's j-th row of every document is one array)."""
    if bands < 1 or rows < 1 or bands * rows > hasher.num_perm:
        raise ValueError(f"{bands} bands x {rows} rows does not fit {hasher.num_perm} signature columns")
    mins, nonempty = hasher.minima(shingle_sets, bands * rows)
    keys = np.broadcast_to(((np.arange(bands, dtype=_U64) + _U64(1)) * _K1)[:, None], (bands, len(nonempty))).copy()
    for j in range(rows):
        keys ^= mins[j::rows]
        _mix(keys)
    # An empty set's signature is EMPTY everywhere: its keys are those of that one row.
    out = np.broadcast_to(band_keys(np.full((1, bands * rows), EMPTY, _U64), bands, rows), (len(shingle_sets), bands))
    out = out.copy()
    out[nonempty] = keys.T
    return out


def _mix(x: np.ndarray) -> None:
    """splitmix64 finaliser (a bijection of uint64), in place."""
    x += _K1
    x ^= x >> _U64(30)
    x *= _K2
    x ^= x >> _U64(27)
    x *= _K3
    x ^= x >> _U64(31)
