"""The streaming loader through faults of the store and of the node: an outage while it fetches (retried, the same
samples), a corrupt object (refused, naming it), a loader killed mid-download (no half file under a real name)."""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.loader.streaming import BUCKET, KW, URI, dataset, folder_bytes, paused_hashing, upload
from tokenmill.loader import DataError, TokenLoader
from tokenmill.loader import remote


@pytest.fixture
def data(tmp_path, s3_server):
    root = tmp_path / "run" / "tokenize"
    path, total, largest = dataset(root)
    upload(s3_server, root)
    return path, total, root


def _reference(path, steps: int) -> list:
    local = TokenLoader([str(path)], **KW)
    it = iter(local)
    return [next(it)["input_ids"].tolist() for _ in range(steps)]


# 400 steps of 256-byte reads through moto, stopped and restarted: about 40 s, `make test-slow`; the loader's faults in
# `make test`: the corrupt objects and the loader killed mid-download below
@pytest.mark.parametrize("workers", [pytest.param(0, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
def test_an_outage_mid_fetch_is_retried_and_the_samples_are_unchanged(data, tmp_path, s3_server, monkeypatch,
                                                                      caplog, workers):
    path, total, root = data
    steps = 400
    reference = _reference(path, steps)
    # Several ranged reads per file (the real client, smaller requests), so the outage falls inside downloads.
    monkeypatch.setattr(remote, "READ_BYTES", 256)
    loader = TokenLoader(URI, cache_dir=tmp_path / "cache", cache_bytes=total // 4, num_workers=workers,
                         fetch_timeout=60, **KW)
    halfway, restored = threading.Event(), threading.Event()

    def outage():
        halfway.wait()
        s3_server.stop()  # the store goes away (moto loses its objects) ...
        time.sleep(1.5)
        s3_server.start()  # ... and comes back with the same objects
        upload(s3_server, root)
        restored.set()

    thread = threading.Thread(target=outage)
    thread.start()
    got = []
    try:
        with caplog.at_level(logging.WARNING, logger="tokenmill.loader.remote"):
            it = iter(loader)
            for step in range(steps):
                if step == 100:
                    halfway.set()
                got.append(next(it)["input_ids"].tolist())
    finally:
        halfway.set()
        thread.join()
        loader.close()
    assert restored.is_set()
    assert got == reference
    if workers == 0:  # the workers' warnings go to their own processes' logs
        assert any("retrying" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_corrupt_object_is_refused_naming_it(data, tmp_path, s3_server, caplog, workers):
    path, total, root = data
    loader = TokenLoader(URI, cache_dir=tmp_path / "cache", cache_bytes=total, num_workers=workers, **KW)
    first = loader._plan.files_read(loader.order.locate([0]))[0]  # a file the first batch reads
    prefix = loader.streams[first[0]].files[first[1]].prefix
    key = prefix.split(f"s3://{BUCKET}/", 1)[1] + ".bin"
    good = (root / (prefix.rsplit("/tokenize/", 1)[1] + ".bin")).read_bytes()
    bad = bytes([good[0] ^ 1]) + good[1:]  # one bit, same size
    s3_server.client().put_object(Bucket=BUCKET, Key=key, Body=bad)
    with caplog.at_level(logging.WARNING, logger="tokenmill.loader.cache"):
        with pytest.raises(DataError, match=f"{prefix}.bin: sha256 .* differs"):
            next(iter(loader))
    loader.close()
    if workers == 0:
        assert any("fetching it again" in r.getMessage() for r in caplog.records)  # retried once, then refused
    sha = hashlib.sha256(good).hexdigest()
    # Nothing of it kept under its name. A worker stopped by close() in the middle of fetching it too (a loaded
    # machine) may leave its `.tmp`, which the next reservation removes (test_a_loader_killed_mid_download_*).
    kept = [p.name for p in (tmp_path / "cache").iterdir() if p.name.startswith(sha[:40])]
    assert [name for name in kept if not name.endswith(".tmp")] == [], kept


def test_a_corrupt_head_is_refused_naming_it(data, tmp_path, s3_server):
    """The head of a .bin read alone (for the sample running into it) is checked against its own recorded sha256:
    a bit flipped in it is refused, naming the object and the range."""
    from tokenmill.loader.streams import HEAD

    path, total, root = data
    loader = TokenLoader(URI, cache_dir=tmp_path / "cache", cache_bytes=total // 4, shuffle_block="file",
                         shuffle_window=2, **KW)  # a window a quarter of the data holds
    stream = loader.streams[0]
    assert stream.heads and (stream.name, 1, HEAD) in loader.fetcher.objects
    prefix = stream.files[1].prefix
    good = (root / (prefix.rsplit("/tokenize/", 1)[1] + ".bin")).read_bytes()
    loader.fetcher.hold([(stream, 1, HEAD)])  # the good head: read and checked
    assert stream.read(int(stream._starts[1]), 8).tolist() == np.frombuffer(good[:16], np.uint16).tolist()
    loader.fetcher.release_all()
    loader.close()
    s3_server.client().put_object(Bucket=BUCKET, Key=prefix.split(f"s3://{BUCKET}/", 1)[1] + ".bin",
                                  Body=bytes([good[3] ^ 4]).join([good[:3], good[4:]]))
    loader = TokenLoader(URI, cache_dir=tmp_path / "cache2", cache_bytes=total // 4, shuffle_block="file",
                         shuffle_window=2, **KW)  # a window a quarter of the data holds
    with pytest.raises(DataError, match=rf"{prefix}\.bin \(its first 64 bytes\): sha256 .* differs"):
        loader.fetcher.hold([(loader.streams[0], 1, HEAD)])
    loader.close()


KILLED = """
import sys
from tokenmill.loader import TokenLoader, remote
remote.READ_BYTES = 64
loader = TokenLoader(sys.argv[1], cache_dir=sys.argv[2], cache_bytes=int(sys.argv[3]), seq_len=16,
                     global_batch_size=2, micro_batch_size=1, seed=3)
print("started", flush=True)
for batch in loader:
    pass
"""


def test_a_loader_killed_mid_download_leaves_no_half_file(data, tmp_path):
    path, total, _ = data
    cache, bound = tmp_path / "cache", total // 4
    proc = subprocess.Popen([sys.executable, "-c", KILLED, URI, str(cache), str(bound)], stdout=subprocess.PIPE,
                            env=os.environ.copy())
    assert proc.stdout.readline().strip() == b"started"
    deadline = time.monotonic() + 30
    while not any(p.name.endswith(".tmp") for p in cache.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)  # mid-download: a .tmp is in the folder
    proc.wait()
    leftovers = [p for p in cache.iterdir() if p.name.endswith(".tmp")]
    assert leftovers
    # Every complete name is a whole, checked file: its name is its recorded sha256.
    for p in cache.glob("*.bin"):
        assert hashlib.sha256(p.read_bytes()).hexdigest()[:40] == p.name[:40]
    assert folder_bytes(cache) <= bound
    reference = _reference(path, 200)
    loader = TokenLoader(URI, cache_dir=cache, cache_bytes=bound, **KW)
    it = iter(loader)
    assert [next(it)["input_ids"].tolist() for _ in range(200)] == reference
    loader.close()
    assert not any(p.exists() for p in leftovers)  # the dead process's downloads were cleared to make room
    assert folder_bytes(cache) <= bound


@pytest.mark.parametrize("which", ["object", "cache", "marker"])
def test_a_lock_the_parent_holds_when_it_forks_stays_the_parents(tmp_path, which, monkeypatch):
    """A DataLoader worker forked while a thread of the parent holds a lock (a prefetch downloading an object, a
    reservation under cache.lock, a file being hashed for its verified marker) gets the lock once the parent lets go:
    the child's copy of the descriptor must not keep the lock alive (it did: the worker then waited forever in
    ``TokenCache.pin``, or in ``verify_file`` for the marker of a file its parent was hashing)."""
    from tokenmill.loader import verify
    from tokenmill.loader.cache import TokenCache
    from tokenmill.loader.locks import EXCLUSIVE, SHARED, flock

    cache = TokenCache(tmp_path / "cache", 1 << 20, store=None)
    data = tmp_path / "x.bin"
    data.write_bytes(b"tokens")
    check = verify.Check(data, hashlib.sha256(b"tokens").hexdigest())
    if which == "object":
        held = cache._lock_file("x")
        flock(held, EXCLUSIVE)
        let_go = held.close
    elif which == "cache":
        held = cache._cache_lock()
        held.__enter__()
        let_go = lambda: held.__exit__(None, None, None)  # noqa: E731
    else:  # a thread of the parent inside verify_file, holding the marker's lock while it hashes
        hashing, finish = paused_hashing(monkeypatch)
        thread = threading.Thread(target=verify.verify_file, args=(check, tmp_path / "markers"))
        thread.start()
        hashing.wait(20)

        def let_go():
            # The child must open the marker's lock before the parent's thread removes it (then it waits on the
            # parent's lock, which its own inherited copy kept alive): half a second to get there.
            time.sleep(0.5)
            finish.set()
            thread.join()
    pid = os.fork()
    if pid == 0:  # the worker: waits for the lock as pin (shared), a reservation or verify_file does, then exits
        code = 1
        try:
            if which == "object":
                with cache._lock_file("x") as mine:
                    code = 0 if flock(mine, SHARED) else 1
            elif which == "cache":
                with cache._cache_lock():
                    code = 0
            else:
                code = 0 if verify.verify_file(check, tmp_path / "markers") is False else 1  # the parent's marker
        finally:
            os._exit(code)
    let_go()  # the parent's download (or hash) is done
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the forked process still waits for a lock its parent released")


class _SlowStore:
    """A store whose every download takes a while (so that two processes find an object absent together)."""

    def __init__(self, data: bytes):
        self.data = data

    def download(self, uri, begin, cancelled=None, length=None):
        out = begin(len(self.data))
        time.sleep(0.05)
        out.write(self.data)
        return hashlib.sha256(self.data).hexdigest(), len(self.data), out


def test_a_process_that_finds_a_file_absent_never_waits_for_anothers_pin(tmp_path):
    """Two processes (two caches on one folder: their own lock descriptors, as two DataLoader workers have) pin the
    same absent object at the same moment; the one that fetches it keeps it pinned. The other must get it too, not
    wait for that pin's release (it did, blocked in flock for LOCK_EX, while the first waited for its batch)."""
    from tokenmill.loader.cache import CachedObject, TokenCache

    data = b"tokens" * 1000
    for trial in range(12):
        obj = CachedObject(f"s3://b/{trial}.bin", f"{trial:064d}.bin", hashlib.sha256(data).hexdigest(), len(data))
        caches = [TokenCache(tmp_path / "cache", 1 << 20, _SlowStore(data)) for _ in range(2)]
        start, done = threading.Barrier(2), []

        def pin(cache):
            start.wait()
            cache.pin(obj)  # and keep it pinned
            done.append(cache)

        threads = [threading.Thread(target=pin, args=(c,), daemon=True) for c in caches]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert len(done) == 2, f"trial {trial}: a pin waits for the other's"
        assert (tmp_path / "cache" / obj.name).read_bytes() == data
        for c in caches:
            c.release_all()
