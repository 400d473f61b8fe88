"""A node-local folder of objects fetched from a store, bounded in bytes and shared by every loader of the node.

Layout: ``<folder>/<name>`` complete objects (named by their recorded sha256: see ``remote.local_name`` and `NAME`),
``<folder>/<name>.<pid>.<thread>.tmp`` downloads in progress, ``<folder>/.locks/`` one lock file per object (its
mtime: when the object was last pinned) and ``cache.lock``. Everything that changes the folder's size, or renames in
it, happens under ``cache.lock`` (``fcntl.flock``), so the bound holds for the whole node, whatever number of ranks
and workers share the folder:

- **Reserve, then download.** A download first takes room: under ``cache.lock`` it sums the folder from disk
  (no bookkeeping to drift or to lose in a crash), evicts until the object fits, and creates its temporary file at
  full size (``ftruncate``). The folder therefore never holds more than ``cache_bytes``, the downloads included.
  The temporary file is renamed into place only after its sha256 matched: a killed process leaves at most a
  ``.tmp`` (removed by the next reservation, once no process holds its lock), never a half file under the name.
- **One download per object per node.** The downloader holds the object's lock exclusively; another rank wanting
  the object waits on the lock, then finds it present.
- **Checked at every first pin.** A copy found in the folder is checked before a process reads it, as the local
  loader checks its files (`verify.verify_file`): its sha256, or the node's marker of a check of that file with the
  same size, mtime and ctime (a download leaves one: it was hashed as it was written). The check runs under the
  shared lock, so nobody evicts the file meanwhile; a damaged copy (another size or sha256: a write, a truncation,
  a disk fault) is removed under the exclusive lock and fetched again, counted and logged. An object with no
  recorded sha256 exists only when the user set the loader's ``allow_unhashed`` (`CachedObject` refuses it
  otherwise): then it is used as found.
- **Pins.** A loader reading an object holds its lock shared. Eviction takes a lock exclusively without waiting,
  so an object in use by any process of the node is never removed; among the others, the least recently used
  goes first (the mtime of its lock file, touched at every pin), skipping the objects this process expects to read
  soon (its prefetch window). A crashed process's pins vanish with it (the kernel drops its locks).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tokenmill.errors import ConfigError
from tokenmill.loader.locks import EXCLUSIVE, NOWAIT, SHARED, flock, open_lock
from tokenmill.loader.verify import Check, HashMismatch, forget, mark_verified, require_recorded, verify_file
from tokenmill.tokenize.tokens_json import SHA256, DataError

log = logging.getLogger(__name__)

LOCKS = ".locks"
NAME = re.compile(r"(u?)([0-9a-f]{64})\.(bin|idx|head)")
"""A cached object's file name (`remote.local_name`): its recorded sha256 (or ``u`` and a hash of its URI when none
is recorded) and its kind. Nothing else is ever a name in the folder."""


@dataclass(frozen=True)
class CachedObject:
    """One object of the store and what `tokens.json` says of it."""

    uri: str
    name: str
    """Its file name in the cache."""
    sha256: str
    """As recorded ("" when not: only with ``allow_unhashed``)."""
    size: int | None = None
    """Its size when known in advance (a ``.bin``: tokens x item size); checked against the store's."""
    length: int | None = None
    """Only the object's first ``length`` bytes (a ``.bin``'s head: ``sha256`` is theirs)."""
    allow_unhashed: bool = False
    """An object without a recorded sha256 may be served unchecked (the loader's ``allow_unhashed``, the user's
    choice); without it such an object cannot be made, so the cache never takes "nothing recorded" for "checked"."""

    def __post_init__(self):
        # Names come from tokens.json's hashes, which tokens_json.validate checked; checked again where they become
        # paths: a name with a folder in it would put a download, a lock or a read outside the cache folder.
        if not NAME.fullmatch(self.name) or (self.sha256 and not SHA256.fullmatch(self.sha256)):
            raise DataError(f"{self.uri}: {self.name!r:.100} (sha256 {self.sha256!r:.100}) is not the name of a file "
                            "of the token cache: a sha256 in tokens.json must be 64 lowercase hex characters")
        if not self.sha256 and not self.allow_unhashed:
            require_recorded(self.uri.rsplit("/", 1)[0], [self.uri], allow=False)


class TokenCache:
    """The bounded cache folder, as one process uses it (its pins, window and counters are its own; a forked
    worker starts with none). ``markers``: the folder of the node's verified-file markers (`markers.markers_dir`; None:
    a copy found in the folder is hashed at each first pin)."""

    def __init__(self, folder: Path, limit: int, store, timeout: float = 120.0, markers: Path | None = None):
        self.folder, self.limit, self.store, self.timeout = Path(folder), int(limit), store, float(timeout)
        self.markers = markers
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / LOCKS).mkdir(exist_ok=True)
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._mutex = threading.RLock()
        self._held: dict[str, list] = {}  # name -> [its lock file, held shared; pins of it not yet released]
        self.window: set[str] = set()  # names this process will read soon: never evicted by it
        self.stats = {"bytes_fetched": 0, "files_fetched": 0, "cache_peak_bytes": 0, "evicted": 0, "damaged": 0}

    def __getstate__(self):
        return {k: self.__dict__[k] for k in ("folder", "limit", "store", "timeout", "markers")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    def _mine(self) -> None:
        if self._pid != os.getpid():  # a forked worker: the parent's locks and counters are not this process's
            self._reset()

    def path(self, obj: CachedObject) -> Path:
        return self.folder / obj.name

    def _lock_path(self, name: str) -> Path:
        return self.folder / LOCKS / f"{name}.lock"

    def _lock_file(self, name: str):
        return open_lock(self._lock_path(name))  # held while pinned

    # -- pins ----------------------------------------------------------------------------------------------------

    def pin(self, obj: CachedObject) -> Path:
        """The object's local path, checked, fetched first when absent or damaged; it stays on disk until
        ``release``. A copy already in the folder is checked as the local loader checks its files
        (`verify.verify_file`: its sha256, or the node's marker of a check of the file with the same size, mtime
        and ctime); a damaged one (another size, another sha256) is removed and fetched again, counted
        (``damaged``) and logged."""
        self._mine()
        path = self.path(obj)
        with self._mutex:
            held = self._held.get(obj.name)
            if held is not None:  # pinned already (a .idx is pinned with its .bin and with its head): one more pin
                held[1] += 1
                return path
        lock = self._lock_file(obj.name)
        damaged = None  # the metadata of the copy this process found damaged: not hashed again while it stays
        deadline = None
        try:
            while True:
                flock(lock, SHARED)  # waits only while another process downloads it or removes it (exclusive)
                # Checked under the shared lock: no process evicts or removes it meanwhile.
                found = self._check(obj, path, damaged)
                if found is True:
                    os.utime(self._lock_path(obj.name))  # recently used (the object's own times are its marker's)
                    with self._mutex:
                        self._held[obj.name] = [lock, 1]
                    return path
                if found is None:
                    deadline = None  # absent (another process removed it): fetched, as any absent object
                elif found != damaged:
                    deadline = time.monotonic() + self.timeout  # how long another process may keep it from us
                damaged = found
                # Absent or damaged: fetch it, if no other process is looking at it too. Never a blocking wait for
                # the exclusive lock: another process that found it absent at the same moment may fetch it and then
                # hold it pinned (shared) for as long as it reads it, and a DataLoader worker waiting here would
                # wait for that pin, while the process holding it waits for this worker's batch (seen: two workers
                # stuck for good).
                if flock(lock, EXCLUSIVE | NOWAIT):
                    found = self._check(obj, path, damaged)  # another process may have replaced it meanwhile
                    if found is not True:
                        if found is not None:
                            self._discard(obj, path)
                        self._download(obj, wait=True)
                        damaged = deadline = None
                elif deadline is not None and time.monotonic() > deadline:
                    raise DataError(f"{path}: the cached copy of {obj.uri} is damaged and another process of this "
                                    f"node has kept it in use for {self.timeout:g} s, so it cannot be replaced; stop "
                                    "the loaders of this node and remove the file")
                else:
                    time.sleep(0.01)  # another process fetches it (then shared waits for it) or has it already
                # Back to shared and look again: between the two an evictor may have taken it (then fetch again).
        except BaseException:
            lock.close()
            raise

    def _check(self, obj: CachedObject, path: Path, damaged):
        """Under the object's lock: True when the copy at ``path`` is intact (or has no recorded sha256 to check),
        None when absent, else its metadata (damaged: logged once per process)."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key == damaged:
            return key
        want = obj.length if obj.length is not None else obj.size
        if want is not None and st.st_size != want:
            problem = f"{st.st_size} bytes where tokens.json implies {want}"
        elif not obj.sha256:
            return True  # nothing recorded to check it by: only with allow_unhashed (the loader warned of it)
        else:
            try:
                verify_file(Check(path, obj.sha256), self.markers)
                return True
            except HashMismatch as err:
                problem = f"sha256 {err.digest[:16]}… where tokens.json records {obj.sha256[:16]}…"
            except DataError as err:  # unreadable (an I/O error): fetched again as well
                problem = str(err)
        log.warning("%s: the cached copy of %s is damaged (%s): removing it and fetching it again", path, obj.uri,
                    problem)
        return key

    def _discard(self, obj: CachedObject, path: Path) -> None:
        """With the object's lock held exclusively: remove its damaged copy (under the cache lock, as any name
        leaving the folder)."""
        with self._cache_lock():
            try:
                os.unlink(path)
            except FileNotFoundError:
                return
        with self._mutex:
            self.stats["damaged"] += 1

    def release(self, name: str) -> None:
        """One pin of ``name`` let go; its last drops the shared lock: evictable again."""
        with self._mutex:
            held = self._held.get(name)
            if held is None:
                return
            held[1] -= 1
            if held[1] > 0:
                return
            del self._held[name]
        held[0].close()

    def release_all(self) -> None:
        self._mine()
        with self._mutex:
            held, self._held = self._held, {}
        for lock, _ in held.values():
            lock.close()

    def prefetch(self, obj: CachedObject, cancelled=None) -> None:
        """Fetch the object if absent and there is room without waiting; never pins it. Another process already
        fetching it, or a full cache, leaves it to the reader (as does a copy present: the reader's pin checks it)."""
        self._mine()
        path = self.path(obj)
        if path.is_file():
            return
        with self._lock_file(obj.name) as lock:
            if flock(lock, EXCLUSIVE | NOWAIT) and not path.is_file():
                self._download(obj, wait=False, cancelled=cancelled)

    # -- fetch ---------------------------------------------------------------------------------------------------

    def _download(self, obj: CachedObject, wait: bool, cancelled=None) -> bool:
        """With the object's lock held exclusively: reserve room, download, check, rename. False when ``wait`` is
        off and there is no room."""
        for attempt in (1, 2):
            tmp: Path | None = None

            def begin(size: int):
                nonlocal tmp
                if obj.size is not None and size != obj.size:
                    raise DataError(f"{obj.uri}: the object has {size} bytes but tokens.json implies {obj.size}: it "
                                    "is not the file the tokenize stage wrote; restore it or rerun the tokenize stage")
                tmp = self._reserve(obj, size, wait)
                return None if tmp is None else open(tmp, "r+b")  # noqa: SIM115 - closed below

            try:
                digest, size, out = self.store.download(obj.uri, begin, cancelled, obj.length)
                if out is None:
                    return False
                out.close()
                if obj.sha256 and digest != obj.sha256:
                    what = obj.uri if obj.length is None else f"{obj.uri} (its first {obj.length} bytes)"
                    if attempt == 1:
                        # A transfer can go wrong where the object did not: fetch it once more before refusing.
                        log.warning("%s: sha256 %s… differs from tokens.json's %s…; fetching it again", what,
                                    digest[:16], obj.sha256[:16])
                        continue
                    raise DataError(f"{what}: sha256 {digest[:16]}… differs from {obj.sha256[:16]}… recorded in "
                                    "tokens.json, twice: the object is corrupt or changed since the tokenize stage "
                                    "wrote it; restore it or rerun the tokenize stage")
                with self._cache_lock():
                    # Under the cache lock: a sum of the folder must never see the name between two states.
                    os.replace(tmp, self.path(obj))
                if obj.sha256:  # hashed as it was written, and nobody else can write it yet: a pin need not rehash
                    mark_verified(Check(self.path(obj), obj.sha256), self.markers)
                with self._mutex:
                    self.stats["bytes_fetched"] += size
                    self.stats["files_fetched"] += 1
                return True
            finally:
                if tmp is not None:
                    try:
                        os.unlink(tmp)
                    except FileNotFoundError:
                        pass
        return False  # unreachable: the second mismatch raised

    def _reserve(self, obj: CachedObject, size: int, wait: bool) -> Path | None:
        """A temporary file of ``size`` bytes in the folder, made under the cache lock once there is room."""
        if size > self.limit:
            raise ConfigError(f"cache_bytes {self.limit} is smaller than {obj.uri} ({size} bytes): raise cache_bytes "
                              "to at least the largest token file (.bin plus .idx)")
        deadline = time.monotonic() + self.timeout
        delay = 0.02
        while True:
            with self._cache_lock():
                used = self._make_room(size)
                if used + size <= self.limit:
                    tmp = self.folder / f"{obj.name}.{os.getpid()}.{threading.get_ident()}.tmp"
                    with open(tmp, "wb") as f:
                        f.truncate(size)  # the whole object's room, taken now, under the lock
                    with self._mutex:
                        self.stats["cache_peak_bytes"] = max(self.stats["cache_peak_bytes"], used + size)
                    return tmp
            if not wait:
                return None
            if time.monotonic() > deadline:
                raise ConfigError(f"cache_bytes {self.limit}: no room for {obj.uri} ({size} bytes) after "
                                  f"{self.timeout:g} s: the folder holds {used} bytes of files in use by the loaders of this "
                                  "node and of downloads; raise cache_bytes, or share the folder among fewer loaders")
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    @contextmanager
    def _cache_lock(self):
        """The node-wide lock under which the folder's size changes (and names move)."""
        with open_lock(self.folder / LOCKS / "cache.lock") as lock:
            flock(lock, EXCLUSIVE)
            yield

    def _make_room(self, size: int) -> int:
        """Under the cache lock: remove stale downloads, evict least recently used objects nobody holds until
        ``size`` more bytes fit (or nothing more can go); the bytes the folder then holds."""
        entries, used = [], 0
        for entry in os.scandir(self.folder):
            if not entry.is_file(follow_symlinks=False):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if entry.name.endswith(".tmp"):
                name = entry.name.rsplit(".", 3)[0]  # <name>.<pid>.<thread>.tmp
                with self._lock_file(name) as lock:
                    if flock(lock, EXCLUSIVE | NOWAIT):  # nobody downloads it: left by a killed process
                        os.unlink(entry.path)
                        continue
            else:
                entries.append((entry.name, st))
            used += st.st_size
        if used + size <= self.limit:
            return used
        with self._mutex:
            held, window = set(self._held), set(self.window)
        # First what nobody expects to read soon; then, if that is not enough, this process's own window (files
        # read soon can be fetched again; the file needed now cannot wait).
        # Least recently used first (a stat of each lock, made only when something must go).
        entries = sorted((self._last_used(name, st), name, st.st_size) for name, st in entries)
        for spare in (held | window, held):
            for _, name, nbytes in entries:
                if used + size <= self.limit:
                    return used
                if name in spare or not (self.folder / name).exists():
                    continue
                with self._lock_file(name) as lock:
                    if flock(lock, EXCLUSIVE | NOWAIT):  # no process holds it
                        named = NAME.fullmatch(name)
                        if named and not named.group(1):  # its marker goes with it (they would pile up)
                            forget(Check(self.folder / name, named.group(2)), self.markers)
                        try:
                            os.unlink(self.folder / name)
                        except FileNotFoundError:
                            continue
                        used -= nbytes
                        with self._mutex:
                            self.stats["evicted"] += 1
        return used

    def _last_used(self, name: str, st: os.stat_result) -> int:
        """When the object was last pinned: its lock file's mtime, touched at every pin (touching the object itself
        would move its ctime, and so invalidate its verified marker); the object's mtime if it has no lock file."""
        try:
            return os.stat(self._lock_path(name)).st_mtime_ns
        except FileNotFoundError:
            return st.st_mtime_ns

    def disk_bytes(self) -> int:
        """What the folder holds now (complete objects and downloads in progress). Read without the cache lock, so a
        file another thread or rank evicts or renames between the listing and its stat is simply not counted."""
        total = 0
        for entry in os.scandir(self.folder):
            try:
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                continue
        return total
