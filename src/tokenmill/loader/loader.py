"""TokenLoader: a deterministic, resumable, elastic PyTorch loader over tokenmill's token files.

The state is a handful of integers (consumed global samples, seed, sizes, skipped batches) and fingerprints of the
data and weights; every batch is computed from them directly, so resume is O(1) without replay, and with another
world size or worker count the same global sequence continues. Only numpy and torch are needed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from tokenmill.errors import TokenmillError
from tokenmill.loader.batches import BatchLayout, merge_ranges, parse_ranges
from tokenmill.loader.mixture import MixtureSchedule
from tokenmill.loader.order import GlobalOrder
from tokenmill.loader.streams import load_streams
from tokenmill.loader.verify import Check, FileVerifier, cache_dir
from tokenmill.loader.weights import resolve_weights

log = logging.getLogger(__name__)

STATE_VERSION = 1
CHUNK_TOKENS = 1 << 20  # per worker hand-over, and at most this many micro-batches:
CHUNK_MICRO_BATCHES = 64


class ResumeError(TokenmillError, ValueError):
    """A loader state that this loader cannot continue exactly; the message names what differs."""


@dataclass
class _Plan:
    """Everything a worker needs to build any micro-batch: picklable, and pure in (batch, micro-batch)."""

    order: GlobalOrder
    layout: BatchLayout
    position_ids: bool
    transfer_dtype: torch.dtype = torch.int64

    def micro_batch(self, k: int, m: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Micro-batch m of global batch k on this rank: its ``seq_len + 1`` tokens per sample, and positions."""
        tokens, positions = self.samples(self.layout.first_position(k, m), self.layout.micro_batch_size,
                                         self.position_ids)
        # One tensor, not two: a worker hands each tensor over through its own shared-memory segment.
        return torch.from_numpy(tokens), None if positions is None else torch.from_numpy(positions)

    def samples(self, first: int, count: int, position_ids: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """Global positions ``[first, first + count)``: tokens (count, seq_len + 1), and positions when asked for."""
        seq_len = self.order.seq_len
        where = self.order.locate(np.arange(first, first + count, dtype=np.int64))
        tokens = np.empty((count, seq_len + 1), dtype=np.int64)
        positions = np.empty((count, seq_len), dtype=np.int64) if position_ids else None
        for row, (s, sample) in enumerate(zip(where.stream.tolist(), where.sample.tolist())):
            stream = self.order.streams[s]
            start = sample * seq_len
            stream.read(start, seq_len + 1, out=tokens[row])
            if positions is not None:
                # Positions restart at each document's first token (Megatron's reset_position_ids).
                starts = np.zeros(seq_len, dtype=np.int64)
                rel = stream.boundaries(start, start + seq_len) - start
                starts[rel] = rel
                positions[row] = np.arange(seq_len) - np.maximum.accumulate(starts)
        return tokens, positions


def as_batch(tokens: torch.Tensor, positions: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The yielded dict: inputs and labels (shifted by one), contiguous, and the positions when asked for."""
    batch = {"input_ids": tokens[:, :-1].contiguous(), "labels": tokens[:, 1:].contiguous()}
    if positions is not None:
        batch["position_ids"] = positions
    return batch


class _WorkerStream(torch.utils.data.IterableDataset):
    """Chunks of consecutive micro-batches; chunk c goes to worker c mod W, so the DataLoader's round-robin keeps
    the order. A chunk is ~1M tokens in the file's dtype: one shared-memory hand-over per chunk, not per
    micro-batch (each costs about a millisecond, more than building a micro-batch)."""

    def __init__(self, plan: _Plan, k: int, m: int, skips: list[tuple[int, int]], chunk: int):
        self.plan, self.k, self.m, self.skips, self.chunk = plan, k, m, skips, chunk

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        sequence = self.plan.layout.sequence(self.k, self.m, self.skips)
        for c in itertools.count():
            ids = list(itertools.islice(sequence, self.chunk))
            if c % workers != worker:
                continue
            built = [self.plan.micro_batch(k, m) for k, m in ids]
            tokens = torch.stack([t for t, _ in built]).to(self.plan.transfer_dtype)
            positions = torch.stack([p for _, p in built]) if built[0][1] is not None else None
            yield ids, tokens, positions


class TokenLoader:
    """Micro-batches ``{"input_ids", "labels"[, "position_ids"]}`` (LongTensor[micro_batch_size, seq_len]) forever.

    Args:
        paths: `tokens.json` files (or the folders holding them, or run folders); their streams are mixed by
            ``weights``.
        seq_len: tokens per sample; each sample reads ``seq_len + 1`` tokens (labels are inputs shifted by one).
        global_batch_size: samples per optimizer step, over all ranks.
        micro_batch_size: samples per yielded batch on this rank (default ``global_batch_size // world_size``);
            ``global_batch_size / (world_size * micro_batch_size)`` is the gradient-accumulation count.
        seed: fixes the order, with the data, seq_len and the epoch; world size and workers never change it.
        rank, world_size: this process's slice of every global batch.
        num_workers: DataLoader worker processes building micro-batches ahead (0: in this process).
        weights: None (each stream in proportion to its samples), ``{stream: weight}`` (stream names are the source
            names, ``"<i>/<source>"`` with several datasets, or a source name for all its streams), or one weight
            per path. A weight of 0 leaves a stream out, and so does leaving it out of the mapping: name only the
            streams to serve. A name that matches no stream is a ValueError naming it.
        split: the tokenize split to read (``train`` or ``valid``).
        shuffle: False serves each stream in order (samples 0, 1, 2, ...).
        position_ids: also yield position ids that restart at every document start.
        pin_memory: pin batches (for a CUDA host), passed to the DataLoader.
        verify: check every token file against the sha256 that `tokens.json` records, in a background thread that
            starts here; a batch is handed out only once the files it reads are verified, and a mismatch is a
            DataError naming the file (``tokenmill.loader.verify``). Verified files are remembered per node.
    """

    def __init__(self, paths: Sequence[str], seq_len: int, global_batch_size: int, micro_batch_size: int | None = None,
                 seed: int = 0, rank: int = 0, world_size: int = 1, num_workers: int = 0,
                 weights: dict[str, float] | Sequence[float] | None = None, split: str = "train",
                 shuffle: bool = True, position_ids: bool = False, pin_memory: bool = False,
                 prefetch_factor: int = 2, verify: bool = True):
        if isinstance(paths, (str, bytes)) or not hasattr(paths, "__iter__"):
            paths = [paths]
        if seq_len <= 0:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.paths = [str(p) for p in paths]
        self.seq_len, self.seed, self.split = int(seq_len), int(seed), split
        self.num_workers, self.pin_memory, self.prefetch_factor = num_workers, pin_memory, prefetch_factor
        if micro_batch_size is None:
            micro_batch_size = global_batch_size // world_size if world_size > 0 else 0
        self.layout = BatchLayout(global_batch_size, micro_batch_size, rank, world_size)
        self.streams, self.info = load_streams(self.paths, split)
        self.weights = resolve_weights(self.streams, self.seq_len, weights, len(self.paths))
        schedule = MixtureSchedule.build([self.weights[s.name] for s in self.streams])
        self.order = GlobalOrder(self.streams, self.seq_len, self.seed, schedule, shuffle)
        # Workers hand tokens over in the smallest signed dtype that holds the vocabulary.
        transfer = torch.int16 if (self.info.get("vocab_size") or 1 << 40) <= 32768 else torch.int32
        self._plan = _Plan(self.order, self.layout, position_ids, transfer)
        self.verifier = self._verifier() if verify else None
        self.consumed_samples = 0
        self.skips: list[tuple[int, int]] = []
        self.last_batch: int | None = None
        self._generation = 0

    # -- verification --------------------------------------------------------------------------------------------

    def _verifier(self) -> FileVerifier:
        """A background check of every file of a stream that is served (weight above 0): one group per token file,
        its ``.bin`` and ``.idx`` together."""
        groups, self._group_base, unrecorded = [], [], []
        for stream in self.streams:
            self._group_base.append(len(groups))
            served = self.weights[stream.name] > 0
            for f in stream.files:
                checks = [Check(Path(f"{f.prefix}{ext}"), sha) for ext, sha in ((".bin", f.sha256),
                                                                                  (".idx", f.idx_sha256)) if sha]
                if served and not f.sha256:
                    unrecorded.append(f"{f.prefix}.bin")
                groups.append(checks if served else [])
        if unrecorded:
            log.warning("%d token files have no sha256 in their tokens.json and are not verified (first: %s); "
                        "rerun the tokenize stage to record them", len(unrecorded), unrecorded[0])
        # Each rank starts at another file: with the node's markers and locks, the ranks of a node hash in parallel.
        first = len(groups) * self.layout.rank // max(1, self.layout.world_size)
        return FileVerifier(groups, cache_dir(), first).start()

    def close(self) -> None:
        """Stop background verification (call before the process exits; a new iterator does not restart it)."""
        if self.verifier is not None:
            self.verifier.stop()

    def _verify(self, first: int, count: int) -> None:
        """Block until every file that global positions ``[first, first + count)`` read is verified."""
        verifier = self.verifier
        if verifier is None or verifier.done:
            return
        where = self.order.locate(np.arange(first, first + count, dtype=np.int64))
        needed = set()
        for s, sample in zip(where.stream.tolist(), where.sample.tolist()):
            stream, start = self.streams[s], sample * self.seq_len
            lo, hi = np.searchsorted(stream._starts, [start, start + self.seq_len], side="right") - 1
            needed.update(range(self._group_base[s] + int(lo), self._group_base[s] + int(hi) + 1))
        verifier.require(needed)

    # -- identity ------------------------------------------------------------------------------------------------

    @property
    def global_batch_size(self) -> int:
        return self.layout.global_batch_size

    @property
    def micro_batch_size(self) -> int:
        return self.layout.micro_batch_size

    def data_fingerprints(self) -> dict[str, str]:
        return {s.name: s.fingerprint for s in self.streams}

    def slots(self) -> dict[str, int]:
        return {s.name: n for s, n in zip(self.streams, self.order.schedule.slots)}

    @staticmethod
    def _digest(obj: Any) -> str:
        return hashlib.sha256(json.dumps(obj, sort_keys=True).encode("utf-8")).hexdigest()[:16]

    def epochs(self) -> dict[str, int]:
        """The epoch each stream's next sample falls in."""
        counts = self.order.schedule.counts(self.consumed_samples)
        return {s.name: (c // n if n else 0) for s, c, n in zip(self.streams, counts, self.order.samples)}

    # -- state ---------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The exact position, and what it is a position in: small, JSON-serialisable, the same on every rank."""
        return {
            "version": STATE_VERSION,
            "consumed_samples": self.consumed_samples,
            "seed": self.seed,
            "seq_len": self.seq_len,
            "split": self.split,
            "shuffle": self.order.shuffle,
            "global_batch_size": self.layout.global_batch_size,
            "micro_batch_size": self.layout.micro_batch_size,
            "world_size": self.layout.world_size,
            "skip": [list(r) for r in self.skips],
            "epochs": self.epochs(),
            "data": {"fingerprint": self._digest(self.data_fingerprints()), "streams": self.data_fingerprints()},
            "weights": {"fingerprint": self._digest(self.slots()), "period": self.order.schedule.period,
                        "slots": self.slots()},
            "datasets": self.paths,
        }

    def check_state_dict(self, state: dict[str, Any], allow: Sequence[str] = ()) -> None:
        """Raise ResumeError naming what differs if ``load_state_dict(state, allow)`` would; change nothing. A
        trainer calls it before reading any tensor of a checkpoint."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ResumeError(f"not a TokenLoader state of version {STATE_VERSION}: "
                              f"{state.get('version') if isinstance(state, dict) else type(state).__name__}")
        problems = []
        for key, mine in (("seq_len", self.seq_len), ("seed", self.seed), ("split", self.split),
                          ("shuffle", self.order.shuffle)):
            if state.get(key) != mine:
                problems.append(f"{key} {state.get(key)!r} -> {mine!r}")
        changed = self.data_changes(state)
        if changed and "data" not in allow:
            problems.append("data changed (" + "; ".join(changed) + "); pass allow=('data',) to continue anyway")
        if state["weights"]["fingerprint"] != self._digest(self.slots()) and "weights" not in allow:
            old, new = state["weights"]["slots"], self.slots()
            period_old, period_new = state["weights"]["period"], self.order.schedule.period
            changed = [f"{n}: {old.get(n, 0) / period_old:.4f} -> {new.get(n, 0) / period_new:.4f}"
                       for n in sorted(set(old) | set(new)) if old.get(n, 0) / period_old != new.get(n, 0) / period_new]
            problems.append("weights changed (" + "; ".join(changed) + "); pass allow=('weights',) to continue anyway")
        consumed, skips = int(state["consumed_samples"]), merge_ranges(tuple(r) for r in state.get("skip", []))
        g_old = state["global_batch_size"]
        if g_old != self.layout.global_batch_size:
            if consumed % self.layout.global_batch_size or skips:
                problems.append(f"global_batch_size {g_old} -> {self.layout.global_batch_size}: only possible at a "
                                "batch boundary of both sizes and without skipped batches")
        same_steps = (state["micro_batch_size"] * state["world_size"] == self.layout.step_samples)
        if consumed % g_old and not same_steps:
            done = (consumed % g_old) // (state["micro_batch_size"] * state["world_size"])
            problems.append(f"the state stops inside global batch {consumed // g_old} (after {done} micro-batch steps "
                            f"of world_size {state['world_size']} x micro_batch_size {state['micro_batch_size']}); "
                            "resume with that world size and micro-batch size, or save at a global-batch boundary")
        if problems:
            raise ResumeError("cannot resume this loader: " + "; ".join(problems))

    def data_changes(self, state: dict[str, Any]) -> list[str]:
        """Each stream added, removed or changed since ``state`` (``"alpha: files changed"``); empty when the data
        are the same. Data are known by content (file names, token counts, sha256), not by where they are."""
        if state["data"]["fingerprint"] == self._digest(self.data_fingerprints()):
            return []
        old, new = state["data"]["streams"], self.data_fingerprints()
        return [f"{n}: {'added' if n not in old else 'removed' if n not in new else 'files changed'}"
                for n in sorted(set(old) | set(new)) if old.get(n) != new.get(n)]

    def load_state_dict(self, state: dict[str, Any], allow: Sequence[str] = ()) -> None:
        """Continue exactly where ``state`` stopped, or raise ResumeError naming what differs.

        ``allow`` may hold ``"data"`` and/or ``"weights"``: then changed data or weights are accepted and the run
        continues at the same global position of the *new* order (no sample is replayed or skipped on purpose, but
        which samples follow is not what the old data would have given).
        """
        self.check_state_dict(state, allow)
        consumed, skips = int(state["consumed_samples"]), merge_ranges(tuple(r) for r in state.get("skip", []))
        if state["world_size"] != self.layout.world_size or state["micro_batch_size"] != self.micro_batch_size:
            log.info("elastic resume: world_size %d -> %d, micro_batch_size %d -> %d at sample %d",
                     state["world_size"], self.layout.world_size, state["micro_batch_size"], self.micro_batch_size,
                     consumed)
        self.consumed_samples, self.skips = consumed, skips
        self._generation += 1

    def skip(self, ranges) -> None:
        """Never serve these global batches (inclusive index ranges: ``[(a, b)]``, ``"a-b,c"``); kept in the state."""
        self.skips = merge_ranges(self.skips + parse_ranges(ranges))
        self._generation += 1

    # -- iteration -----------------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        return _Iterator(self, self._generation)

    def micro_batch(self, k: int, m: int) -> dict[str, torch.Tensor]:
        """Micro-batch m of global batch k for this rank, computed directly (no state involved)."""
        self._verify(self.layout.first_position(k, m), self.micro_batch_size)
        return as_batch(*self._plan.micro_batch(k, m))

    def global_batch(self, k: int) -> torch.Tensor:
        """All samples of global batch k, every rank's (LongTensor[global_batch_size, seq_len + 1])."""
        self._verify(k * self.global_batch_size, self.global_batch_size)
        tokens, _ = self._plan.samples(k * self.global_batch_size, self.global_batch_size)
        return torch.from_numpy(tokens)

    def describe(self) -> dict[str, Any]:
        """Streams, their samples and mixture fractions: what a run log should record."""
        return {s.name: {"tokens": s.tokens, "samples": n, "files": len(s.files), "weight": f}
                for s, n, f in zip(self.streams, self.order.samples, self.order.schedule.fractions())}


class _Iterator:
    """Reads the loader's state at its first ``next()``, and refuses to go on once the state was replaced."""

    def __init__(self, loader: TokenLoader, generation: int):
        self.loader, self.generation = loader, generation
        self._source = None
        self._expected = None

    def __iter__(self):
        return self

    def _start(self):
        loader = self.loader
        k, m = loader.layout.resume_point(loader.consumed_samples)
        self._expected = loader.layout.sequence(k, m, loader.skips)
        if loader.num_workers == 0:
            self._source = ((k2, m2, *loader._plan.micro_batch(k2, m2)) for k2, m2 in
                            loader.layout.sequence(k, m, loader.skips))
        else:
            chunk = min(CHUNK_MICRO_BATCHES,
                        max(1, CHUNK_TOKENS // (loader.micro_batch_size * (loader.seq_len + 1))))
            chunks = iter(torch.utils.data.DataLoader(
                _WorkerStream(loader._plan, k, m, list(loader.skips), chunk), batch_size=None,
                num_workers=loader.num_workers, pin_memory=loader.pin_memory,
                prefetch_factor=loader.prefetch_factor))
            self._source = ((k2, m2, tokens[i].long(), None if positions is None else positions[i])
                            for ids, tokens, positions in chunks for i, (k2, m2) in enumerate(ids))

    def __next__(self) -> dict[str, torch.Tensor]:
        loader = self.loader
        if self._source is None:
            # The state is read now, not at iter(): loading a state between the two is honoured.
            loader._generation += 1
            self.generation = loader._generation
            self._start()
        elif self.generation != loader._generation:
            raise RuntimeError("the loader's state changed (load_state_dict, skip, or another iterator started) after "
                               "this iterator began; call iter(loader) again to continue from the new state")
        k, m, tokens, positions = next(self._source)
        want = next(self._expected)
        if (k, m) != want:
            raise RuntimeError(f"loader worker returned batch {k}/{m}, expected {want[0]}/{want[1]}")
        # Built ahead (maybe by a worker) from files not yet verified: handed out only once they are.
        loader._verify(loader.layout.first_position(k, m), loader.micro_batch_size)
        # Counted here, in the main process, as the batch is handed out: prefetching never advances the state.
        loader.consumed_samples = loader.layout.consumed_after(k, m)
        loader.last_batch = k
        return as_batch(tokens, positions)
