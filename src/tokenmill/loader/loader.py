"""TokenLoader: a deterministic, resumable, elastic PyTorch loader over tokenmill's token files.

The state is a handful of integers (consumed global samples, seed, sizes, skipped batches) and fingerprints of the
data and weights; every batch is computed from them directly, so resume is O(1) without replay, and with another
world size or worker count the same global sequence continues. Only numpy and torch are needed; a `tokens.json`
given as a URI (``s3://``, ``gs://``, ``file://``) also imports pyarrow, to fetch its token files into a bounded
node-local cache (``remote``, ``cache``, ``prefetch``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from tokenmill.errors import ConfigError
from tokenmill.loader.batches import BatchLayout, merge_ranges, parse_ranges
from tokenmill.loader.mixture import MixtureSchedule
from tokenmill.loader.order import GlobalOrder, Located
from tokenmill.loader.state import STATE_VERSION, ResumeError, check_state_shape
from tokenmill.loader.streams import DataError, load_streams
from tokenmill.loader.verify import Check, FileVerifier, require_recorded, unhashed
from tokenmill.markers import markers_dir
from tokenmill.loader.weights import resolve_weights

log = logging.getLogger(__name__)

TOKEN_CACHE_ENV = "TOKENMILL_TOKEN_CACHE"
CHUNK_TOKENS = 1 << 20  # per worker hand-over, and at most this many micro-batches:
CHUNK_MICRO_BATCHES = 64


FETCH_RATIO_WARN = 1.5
"""Bytes fetched per byte of samples used above which a streaming loader warns (once): a block shuffle the cache
holds fetches each file about once an epoch (1.10 measured with two workers), a cache too small for the order
hundreds of times."""


def default_cache_dir() -> Path:
    """``$TOKENMILL_TOKEN_CACHE``, else ``$XDG_CACHE_HOME/tokenmill/tokens``, else ``~/.cache/tokenmill/tokens``."""
    if os.environ.get(TOKEN_CACHE_ENV):
        return Path(os.environ[TOKEN_CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tokenmill" / "tokens"


@dataclass
class _Plan:
    """Everything a worker needs to build any micro-batch: picklable, and pure in (batch, micro-batch)."""

    order: GlobalOrder
    layout: BatchLayout
    position_ids: bool
    transfer_dtype: torch.dtype = torch.int64
    fetcher: Any = None
    """Remote streams only: their files in the node's cache (``prefetch.TokenFetcher``)."""

    def micro_batch(self, k: int, m: int, walked: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Micro-batch m of global batch k on this rank: its ``seq_len + 1`` tokens per sample, and positions.
        ``walked``: built in the order the prefetch walk follows (the iterators), not picked out of it."""
        where = None
        if self.fetcher is not None and walked:
            # The walk ahead located this micro-batch already (64 at a time): reused, not recomputed.
            where = self.fetcher.advance(k, m)
        tokens, positions = self.samples(self.layout.first_position(k, m), self.layout.micro_batch_size,
                                         self.position_ids, where)
        # One tensor, not two: a worker hands each tensor over through its own shared-memory segment.
        return torch.from_numpy(tokens), None if positions is None else torch.from_numpy(positions)

    def samples(self, first: int, count: int, position_ids: bool = False,
                where: Located | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """Global positions ``[first, first + count)``: tokens (count, seq_len + 1), and positions when asked for
        (``where``: those positions located already)."""
        seq_len = self.order.seq_len
        if where is None:
            where = self.order.locate(np.arange(first, first + count, dtype=np.int64))
        tokens = np.empty((count, seq_len + 1), dtype=np.int64)
        positions = np.empty((count, seq_len), dtype=np.int64) if position_ids else None
        for row, (s, sample) in enumerate(zip(where.stream.tolist(), where.sample.tolist())):
            stream = self.order.streams[s]
            start = sample * seq_len
            if stream.fetcher is not None:
                # A remote stream: this sample's files pinned while it is read (one sample at a time, so a process
                # needs room for one sample's files, not a micro-batch's); the others kept open within a budget.
                stream.fetcher.hold([(stream, *part) for part in stream.parts(start, start + seq_len + 1)])
            stream.read(start, seq_len + 1, out=tokens[row])
            if positions is not None:
                # Positions restart at each document's first token (Megatron's reset_position_ids).
                starts = np.zeros(seq_len, dtype=np.int64)
                rel = stream.boundaries(start, start + seq_len) - start
                starts[rel] = rel
                positions[row] = np.arange(seq_len) - np.maximum.accumulate(starts)
        return tokens, positions

    def files_read(self, where) -> list[tuple]:
        """(stream, file) or (stream, file, HEAD) of every file or head the located samples of remote streams
        read, each once, in order of first use."""
        seen: dict[tuple, None] = {}
        seq_len = self.order.seq_len
        for s, sample in zip(where.stream.tolist(), where.sample.tolist()):
            stream = self.order.streams[s]
            if stream.fetcher is None:
                continue
            start = sample * seq_len
            for part in stream.parts(start, start + seq_len + 1):
                seen[(s, *part)] = None
        return list(seen)

    def upcoming(self, ids) -> Iterator[tuple[tuple[int, int], list[tuple[str, int]], Located]]:
        """For prefetching: each (batch, micro-batch) of ``ids`` with the (stream name, file) it reads, and where
        its samples are."""
        ids, mb = iter(ids), self.layout.micro_batch_size
        while True:
            # 64 micro-batches located at once (numpy's path): the walk costs a fraction of the building.
            group = list(itertools.islice(ids, 64))
            if not group:
                return
            firsts = np.array([self.layout.first_position(k, m) for k, m in group], dtype=np.int64)
            where = self.order.locate((firsts[:, None] + np.arange(mb, dtype=np.int64)).ravel())
            for j, ident in enumerate(group):
                part = slice(j * mb, (j + 1) * mb)
                rows = Located(where.stream[part], where.sample[part], where.epoch[part])
                yield ident, [(self.order.streams[s].name, *part) for s, *part in self.files_read(rows)], rows


def _own_chunks(sequence, chunk: int, worker: int, workers: int) -> Iterator[list[tuple[int, int]]]:
    """The chunks of (batch, micro-batch) ids that worker ``worker`` of ``workers`` builds, in order: chunk c of
    ``chunk`` consecutive ids goes to worker c mod ``workers``."""
    for c in itertools.count():
        ids = list(itertools.islice(sequence, chunk))
        if c % workers == worker:
            yield ids


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
        fetcher = self.plan.fetcher
        if fetcher is not None:
            # This worker's own micro-batches, walked ahead on a second copy of the (deterministic) sequence.
            fetcher.start(self.plan.upcoming(itertools.chain.from_iterable(_own_chunks(
                self.plan.layout.sequence(self.k, self.m, self.skips), self.chunk, worker, workers))))
        for ids in _own_chunks(sequence, self.chunk, worker, workers):
            built = [self.plan.micro_batch(k, m) for k, m in ids]
            tokens = torch.stack([t for t, _ in built]).to(self.plan.transfer_dtype)
            positions = torch.stack([p for _, p in built]) if built[0][1] is not None else None
            # The worker's fetch counters ride along, so the main process can report the node's fetches.
            stats = (os.getpid(), dict(fetcher.cache.stats)) if fetcher is not None else None
            yield ids, tokens, positions, stats


class TokenLoader(torch.utils.data.IterableDataset):
    """Micro-batches ``{"input_ids", "labels"[, "position_ids"]}`` (LongTensor[micro_batch_size, seq_len]) forever.

    A PyTorch ``IterableDataset``: iterate it directly, or give it to ``DataLoader(loader, batch_size=None)`` (the
    batches are already made; ``num_workers`` of that DataLoader 0: this loader has its own workers, and its state
    is kept in this process, which a DataLoader worker's copy would not advance). Its state is JSON
    (``state_dict``/``load_state_dict``); ``tokenmill.loader.LoaderState`` carries it in a DCP checkpoint.

    Args:
        paths: `tokens.json` files (or the folders holding them, or run folders); their streams are mixed by
            ``weights``.
        seq_len: tokens per sample; each sample reads ``seq_len + 1`` tokens (labels are inputs shifted by one).
        global_batch_size: samples per optimizer step, over all ranks.
        micro_batch_size: samples per yielded batch on this rank (default ``global_batch_size // world_size``);
            ``global_batch_size / (world_size * micro_batch_size)`` is the gradient-accumulation count.
        seed: fixes the order, with the data, seq_len and the epoch; world size and workers never change it.
        rank, world_size: this process's slice of every global batch.
        weights: None (each stream in proportion to its samples), ``{stream: weight}`` (stream names are the source
            names, ``"<i>/<source>"`` with several datasets, or a source name for all its streams), or one weight
            per path. A weight of 0 leaves a stream out, and so does leaving it out of the mapping: name only the
            streams to serve. A name that matches no stream is a ValueError naming it.
        split: the tokenize split to read (``train`` or ``valid``).
        num_workers, shuffle, shuffle_block, shuffle_window, position_ids, prefetch_factor, verify, allow_unhashed,
            cache_dir, cache_bytes, fetch_timeout, prefetch_threads, prefetch_bytes, worker_timeout: the options,
            documented as the fields of `tokenmill.loader.options.LoaderOptions` (a train config's `loader:` block),
            with these defaults.
        pin_memory: pin batches (for a CUDA host), passed to the DataLoader.
    """

    def __init__(self, paths: Sequence[str], seq_len: int, global_batch_size: int, micro_batch_size: int | None = None,
                 seed: int = 0, rank: int = 0, world_size: int = 1, num_workers: int = 0,
                 weights: dict[str, float] | Sequence[float] | None = None, split: str = "train",
                 shuffle: bool = True, shuffle_block: int | str | None = None, shuffle_window: int = 8,
                 position_ids: bool = False, pin_memory: bool = False,
                 prefetch_factor: int = 2, verify: bool = True, cache_dir: str | Path | None = None,
                 cache_bytes: int | None = None, fetch_timeout: float = 120.0, prefetch_threads: int = 4,
                 prefetch_bytes: int | None = None, allow_unhashed: bool = False, worker_timeout: float = 0.0):
        if isinstance(paths, (str, bytes)) or not hasattr(paths, "__iter__"):
            paths = [paths]
        if seq_len <= 0:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        for key, value in (("shuffle_block", shuffle_block), ("shuffle_window", shuffle_window)):
            if key == "shuffle_block" and value == "file":
                continue
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{key} must be a positive integer" + (' or "file"' if key == "shuffle_block"
                                                                          else "") + f", got {value!r}")
        self.paths = [str(p) for p in paths]
        self.seq_len, self.seed, self.split = int(seq_len), int(seed), split
        self.num_workers, self.pin_memory, self.prefetch_factor = num_workers, pin_memory, prefetch_factor
        if not worker_timeout >= 0:
            raise ConfigError(f"worker_timeout must be >= 0, got {worker_timeout}")
        self.worker_timeout = float(worker_timeout)
        if micro_batch_size is None:
            micro_batch_size = global_batch_size // world_size if world_size > 0 else 0
        self.layout = BatchLayout(global_batch_size, micro_batch_size, rank, world_size)
        remote = any("://" in p for p in self.paths)
        store = None
        if remote:
            from tokenmill.loader.remote import FetchPolicy, ObjectStore  # pyarrow: only for URIs

            if not fetch_timeout > 0:
                raise ConfigError(f"fetch_timeout must be positive, got {fetch_timeout}")
            store = ObjectStore(FetchPolicy(timeout=float(fetch_timeout)))
        self.streams, self.info = load_streams(self.paths, split, store)
        self.weights = resolve_weights(self.streams, self.seq_len, weights, len(self.paths))
        if not isinstance(allow_unhashed, bool):
            raise ConfigError(f"allow_unhashed must be true or false, got {allow_unhashed!r}")
        self.allow_unhashed = allow_unhashed
        self._require_hashes(local=verify)  # before anything is fetched or hashed
        schedule = MixtureSchedule.build([self.weights[s.name] for s in self.streams])
        self.order = GlobalOrder(self.streams, self.seq_len, self.seed, schedule, shuffle, shuffle_block,
                                 shuffle_window)
        # Workers hand tokens over in the smallest signed dtype that holds the vocabulary.
        transfer = torch.int16 if (self.info.get("vocab_size") or 1 << 40) <= 32768 else torch.int32
        self.fetcher = self._fetcher(store, cache_dir, cache_bytes, prefetch_threads, prefetch_bytes) if remote else None
        self._worker_stats: dict[int, dict[str, int]] = {}
        self._workers = None  # the DataLoader iterator of the newest iterator with workers
        self._plan = _Plan(self.order, self.layout, position_ids, transfer, self.fetcher)
        self.verifier = self._verifier() if verify else None
        self.consumed_samples = 0
        self.skips: list[tuple[int, int]] = []
        self.last_batch: int | None = None
        self._generation = 0
        self._handed = 0  # micro-batches handed out by this process (the fetch ratio's denominator)
        self._thrash_said = False

    # -- object storage ------------------------------------------------------------------------------------------

    def _require_hashes(self, local: bool) -> None:
        """Every ``.bin`` and ``.idx`` of a served stream has a recorded sha256 to be checked by: remote files always
        (the cache checks each as it arrives and when it finds it), local ones when ``local`` (``verify``); else a
        DataError naming the index and the file, unless ``allow_unhashed`` (`verify.require_recorded`)."""
        for d, index in enumerate(self.paths):
            names = [name for s in self.streams if s.dataset == d and self.weights[s.name] > 0 for f in s.files
                     if local or isinstance(f.prefix, str) for name in unhashed(f)]
            require_recorded(index, names, self.allow_unhashed)

    def _fetcher(self, store, cache_dir, cache_bytes, threads: int, window: int | None):
        """The cache and prefetcher of the streams read from URIs; the bound checked before any fetch."""
        from tokenmill.loader.cache import CachedObject, TokenCache
        from tokenmill.loader.prefetch import TokenFetcher
        from tokenmill.loader.remote import check_objects, local_name
        from tokenmill.tokenize.indexed import index_bytes
        from tokenmill.loader.streams import HEAD

        folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        objects, sizes = {}, {}
        remote = [s for s in self.streams if s.files and isinstance(s.files[0].prefix, str)]  # files are URIs
        for stream in remote:
            itemsize = stream.dtype.itemsize
            # A file without a recorded sha256 is refused (`_require_hashes`) unless the user allows it; a stream of
            # weight 0 is never read (its files are only listed, for their sizes).
            unchecked = self.allow_unhashed or self.weights[stream.name] == 0
            for i, f in enumerate(stream.files):
                bin_uri, idx_uri = f"{f.prefix}.bin", f"{f.prefix}.idx"
                objects[(stream.name, i)] = (CachedObject(bin_uri, local_name(bin_uri, f.sha256, ".bin"), f.sha256,
                                                          f.tokens * itemsize, allow_unhashed=unchecked),
                                             CachedObject(idx_uri, local_name(idx_uri, f.idx_sha256, ".idx"),
                                                          f.idx_sha256, allow_unhashed=unchecked))
                # One sequence per document, as tokenize writes them: header + lengths, pointers, document indices.
                sizes[(stream.name, i)] = f.tokens * itemsize + index_bytes(f.documents)
        check_objects(store, {o.uri: o.size for pair in objects.values() for o in pair})
        whole = dict(sizes)
        # The data this loader reads: a stream of weight 0 is listed (for its sizes), never fetched.
        total = sum(size for (name, _), size in whole.items() if self.weights[name] > 0)
        if cache_bytes is None:
            folder.mkdir(parents=True, exist_ok=True)
            fs = os.statvfs(folder)
            free = fs.f_bavail * fs.f_frsize
            cache_bytes = min(total, int(0.9 * free))
            log.info("token cache %s: cache_bytes %d (the remote data %d, free %d)", folder, cache_bytes, total, free)
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes <= 0:
            raise ConfigError(f"cache_bytes must be a positive number of bytes, got {cache_bytes!r}")
        if whole:
            key = max(whole, key=whole.get)
            if sizes[key] > cache_bytes:
                uri = objects[key][0].uri
                raise ConfigError(f"cache_bytes {cache_bytes} is smaller than one token file: {uri} and its .idx "
                                  f"take {sizes[key]} bytes; raise cache_bytes to at least that (a micro-batch "
                                  "may read several files at once: a few times that is the practical minimum)")
            # Each process building micro-batches (the workers, or this one) pins the files of the sample it reads:
            # one file, or more when a sample crosses file ends.
            least = min((f.tokens for stream in remote for f in stream.files if f.tokens), default=1)
            span = min(len(whole), 1 + -(-self.seq_len // least))
            pinned = max(1, self.num_workers) * span * sizes[key]
            if pinned > cache_bytes < total:  # (a cache that holds all the data holds any sample's files)
                raise ConfigError(f"cache_bytes {cache_bytes} cannot hold the files that {max(1, self.num_workers)} "
                                  f"process(es) building micro-batches may read at once (up to {pinned} bytes: "
                                  f"token files of up to {sizes[key]} bytes, a sample spanning up to {span}); raise "
                                  f"cache_bytes to at least {pinned}, or lower num_workers")
        if cache_bytes < total:
            self._check_window(remote, whole, cache_bytes, total)
            # The sample that runs from one file into the next reads the next one's recorded head (a ranged read,
            # checked against its own sha256), not the whole file: a block of a file's samples needs that file only.
            for stream in remote:
                stream.heads = True
                for i, f in enumerate(stream.files):
                    if f.head_bytes and f.head_sha256 and f.head_bytes < f.tokens * stream.dtype.itemsize:
                        uri, idx = f"{f.prefix}.bin", objects[(stream.name, i)][1]
                        objects[(stream.name, i, HEAD)] = (
                            CachedObject(uri, local_name(uri, f.head_sha256, ".head"), f.head_sha256, f.head_bytes,
                                         length=f.head_bytes), idx)
                        sizes[(stream.name, i, HEAD)] = f.head_bytes + whole[(stream.name, i)] - f.tokens * \
                            stream.dtype.itemsize
        if threads < 0:
            raise ConfigError(f"prefetch_threads must be >= 0, got {threads}")
        if window is None:  # all of it when the cache holds the data (nothing to evict), else a share of the cache
            # With a block shuffle every process of the node reads the same few files at a time (its workers and
            # the other ranks take turns at the same windows), so their windows are one set of files: half the
            # cache each lets the next files come while these are read. Under a global shuffle each process reads
            # files of its own, so the half is split among the workers. (Measured, benchmarks/streaming.py: file
            # blocks with 2 workers went from 7,861 to 25,148 samples/s at 1.10 bytes fetched per byte used.)
            share = 1 if self.order.block is not None else max(1, self.num_workers)
            window = total if cache_bytes >= total else cache_bytes // (2 * share)
        cache = TokenCache(folder, cache_bytes, store, timeout=store.policy.timeout, markers=markers_dir())
        # Files kept open past their micro-batch: all when the cache holds all the data, else the window's share.
        fetcher = TokenFetcher(cache, objects, sizes, int(window), threads,
                               hold_bytes=total if cache_bytes >= total else int(window))
        for stream in remote:
            stream.fetcher = fetcher
        self._remote_bytes = total
        return fetcher

    def _window_bytes(self, remote: list, whole: dict, windows: int) -> int:
        """The bytes of token files a block shuffle of ``windows`` blocks per window reads at once: every served
        stream's window (the mixture interleaves them), counted with its largest files. A block of a file's samples
        needs that file (the sample running into the next reads only its head); a block of ``b`` consecutive
        samples the files its ``b x seq_len`` tokens fill, at the smallest file (and the next one's head)."""
        need = 0
        for stream in remote:
            if self.weights[stream.name] > 0:
                per_block = 1
                if self.order.block != "file":
                    least = min((f.tokens for f in stream.files if f.tokens), default=1)
                    per_block = 1 + (int(self.order.block) * self.seq_len - 1) // least
                sizes = sorted((whole[(stream.name, i)] for i in range(len(stream.files))), reverse=True)
                need += sum(sizes[:per_block * windows])
        return need

    def _check_window(self, remote: list, whole: dict, cache_bytes: int, total: int) -> None:
        """A cache smaller than the data: a block shuffle whose window the cache cannot hold is refused (a file was
        fetched again for nearly every sample: 236x the data on a stream of eight files), naming the windows that
        fit; a global shuffle is warned about (it reads files all over the data: shuffle_block: file)."""
        if self.order.block is None:
            log.warning("a global shuffle over %d bytes of remote token files with cache_bytes %d fetches a whole "
                        "file for nearly every sample; set shuffle_block: file (a block shuffle the cache can follow)",
                        total, cache_bytes)
            return
        windows = self.order.blocks
        need = self._window_bytes(remote, whole, windows)
        if need <= cache_bytes:
            return
        fits = next((w for w in range(windows - 1, 0, -1) if self._window_bytes(remote, whole, w) <= cache_bytes), 0)
        fix = (f"lower shuffle_window to {fits} (or less)" if fits else "a window of one block does not fit either")
        raise ConfigError(f"shuffle_window {windows}: a window of every served stream reads up to {need} bytes of "
                          f"token files at once, more than cache_bytes {cache_bytes}: nearly every sample would fetch "
                          f"a file again; {fix}, or raise cache_bytes to at least {need}")

    def _note_fetched(self) -> None:
        """Every 64 micro-batches, once the cache could have been filled: a warning, once, when this loader has
        fetched more than FETCH_RATIO_WARN bytes per byte of samples it handed out, beyond a cache's worth fetched
        ahead (files fetched again and again: a cache too small for the order)."""
        self._handed += 1
        if self._thrash_said or self._handed % 64:
            return
        itemsize = self.streams[0].dtype.itemsize
        used = self._handed * self.micro_batch_size * (self.seq_len + 1) * itemsize
        if used < min(self._remote_bytes, self.fetcher.cache.limit):
            return  # a cold cache fetches whole files for its first samples
        fetched = self.fetch_stats()["bytes_fetched"]
        # Up to a cache's worth may be fetched ahead of use (prefetching), and the .idx files come with the .bin
        if fetched - self.fetcher.cache.limit > FETCH_RATIO_WARN * used:
            self._thrash_said = True
            log.warning("the token cache has fetched %.1f bytes per byte of samples used (%d bytes for %d): files "
                        "are fetched again and again; give it more cache_bytes, or a block shuffle "
                        "(shuffle_block: file) with a shuffle_window it holds", fetched / used, fetched, used)

    def fetch_stats(self) -> dict[str, int]:
        """What this loader fetched from the store (its workers included, as of the last batch they handed over):
        ``bytes_fetched``, ``files_fetched``, ``evicted``, ``damaged`` (copies found damaged in the cache, removed and
        fetched again), ``cache_peak_bytes`` (the most the cache folder held when one of them reserved room),
        ``cache_bytes`` and ``disk_bytes`` (the folder now). Zeros when local."""
        stats = {"bytes_fetched": 0, "files_fetched": 0, "evicted": 0, "damaged": 0, "cache_peak_bytes": 0}
        if self.fetcher is None:
            return {**stats, "cache_bytes": 0, "disk_bytes": 0}
        for part in [self.fetcher.cache.stats if self.fetcher.cache._pid == os.getpid() else {},
                     *self._worker_stats.values()]:
            for key in ("bytes_fetched", "files_fetched", "evicted", "damaged"):
                stats[key] += part.get(key, 0)
            stats["cache_peak_bytes"] = max(stats["cache_peak_bytes"], part.get("cache_peak_bytes", 0))
        return {**stats, "cache_bytes": self.fetcher.cache.limit, "disk_bytes": self.fetcher.cache.disk_bytes()}

    # -- verification --------------------------------------------------------------------------------------------

    def _verifier(self) -> FileVerifier:
        """A background check of every file of a stream that is served (weight above 0): one group per token file,
        its ``.bin`` and ``.idx`` together."""
        groups, self._group_base = [], []
        for stream in self.streams:
            self._group_base.append(len(groups))
            served = self.weights[stream.name] > 0
            for f in stream.files:
                if stream.fetcher is not None:  # checked as it is fetched, before any read
                    groups.append([])
                    continue
                # A file without a recorded sha256 got this far only with allow_unhashed (`_require_hashes`).
                checks = [Check(Path(f"{f.prefix}{ext}"), sha) for ext, sha in ((".bin", f.sha256),
                                                                                  (".idx", f.idx_sha256)) if sha]
                groups.append(checks if served else [])
        # Each rank starts at another file: with the node's markers and locks, the ranks of a node hash in parallel.
        first = len(groups) * self.layout.rank // max(1, self.layout.world_size)
        return FileVerifier(groups, markers_dir(), first).start()

    def close(self) -> None:
        """Stop background verification and fetching, and let go of cached files (call before the process exits; a
        new iterator does not restart verification)."""
        if self.verifier is not None:
            self.verifier.stop()
        workers, self._workers = self._workers, None
        shutdown = getattr(workers, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        if self.fetcher is not None:
            self.fetcher.close()

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
            # only when set: states of loaders without a block shuffle stay as they were
            **({"shuffle_block": self.order.block, "shuffle_window": self.order.blocks}
               if self.order.block is not None else {}),
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
        check_state_shape(state)
        problems = []
        block = self.order.block
        for key, mine in (("seq_len", self.seq_len), ("seed", self.seed), ("split", self.split),
                          ("shuffle", self.order.shuffle), ("shuffle_block", block),
                          ("shuffle_window", None if block is None else self.order.blocks)):
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
        are the same. Data are known by content (file names, token counts, sha256), not by where they are. A state
        of another shape has none to name: `check_state_dict` refuses it, naming the key."""
        try:
            check_state_shape(state)
        except ResumeError:
            return []
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
        if torch.utils.data.get_worker_info() is not None:
            # A DataLoader worker holds a copy: every worker would serve the whole sequence, and the state kept in
            # the main process would never move (nor could this copy start workers of its own).
            raise RuntimeError("TokenLoader is being iterated in a DataLoader worker: give it to "
                               "DataLoader(loader, batch_size=None) with num_workers=0, or iterate it directly, "
                               "and set the TokenLoader's own num_workers to build micro-batches in worker "
                               "processes")
        return _Iterator(self, self._generation)

    def micro_batch(self, k: int, m: int) -> dict[str, torch.Tensor]:
        """Micro-batch m of global batch k for this rank, computed directly (no state involved)."""
        self._verify(self.layout.first_position(k, m), self.micro_batch_size)
        return as_batch(*self._plan.micro_batch(k, m, walked=False))

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
            if loader.fetcher is not None:
                loader.fetcher.start(loader._plan.upcoming(loader.layout.sequence(k, m, loader.skips)))
            self._source = ((k2, m2, *loader._plan.micro_batch(k2, m2)) for k2, m2 in
                            loader.layout.sequence(k, m, loader.skips))
        else:
            chunk = min(CHUNK_MICRO_BATCHES,
                        max(1, CHUNK_TOKENS // (loader.micro_batch_size * (loader.seq_len + 1))))
            chunks = iter(torch.utils.data.DataLoader(
                _WorkerStream(loader._plan, k, m, list(loader.skips), chunk), batch_size=None,
                num_workers=loader.num_workers, pin_memory=loader.pin_memory,
                prefetch_factor=loader.prefetch_factor, timeout=loader.worker_timeout))
            loader._workers = chunks  # for close(): its worker processes stop then, not at garbage collection
            self._source = ((k2, m2, tokens[i].long(), None if positions is None else positions[i])
                            for ids, tokens, positions in self._noting(chunks) for i, (k2, m2) in enumerate(ids))

    def _noting(self, chunks):
        """Chunks from the workers, their fetch counters kept for ``fetch_stats``; a worker past ``worker_timeout``
        is a DataError saying so (the DataLoader's own error names no option)."""
        while True:
            try:
                ids, tokens, positions, stats = next(chunks)
            except StopIteration:
                return
            except RuntimeError as err:
                if not str(err).startswith("DataLoader timed out"):
                    raise
                raise DataError(f"a loader worker built no micro-batch in {self.loader.worker_timeout:g} s "
                                f"(worker_timeout): a stuck read of a token file, or a worker starved of CPU; raise "
                                f"worker_timeout, or 0 to wait forever") from None
            if stats is not None:
                self.loader._worker_stats[stats[0]] = stats[1]
            yield ids, tokens, positions

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
        if loader.fetcher is not None:
            loader._note_fetched()
        return as_batch(tokens, positions)
