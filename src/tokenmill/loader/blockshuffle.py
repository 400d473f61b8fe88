"""A keyed bijection on [0, n) whose consecutive outputs stay within a few contiguous blocks: the shuffle a bounded
cache can follow.

A global shuffle sends consecutive samples anywhere in a stream, so a loader whose cache holds a quarter of the token
files fetches a whole file for nearly every sample (measured: 546 bytes fetched per byte used). MosaicML Streaming
(`py1e`/`py1b`: shards shuffled, then samples shuffled within a window of `shuffle_block_size` samples) and litdata
(chunks shuffled, then samples within the chunks in flight) bound the working set the same way. Here, with no index
built or stored:

- the stream's samples are cut into blocks of ``block`` consecutive samples (``n // block`` full blocks, then a tail
  of ``n % block``);
- the full blocks are put in an order by a Feistel permutation keyed by ``keys`` and grouped, in that order, into
  windows of ``blocks`` blocks;
- the places of each window are mapped onto the samples of its blocks by a Feistel permutation of the window's own
  key; the tail, shuffled alone, comes last.

So place ``p`` needs only its window: O(1) time and memory, like `FeistelPermutation`, and the window's samples lie
in ``blocks`` contiguous ranges of ``block`` samples (a file or two each when a block is no longer than a file).
"""

from __future__ import annotations

import bisect

import numpy as np

from tokenmill.loader.permutation import FeistelPermutation, round_keys


class BlockShuffle:
    """``perm(positions)``: positions in [0, n) to a permutation of [0, n) that shuffles within windows of
    ``blocks`` blocks of ``block`` consecutive samples; ``key`` (a tuple) names the permutation."""

    def __init__(self, n: int, block: int, blocks: int, key: tuple):
        if block < 1 or blocks < 1:
            raise ValueError(f"block and blocks must be positive, got {block} and {blocks}")
        self.n, self.block, self.blocks, self.key = int(n), int(block), int(blocks), tuple(key)
        self.full = self.n // self.block  # full blocks; the tail (n % block samples) follows them
        self.window = self.block * self.blocks
        self._order = FeistelPermutation(self.full, round_keys(*self.key, "blocks"))
        self._tail = FeistelPermutation(self.n - self.full * self.block, round_keys(*self.key, "tail"))
        self._windows: dict[int, FeistelPermutation] = {}

    def _inner(self, w: int) -> FeistelPermutation:
        perm = self._windows.get(w)
        if perm is None:
            size = min(self.blocks, self.full - w * self.blocks) * self.block
            perm = FeistelPermutation(size, round_keys(*self.key, "window", w))
            if len(self._windows) > 256:
                self._windows.clear()
            self._windows[w] = perm
        return perm

    def _one(self, p: int) -> int:
        edge = self.full * self.block
        if p >= edge:
            return edge + self._tail._one(p - edge) if self._tail.n > 1 else p
        w, o = divmod(p, self.window)
        inner = self._inner(w)
        slot, within = divmod(inner._one(o) if inner.n > 1 else o, self.block)
        b = w * self.blocks + slot
        return (self._order._one(b) if self.full > 1 else b) * self.block + within

    def __call__(self, positions) -> np.ndarray:
        x = np.asarray(positions, dtype=np.int64)
        if x.size and (int(x.min()) < 0 or int(x.max()) >= self.n):
            raise IndexError(f"positions must lie in [0, {self.n})")
        flat = x.ravel()
        out = np.empty_like(flat)
        edge = self.full * self.block
        tail = flat >= edge
        if tail.any():
            out[tail] = edge + self._tail(flat[tail] - edge)
        head = ~tail
        if head.any():
            p = flat[head]
            w, o = np.divmod(p, self.window)
            inner = np.empty_like(o)
            for win in np.unique(w):
                sel = w == win
                inner[sel] = self._inner(int(win))(o[sel])
            slot, within = np.divmod(inner, self.block)
            out[head] = self._order(w * self.blocks + slot) * self.block + within
        return out.reshape(x.shape)


class FileBlockShuffle:
    """The same shuffle over blocks of unequal sizes given by their edges: block ``b`` is samples
    ``[edges[b], edges[b + 1])``. With a block per token file (the samples that start in it), a window of ``blocks``
    blocks reads those files and, for the one sample that runs on into the next file, that file's recorded head:
    a streaming loader fetches each file about once per epoch (`TokenStream.parts`), as MosaicML Streaming and litdata
    do with their shards and chunks. O(blocks) memory (two arrays), O(log blocks) per place."""

    def __init__(self, edges, blocks: int, key: tuple):
        edges = np.unique(np.asarray(edges, dtype=np.int64))  # empty blocks (a file shorter than a sample) dropped
        if blocks < 1 or len(edges) < 1 or edges[0] != 0:
            raise ValueError(f"blocks must be positive and edges start at 0, got {blocks} and {edges[:3]}")
        self.n, self.blocks, self.key = int(edges[-1]), int(blocks), tuple(key)
        self.edges = edges
        count = len(edges) - 1
        self._order = FeistelPermutation(count, round_keys(*self.key, "file-blocks"))(np.arange(count))
        sizes = np.diff(edges)[self._order]
        self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)  # places of the ordered blocks
        self._starts = self._offsets[::self.blocks]  # each window's first place (and the end, when it divides)
        if self._starts[-1] != self.n:
            self._starts = np.append(self._starts, self.n)
        # The same as Python lists, for `_one`'s bisect: a micro-batch's handful of places costs no numpy calls.
        self._lists = (self._starts.tolist(), self._offsets.tolist(), self._order.tolist(), self.edges.tolist())
        self._windows: dict[int, FeistelPermutation] = {}

    def _inner(self, w: int) -> FeistelPermutation:
        perm = self._windows.get(w)
        if perm is None:
            perm = FeistelPermutation(int(self._starts[w + 1] - self._starts[w]),
                                      round_keys(*self.key, "file-window", w))
            if len(self._windows) > 256:
                self._windows.clear()
            self._windows[w] = perm
        return perm

    def _one(self, p: int) -> int:
        """One place in Python integers (bisect on lists)."""
        starts, offsets, order, edges = self._lists
        w = bisect.bisect_right(starts, p) - 1
        perm, o = self._inner(w), p - starts[w]
        place = starts[w] + (perm._one(o) if perm.n > 1 else o)
        slot = bisect.bisect_right(offsets, place) - 1
        return edges[order[slot]] + place - offsets[slot]

    def __call__(self, positions) -> np.ndarray:
        x = np.asarray(positions, dtype=np.int64)
        if x.size and (int(x.min()) < 0 or int(x.max()) >= self.n):
            raise IndexError(f"positions must lie in [0, {self.n})")
        flat = x.ravel()
        w = np.searchsorted(self._starts, flat, side="right") - 1
        inner = np.empty_like(flat)
        for win in np.unique(w):
            sel = w == win
            perm = self._inner(int(win))
            o = flat[sel] - self._starts[win]
            inner[sel] = perm(o) if perm.n > 1 else o
        place = self._starts[w] + inner
        slot = np.searchsorted(self._offsets, place, side="right") - 1
        return (self.edges[self._order[slot]] + place - self._offsets[slot]).reshape(x.shape)
