"""Token files of remote streams in the cache: held while a sample reads them, fetched ahead in global order.

The order is known in advance (``GlobalOrder`` maps every future position to a sample, and the layout says which
micro-batches this process builds), so a background thread walks this process's own coming micro-batches, lists
the token files each reads, and fetches them in that order with a few threads, at most ``window_bytes`` of
distinct files ahead of the micro-batch being built. Those files form the process's window, which its own
evictions skip. The sample being read holds (pins) its files; of the files held before, the most recently used
stay pinned and open within ``hold_bytes`` (so a file read again costs no reopening), the rest are released, their
memory maps closed first so that eviction frees disk. The walk also hands the builder each micro-batch's sample
locations, computed 64 micro-batches at a time, so the builder does not locate them again.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections import OrderedDict, deque
from typing import Iterable, Iterator

from tokenmill.loader.cache import CachedObject, TokenCache

log = logging.getLogger(__name__)

LOOKAHEAD_MICRO_BATCHES = 256  # also bounds the walk when the whole data fits the window
HOLD_FILES = 64  # files a process keeps pinned and open at most (two lock files each: well inside 1,024 fds)


class TokenFetcher:
    """The remote token files of a loader: (stream, file) -> its ``.bin`` and ``.idx`` in the cache, and
    (stream, file, HEAD) -> the recorded head of its ``.bin`` and its ``.idx`` (what the sample that runs into the
    file from the one before reads of it)."""

    def __init__(self, cache: TokenCache, objects: dict[tuple, tuple[CachedObject, CachedObject]],
                 sizes: dict[tuple, int], window_bytes: int, threads: int = 4, hold_bytes: int = 0):
        self.cache, self.objects, self.sizes = cache, objects, sizes
        self.window_bytes, self.threads, self.hold_bytes = int(window_bytes), int(threads), int(hold_bytes)
        self._reset()

    def _reset(self) -> None:
        self._held: OrderedDict[tuple, object] = OrderedDict()  # (stream, file[, HEAD]) -> the stream; LRU first
        self._prefetcher: _Prefetcher | None = None
        self._pid = None

    def __getstate__(self):
        return {k: self.__dict__[k] for k in ("cache", "objects", "sizes", "window_bytes", "threads", "hold_bytes")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    def _mine(self) -> None:
        if self._pid != os.getpid():  # forked: the parent's pins and thread are not this process's
            self._reset()
            self._pid = os.getpid()

    def size(self, key: tuple) -> int:
        """The file's bytes in the cache (.bin or its head, and .idx)."""
        return self.sizes[key]

    def local(self, stream, i: int):
        """(idx path, bin path) of file ``i`` of ``stream`` in the cache, pinned until ``hold`` lets it go."""
        self._mine()
        key = (stream.name, i)
        if key in self._held:  # pinned already (its map was closed and is being reopened): not pinned twice
            bin_obj, idx_obj = self.objects[key]
            return self.cache.path(idx_obj), self.cache.path(bin_obj)
        bin_path, idx_path = self._pin(key, stream)
        return idx_path, bin_path

    def _pin(self, key: tuple, stream) -> list:
        """Pin a key's two objects (a head is handed to its stream); their paths."""
        objects = self.objects[key]
        paths: list = []
        try:
            for obj in objects:
                paths.append(self.cache.pin(obj))
        except BaseException:
            for obj in objects[:len(paths)]:
                self.cache.release(obj.name)
            raise
        self._held[key] = stream
        if len(key) == 3:
            stream.set_head(key[1], paths[0], paths[1])
        return paths

    def hold(self, needed: Iterable[tuple]) -> None:
        """Pin these (stream, file) or (stream, file, HEAD); of the others held, keep the most recently used within
        ``hold_bytes`` and ``HOLD_FILES`` (an open file costs no reopening) and release the rest, closing their maps
        first."""
        self._mine()
        want = {(stream.name, *rest): stream for stream, *rest in needed}
        if all(key in self._held for key in want):  # the common case once the files are open: nothing to change
            for key in want:
                self._held.move_to_end(key)
            return
        room_bytes = self.hold_bytes - sum(self.size(k) for k in want)
        room_files = HOLD_FILES - len(want)
        keep = set(want)
        for key in reversed(self._held):  # most recent first
            if key in keep:
                continue
            if self.size(key) <= room_bytes and room_files > 0:
                keep.add(key)
                room_bytes -= self.size(key)
                room_files -= 1
        for key in [k for k in self._held if k not in keep]:  # released before pinning: room for the new ones
            self._release(key)
        for key, stream in want.items():
            if key not in self._held:
                self._pin(key, stream)
            self._held.move_to_end(key)

    def _release(self, key: tuple) -> None:
        stream = self._held.pop(key)
        stream.forget(key[1], head=len(key) == 3)
        for obj in self.objects[key]:
            self.cache.release(obj.name)

    def release_all(self) -> None:
        self._mine()
        for key in list(self._held):
            self._release(key)

    # -- prefetch ------------------------------------------------------------------------------------------------

    def start(self, upcoming: Iterator[tuple[tuple[int, int], list[tuple]]]) -> None:
        """Fetch ahead along ``upcoming``: ((batch, micro-batch), its files) in the order this process builds them."""
        self._mine()
        self.stop()
        if self.threads > 0 and self.window_bytes > 0:
            self._prefetcher = _Prefetcher(self, upcoming)

    def advance(self, k: int, m: int):
        """Micro-batch (k, m) is being built: the window moves past what came before it. Where its samples are, when
        the walk located them already (else None)."""
        if self._prefetcher is not None:
            return self._prefetcher.advance((k, m))
        return None

    def stop(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.stop()
            self._prefetcher = None

    def close(self) -> None:
        self._mine()
        self.stop()
        self.release_all()


class _Prefetcher:
    def __init__(self, fetcher: TokenFetcher, upcoming):
        self.fetcher, self.upcoming = fetcher, upcoming
        self._cond = threading.Condition()
        self._ordinal: dict[tuple[int, int], int] = {}
        self._located: dict[tuple[int, int], object] = {}  # where the walk found each coming micro-batch's samples
        self._consumed = 0
        self._window: dict[tuple, int] = {}  # file -> the last micro-batch reading it
        self._uses: deque[tuple[int, tuple]] = deque()  # (micro-batch, file), in walk order
        self._window_size = 0
        self._stopping = False
        self._skip_to: tuple[int, int] | None = None
        self._wake_at = 0
        self._short_of_bytes = False
        # Daemon threads, not a ThreadPoolExecutor: its threads are joined at exit, and a DataLoader worker would
        # then wait out a fetch still retrying against a store that is gone.
        self._queue: queue.Queue = queue.Queue()
        self._threads = [threading.Thread(target=self._fetching, name="tokenmill-fetch", daemon=True)
                         for _ in range(fetcher.threads)]
        self._thread = threading.Thread(target=self._run, name="tokenmill-prefetch", daemon=True)
        for thread in (*self._threads, self._thread):
            thread.start()

    def advance(self, ident: tuple[int, int]):
        with self._cond:
            n = self._ordinal.get(ident)
            if n is None:
                # The builder is ahead of the walk: the walk skips to it (ids rise in (batch, micro-batch) order).
                if not self._ordinal or ident > next(reversed(self._ordinal)):
                    self._skip_to = ident
                    self._cond.notify_all()
                return None
            where = self._located.pop(ident, None)
            if n < self._consumed:
                return where
            self._consumed = n
            while self._ordinal and next(iter(self._ordinal.values())) < n:  # ids come in order: oldest first
                self._located.pop(next(iter(self._ordinal)), None)
                del self._ordinal[next(iter(self._ordinal))]
            changed = False
            while self._uses and self._uses[0][0] < n:
                last, key = self._uses.popleft()
                if self._window.get(key) == last:  # not read again later in the walk: out of the window
                    del self._window[key]
                    self._window_size -= self.fetcher.size(key)
                    changed = True
            if changed:
                self._sync()
            if (changed and self._short_of_bytes) or n >= self._wake_at:
                # Only when the walk can go on: waking it for every micro-batch costs the builder the GIL.
                self._cond.notify_all()
            return where

    def _sync(self) -> None:
        names = {o.name for key in self._window for o in self.fetcher.objects[key]}
        self.fetcher.cache.window = names

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(5.0)
        for _ in self._threads:
            self._queue.put(None)
        self.fetcher.cache.window = set()

    def _run(self) -> None:
        try:
            for n, (ident, files, where) in enumerate(self.upcoming):
                with self._cond:
                    # Ahead of the builder by at most the window (in bytes) and the lookahead (in micro-batches);
                    # the micro-batch being built always gets its files.
                    while True:
                        if self._skip_to is not None and ident >= self._skip_to:
                            self._consumed, self._skip_to = n, None
                        far = n - self._consumed > LOOKAHEAD_MICRO_BATCHES
                        self._short_of_bytes = not far and self._window_size + sum(
                            self.fetcher.size(f) for f in files if f not in self._window) > self.fetcher.window_bytes
                        if (self._stopping or self._skip_to is not None or n <= self._consumed
                                or not (far or self._short_of_bytes)):
                            break
                        # Woken when a quarter of the lookahead is free, or (short of bytes) when a file leaves.
                        self._wake_at = n - LOOKAHEAD_MICRO_BATCHES // 4 * 3 if far else n
                        self._cond.wait(0.5)
                    if self._stopping:
                        return
                    if self._skip_to is not None:
                        continue  # the builder is past this one already: nothing to fetch for it
                    self._ordinal[ident] = n
                    self._located[ident] = where
                    new = [f for f in files if f not in self._window]
                    for f in files:
                        self._window[f] = n
                        self._uses.append((n, f))
                    self._window_size += sum(self.fetcher.size(f) for f in new)
                    if new:
                        self._sync()
                for key in new:
                    for obj in self.fetcher.objects[key]:
                        self._queue.put(obj)
        except Exception as err:  # noqa: BLE001 - the builder fetches on demand and raises the real error
            log.warning("prefetch stopped: %s", err)

    def _fetching(self) -> None:
        while True:
            obj = self._queue.get()
            if obj is None or self._stopping:
                return
            try:
                self.fetcher.cache.prefetch(obj, cancelled=lambda: self._stopping)
            except Exception as err:  # noqa: BLE001 - the builder fetches it again on demand and raises then
                log.debug("prefetch of %s failed: %s", obj.uri, err)
