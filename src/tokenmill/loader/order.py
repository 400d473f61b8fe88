"""The global sample order: position k of the global sequence -> (stream, sample), from the seed alone.

Position k goes to a stream by the mixture schedule, as that stream's j-th sample; j falls in the stream's epoch
``j // N`` at place ``j % N``, and a Feistel permutation keyed by (seed, the stream's data fingerprint, seq_len,
epoch) turns the place into a sample. Nothing depends on world size or workers, nothing is built or cached, and
a stream that runs out simply starts its next epoch with a new key. With ``block`` set, the permutation is a
`BlockShuffle` (consecutive places stay within a window of ``blocks`` blocks of ``block`` consecutive samples), or
with ``block="file"`` a `FileBlockShuffle` (a block per token file), the order a bounded cache of a streaming loader
can follow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tokenmill.loader.blockshuffle import BlockShuffle, FileBlockShuffle
from tokenmill.loader.mixture import MixtureSchedule
from tokenmill.loader.permutation import FeistelPermutation, round_keys
from tokenmill.loader.streams import TokenStream


@dataclass
class Located:
    """Where global positions land: stream number, sample within the stream, and that stream's epoch."""

    stream: np.ndarray
    sample: np.ndarray
    epoch: np.ndarray


class GlobalOrder:
    def __init__(self, streams: list[TokenStream], seq_len: int, seed: int, schedule: MixtureSchedule,
                 shuffle: bool = True, block: int | str | None = None, blocks: int = 8):
        self.streams = streams
        self.seq_len = seq_len
        self.seed = seed
        self.schedule = schedule
        self.shuffle = shuffle
        self.block, self.blocks = block, blocks
        self.samples = [s.samples(seq_len) for s in streams]
        self._perms: dict[tuple[int, int], FeistelPermutation] = {}

    def permutation(self, stream: int, epoch: int) -> FeistelPermutation | BlockShuffle | FileBlockShuffle:
        key = (stream, epoch)
        perm = self._perms.get(key)
        if perm is None:
            s = self.streams[stream]
            if self.block == "file":
                # Block f: the samples whose first token lies in file f (sample i starts at token i * seq_len).
                n = self.samples[stream]
                starts = s._starts[:-1]
                edges = np.minimum(-(-starts // self.seq_len), n)
                perm = FileBlockShuffle(np.append(edges, n), self.blocks,
                                        ("tokenmill-loader-file-blocks", self.seed, s.fingerprint, self.seq_len, epoch))
            elif self.block is not None:
                perm = BlockShuffle(self.samples[stream], self.block, self.blocks,
                                    ("tokenmill-loader-blocks", self.seed, s.fingerprint, self.seq_len, epoch))
            else:
                perm = FeistelPermutation(self.samples[stream],
                                          round_keys("tokenmill-loader", self.seed, s.fingerprint, self.seq_len, epoch))
            if len(self._perms) > 64:
                self._perms.clear()
            self._perms[key] = perm
        return perm

    def locate(self, positions) -> Located:
        stream, j = self.schedule.locate(positions)
        if len(j) <= 64:
            # A micro-batch: plain Python beats numpy's per-call overhead on a handful of positions.
            epoch = [0] * len(j)
            sample = [0] * len(j)
            for i, (s, jj) in enumerate(zip(stream.tolist(), j.tolist())):
                e, p = divmod(jj, self.samples[s])
                epoch[i] = e
                sample[i] = self.permutation(s, e)._one(p) if self.shuffle and self.samples[s] > 1 else p
            return Located(stream, np.array(sample, dtype=np.int64), np.array(epoch, dtype=np.int64))
        sample = np.empty_like(j)
        epoch = np.empty_like(j)
        for s in np.unique(stream):
            mask = stream == s
            n = self.samples[int(s)]
            e, p = np.divmod(j[mask], n)
            epoch[mask] = e
            if not self.shuffle:
                sample[mask] = p
                continue
            out = np.empty_like(p)
            for ep in np.unique(e):
                sel = e == ep
                out[sel] = self.permutation(int(s), int(ep))(p[sel])
            sample[mask] = out
        return Located(stream, sample, epoch)
