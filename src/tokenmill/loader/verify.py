"""Token files checked against the sha256 that `tokens.json` records, before any batch uses them.

The tokenize stage records the sha256 of every `.bin`, `.idx` and `.docs.parquet`. Sizes and token counts do not see
a flipped byte; the hash does. Hashing runs at about 2 GB/s per core (SHA-NI), so a 1 TB dataset is minutes of
work per node: too slow to do at start-up on every rank, and useless to repeat after every restart. Hence:

- **In the background.** ``FileVerifier`` hashes the files in a thread (``hashlib`` releases the GIL) while the
  job starts and trains. A batch is handed out only once every file it reads is verified: a file a batch needs
  before the thread reached it is hashed at once by the caller. A mismatch anywhere stops the next batch with a
  ``DataError`` naming the file.
- **Once per file per node.** A verified file leaves a marker in a node-local cache (``$TOKENMILL_VERIFIED_CACHE``,
  else ``$XDG_CACHE_HOME/tokenmill/verified``, else ``~/.cache/tokenmill/verified``; ``off`` for none), named by a
  hash of (real path, device, inode, size, mtime, ctime, recorded sha256) and holding that description. Any write to
  the file changes its mtime and ctime (``touch`` can reset mtime, not ctime), so the marker no longer applies and
  the file is hashed again. Ranks of one node take a lock per file: one hashes it, the others wait for its
  marker. Each rank's thread starts at another file (rank / world size of the way in), so the ranks of a node
  hash different files at once. A marker cannot see bit rot that leaves the metadata alone:
  ``tokenmill tokens verify RUN`` rehashes everything, ignoring markers (and refreshes them).

The streaming loader's cache checks the copies it finds in its folder the same way (``cache.TokenCache.pin``): a
download leaves a marker (``mark_verified``: it was hashed as it arrived), and an evicted copy takes its marker
with it (``forget``).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from tokenmill.digest import file_sha256
from tokenmill.loader.locks import EXCLUSIVE, flock, open_lock
from tokenmill.tokenize.tokens_json import DataError

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Check:
    """One file and the sha256 its index records."""

    path: Path
    sha256: str


def _marker_name(path: Path, st: os.stat_result, sha256: str) -> tuple[str, dict]:
    description = {"path": os.path.realpath(path), "device": st.st_dev, "inode": st.st_ino, "bytes": st.st_size,
                   "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "sha256": sha256}
    key = hashlib.sha256(json.dumps(description, sort_keys=True).encode("utf-8")).hexdigest()[:32]
    return key, description


class HashMismatch(DataError):
    """A file whose sha256 is not the one its index records (``path``: a local path or a URI, shown as given)."""

    def __init__(self, path: Path | str, digest: str, expected: str):
        self.path, self.digest, self.expected = path, digest, expected
        super().__init__(f"{path}: sha256 {digest[:16]}… differs from {expected[:16]}… recorded in tokens.json: the "
                         "file changed or is corrupt since the tokenize stage wrote it; restore it or rerun the "
                         "tokenize stage")


def unhashed(f) -> list[str]:
    """The ``.bin`` and ``.idx`` of token file ``f`` (a `streams.TokenFile`) whose sha256 its `tokens.json` does not
    record: nothing could check their bytes."""
    return [f"{f.prefix}{ext}" for ext, sha in ((".bin", f.sha256), (".idx", f.idx_sha256)) if not sha]


def require_recorded(index: str | Path, names: Sequence[str], allow: bool) -> None:
    """Files of the `tokens.json` ``index`` about to be read with no recorded sha256 (``names``) are refused, naming
    the index and the first, unless ``allow`` (the loader's ``allow_unhashed``, the user's explicit choice): then a
    warning names them. The tokenize stage records every one, so an index without them was edited or made
    elsewhere, and one from someone else could leave a hash out to have any bytes read."""
    if not names:
        return
    more = f" (and {len(names) - 1} more file{'s' if len(names) > 2 else ''} without one)" if len(names) > 1 else ""
    if allow:
        log.warning("%s: %s%s has no sha256 recorded: read unchecked, as allow_unhashed asks", index, names[0], more)
        return
    raise DataError(f"{index}: {names[0]}: no sha256 recorded{more}, so nothing can check its bytes before they are "
                    "read; the tokenize stage records one for every file: use the tokens.json it wrote, or rerun it "
                    "(to read such files unchecked, set allow_unhashed: TokenLoader(allow_unhashed=True), "
                    "`tokenmill loader explain --allow-unhashed`)")


def verify_file(check: Check, cache: Path | None = None, *, use_markers: bool = True) -> bool:
    """Raise ``DataError`` naming the file unless it hashes to ``check.sha256``. True when it was hashed, False when
    a marker of this node showed it verified with the same metadata. Writes the marker on success."""

    path = check.path
    try:
        st = path.stat()
    except OSError as err:
        raise DataError(f"{path}: cannot read it ({err.strerror or err}); tokens.json lists it") from None
    if cache is None:
        return _hash_and_compare(check)
    key, description = _marker_name(path, st, check.sha256)
    marker = cache / key
    if use_markers and marker.is_file():
        return False
    try:
        cache.mkdir(parents=True, exist_ok=True)
        lock = open_lock(cache / f"{key}.lock")  # held across the hash; let go of in a forked child (locks.py)
    except OSError as err:
        log.warning("verified-file cache %s is not writable (%s): hashing %s without a marker", cache, err, path)
        return _hash_and_compare(check)
    try:
        flock(lock, EXCLUSIVE)  # another rank of this node may be hashing it: wait, then use its marker
        if use_markers and marker.is_file():
            return False
        _hash_and_compare(check)
        _write_marker(cache, key, description)
        return True
    finally:
        try:
            os.unlink(cache / f"{key}.lock")  # a waiter holding the old lock finds the marker; harmless otherwise
        except OSError:
            pass
        lock.close()


def _write_marker(cache: Path, key: str, description: dict) -> None:
    tmp = cache / f"{key}.{os.getpid()}.{threading.get_ident()}.tmp"
    tmp.write_text(json.dumps({**description, "verified_at": time.time()}) + "\n", encoding="utf-8")
    os.replace(tmp, cache / key)


def mark_verified(check: Check, cache: Path | None) -> None:
    """Record ``check.path``, as it is now, as verified without hashing it again: for a file whose bytes were hashed
    as they were written (a download checked against its sha256) and that nobody has written since. A marker that
    cannot be written only costs a hash later."""
    if cache is None:
        return
    try:
        key, description = _marker_name(check.path, check.path.stat(), check.sha256)
        cache.mkdir(parents=True, exist_ok=True)
        _write_marker(cache, key, description)
    except OSError as err:
        log.debug("no verified marker for %s: %s", check.path, err)


def forget(check: Check, cache: Path | None) -> None:
    """Remove the marker of ``check.path`` as it is now: called before the file is deleted (a cached copy evicted),
    so that markers of files gone do not pile up."""
    if cache is None:
        return
    try:
        key, _ = _marker_name(check.path, check.path.stat(), check.sha256)
        os.unlink(cache / key)
    except OSError:
        pass


def _hash_and_compare(check: Check) -> bool:

    try:
        digest = file_sha256(check.path)
    except OSError as err:
        raise DataError(f"{check.path}: cannot read it ({err.strerror or err}); tokens.json lists it") from None
    if digest != check.sha256:
        raise HashMismatch(check.path, digest, check.sha256)
    return True


def _stop_at_exit(ref: "weakref.ref[FileVerifier]") -> None:
    verifier = ref()
    if verifier is not None:
        verifier.stop()


class FileVerifier:
    """Verifies groups of files (a token file: its ``.bin`` and ``.idx``) in a background thread, in order;
    ``require(groups)`` returns once those groups are verified, hashing any not yet reached itself, and raises the
    first mismatch found anywhere, naming the file."""

    def __init__(self, groups: Sequence[Sequence[Check]], cache: Path | None = None, first: int = 0):
        self.groups = [list(g) for g in groups]
        self.cache = cache
        self.first = first % len(self.groups) if self.groups else 0  # where the thread starts (then wraps around)
        self._state = ["pending"] * len(self.groups)
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._left = len(self.groups)
        self.hashed = 0  # groups hashed here (not taken from a marker)
        self.seconds = 0.0
        self._thread: threading.Thread | None = None
        self._stopping = False

    @property
    def done(self) -> bool:
        return self._left == 0 and self._error is None

    def start(self) -> "FileVerifier":
        if self._thread is None and self._left:
            self._thread = threading.Thread(target=self._background, name="tokenmill-verify", daemon=True)
            self._thread.start()
            # Stopped at interpreter exit whoever built the loader: a daemon thread still hashing while the
            # interpreter finalizes aborted torchrun ranks ("terminate called without an active exception").
            atexit.register(_stop_at_exit, weakref.ref(self))
        return self

    def _background(self) -> None:
        started = time.perf_counter()
        n = len(self.groups)
        for i in [*range(self.first, n), *range(self.first)]:
            if self._error is not None or self._stopping:
                return
            self._run(i)
        log.info("token files verified: %d groups, %d hashed on this node, in %.1f s", len(self.groups), self.hashed,
                 time.perf_counter() - started)

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the background thread after the file it is hashing, and wait for it: a daemon thread still inside a
        hash or a lock when the interpreter shuts down can abort the process (seen at the end of a torchrun rank)."""
        self._stopping = True
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("token-file verification thread still running after %.0f s at close", timeout)

    def _claim(self, i: int) -> bool:
        with self._cond:
            if self._state[i] != "pending":
                return False
            self._state[i] = "running"
            return True

    def _run(self, i: int) -> None:
        if not self._claim(i):
            return
        t0 = time.perf_counter()
        error, hashed = None, False
        try:
            for check in self.groups[i]:
                hashed |= verify_file(check, self.cache)
        except Exception as err:  # noqa: BLE001 - kept and raised to the consumer of the batch
            error = err
            log.error("%s", err)
        with self._cond:
            self._state[i] = "failed" if error else "done"
            self._left -= 1
            self.hashed += hashed
            self.seconds += time.perf_counter() - t0
            if error is not None and self._error is None:
                self._error = error
            self._cond.notify_all()

    def require(self, indices: Iterable[int]) -> None:
        """Return once every group in ``indices`` is verified; raise the first mismatch found (in any group)."""
        if self._error is not None:
            raise self._error
        if self._left == 0:
            return
        for i in sorted(set(indices)):
            self._run(i)  # hashed here when the thread has not reached it
            with self._cond:
                while self._state[i] == "running":
                    self._cond.wait()
            if self._error is not None:
                raise self._error

    def wait(self) -> None:
        """Every group verified (or the first mismatch raised)."""
        self.require(range(len(self.groups)))
