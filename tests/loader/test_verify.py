"""Token files are checked against the sha256 in tokens.json before a batch uses them (tokenmill.loader.verify)."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tokenmill.errors import ConfigError
from tokenmill.loader import DataError, TokenLoader
from tokenmill import markers as marker_folder
from tokenmill.loader import verify
from tests.loader.tokens import labelled_docs, write_dataset

SEQ = 16


@pytest.fixture
def data(tmp_path) -> Path:
    rng = np.random.default_rng(0)
    return write_dataset(tmp_path / "d", {"alpha": labelled_docs(80, rng), "beta": labelled_docs(40, rng, 500)},
                         files_per_source=3)


def _flip_two_bytes(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[10] ^= 0x01
    raw[len(raw) // 2] ^= 0x40
    path.write_bytes(bytes(raw))  # same size: token counts and the .idx still agree


def _epoch(loader: TokenLoader) -> int:
    return sum(s.samples(SEQ) for s in loader.streams) // loader.global_batch_size + 1


@pytest.mark.parametrize("workers", [0, 2])
def test_two_flipped_bytes_stop_the_first_batch_that_reads_the_file(data, workers):
    bad = data.parent / "train" / "alpha.0001.bin"
    _flip_two_bytes(bad)
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=4, num_workers=workers)
    it = iter(loader)
    with pytest.raises(DataError, match=r"train/alpha\.0001\.bin: sha256 .* differs from .* recorded in tokens\.json"):
        for _ in range(_epoch(loader)):
            next(it)
    # Direct access (validation batches, attribution of a whole batch) is refused alike.
    with pytest.raises(DataError, match=r"alpha\.0001\.bin"):
        for k in range(_epoch(loader)):
            loader.global_batch(k)


def test_a_batch_is_handed_out_only_once_its_files_are_verified(data, monkeypatch):
    """The background thread is slowed to 0.25 s per file: the first batch comes long before it is done, and every
    file that batch reads (its .bin and .idx) was hashed first (by the caller, since the thread had not reached
    it)."""
    hashed: list[str] = []
    real = verify.file_sha256

    def slow(path):
        if threading.current_thread().name == "tokenmill-verify":
            time.sleep(0.25)
        digest = real(path)
        hashed.append(Path(path).name)
        return digest

    monkeypatch.setattr(verify, "file_sha256", slow)
    monkeypatch.setenv(marker_folder.VERIFIED_CACHE_ENV, "off")
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=4, seed=3)
    next(iter(loader))
    where = loader.order.locate(np.arange(4))
    used = set()
    for s, sample in zip(where.stream.tolist(), where.sample.tolist()):
        stream = loader.streams[s]
        lo, hi = np.searchsorted(stream._starts, [sample * SEQ, sample * SEQ + SEQ], side="right") - 1
        used |= {stream.files[i].prefix.name + ext for i in range(lo, hi + 1) for ext in (".bin", ".idx")}
    assert used <= set(hashed), (used, hashed)
    assert not loader.verifier.done  # the thread needs 3 s for the twelve files
    loader.verifier.wait()
    assert sorted(hashed) == sorted(p.name for p in (data.parent / "train").glob("*.[bi][id][nx]"))  # each once



def test_close_stops_the_background_thread_before_it_is_done(data, monkeypatch):
    """A daemon thread still hashing when a rank's interpreter exits can abort it: close() ends the thread after the
    file at hand, and a batch asked for afterwards still has its files verified by the caller."""
    real = verify.file_sha256

    def slow(path):
        if threading.current_thread().name == "tokenmill-verify":
            time.sleep(0.3)
        return real(path)

    monkeypatch.setattr(verify, "file_sha256", slow)
    monkeypatch.setenv(marker_folder.VERIFIED_CACHE_ENV, "off")
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=4, seed=3)
    thread = loader.verifier._thread
    loader.close()
    assert not thread.is_alive() and not loader.verifier.done  # stopped early, not finished
    assert next(iter(loader))["input_ids"].shape[0] == 4


def test_a_process_that_never_closes_its_loader_stops_the_thread_at_exit(data):
    """grad_check.py-style callers exit without close(): the thread is stopped by an atexit hook (atexit runs in
    reverse order, so the probe registered first reports after the hook ran)."""
    import subprocess
    import sys

    script = f"""
import atexit, threading, time
from tokenmill.loader import TokenLoader, verify
real = verify.file_sha256
def slow(path):
    if threading.current_thread().name == "tokenmill-verify":
        time.sleep(0.3)
    return real(path)
verify.file_sha256 = slow
state = {{}}
atexit.register(lambda: print("alive", state["t"].is_alive(), flush=True))
loader = TokenLoader([{str(data)!r}], seq_len={SEQ}, global_batch_size=4, seed=3)
state["t"] = loader.verifier._thread
"""
    env = {**os.environ, marker_folder.VERIFIED_CACHE_ENV: "off"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "alive False" in done.stdout, done.stdout

def test_verified_files_are_remembered_per_node_until_they_change(data, tmp_path, monkeypatch):
    monkeypatch.setenv(marker_folder.VERIFIED_CACHE_ENV, str(tmp_path / "cache"))
    calls = []
    real = verify.file_sha256
    monkeypatch.setattr(verify, "file_sha256", lambda path: calls.append(Path(path).name) or real(path))
    TokenLoader([data], seq_len=SEQ, global_batch_size=4).verifier.wait()
    assert len(calls) == 12  # three files per source, each .bin and .idx
    markers = [json.loads(p.read_text()) for p in (tmp_path / "cache").iterdir()]
    assert len(markers) == 12 and all(m["sha256"] and m["bytes"] and m["path"].endswith((".bin", ".idx"))
                                      for m in markers)
    calls.clear()
    TokenLoader([data], seq_len=SEQ, global_batch_size=4).verifier.wait()
    assert calls == []  # the markers of this node
    # Corrupted with the same size, and its mtime put back: its ctime still moved, so it is hashed again.
    bad = data.parent / "train" / "beta.0002.bin"
    st = bad.stat()
    _flip_two_bytes(bad)
    os.utime(bad, ns=(st.st_atime_ns, st.st_mtime_ns))
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=4)
    with pytest.raises(DataError, match=r"beta\.0002\.bin: sha256"):
        loader.verifier.wait()
    assert calls == ["beta.0002.bin"]


def test_ranks_of_one_node_hash_a_file_once(data, tmp_path, monkeypatch):
    """Four loaders at once (the ranks of a node) with one cache: each file is hashed by one of them."""
    monkeypatch.setenv(marker_folder.VERIFIED_CACHE_ENV, str(tmp_path / "cache"))
    calls = []
    real = verify.file_sha256

    def slow(path):
        calls.append(Path(path).name)
        time.sleep(0.05)
        return real(path)

    monkeypatch.setattr(verify, "file_sha256", slow)
    loaders = [TokenLoader([data], seq_len=SEQ, global_batch_size=4, rank=r, world_size=4) for r in range(4)]
    threads = [threading.Thread(target=lambda x=x: next(iter(x))) for x in loaders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x in loaders:
        x.verifier.wait()
    assert sorted(calls) == sorted(set(calls)) and len(calls) == 12  # each .bin and .idx once


UNHASHED = {  # what is left out of the first file's entry: (the edit, the file named first)
    "no sha256 at all": (lambda e: e.pop("sha256"), "alpha.0000.bin"),
    "no .bin sha256": (lambda e: e["sha256"].pop(".bin"), "alpha.0000.bin"),
    "no .idx sha256": (lambda e: e["sha256"].pop(".idx"), "alpha.0000.idx"),  # before: not even a warning
}


@pytest.mark.parametrize("what", UNHASHED)
def test_a_local_file_without_a_recorded_hash_is_refused_unless_allowed(tmp_path, caplog, what):
    """A local index that leaves a .bin or .idx sha256 out (one from someone else can) is refused when the loader
    is built, naming the index and the file, as a remote one is; `allow_unhashed=True` reads it unchecked, with a
    warning naming it; `verify=False` checks no local file, so it asks for no hash."""
    edit, first = UNHASHED[what]
    rng = np.random.default_rng(1)
    path = write_dataset(tmp_path, {"alpha": labelled_docs(20, rng), "beta": labelled_docs(20, rng, 500)},
                         files_per_source=1)
    index = json.loads(path.read_text())
    edit(index["splits"]["train"]["files"][0])
    path.write_text(json.dumps(index))
    with pytest.raises(DataError) as err:
        TokenLoader([path], seq_len=SEQ, global_batch_size=2)
    assert str(err.value).startswith(f"{path}: {tmp_path / 'train' / first}: no sha256 recorded"), str(err.value)
    assert "allow_unhashed" in str(err.value)
    # A stream of weight 0 is never read: its files need no hash.
    next(iter(TokenLoader([path], seq_len=SEQ, global_batch_size=2, weights={"beta": 1.0})))
    with caplog.at_level(logging.WARNING, logger="tokenmill.loader"):
        loader = TokenLoader([path], seq_len=SEQ, global_batch_size=2, allow_unhashed=True)
    assert any(first in r.getMessage() and "read unchecked, as allow_unhashed asks" in r.getMessage()
               for r in caplog.records)
    next(iter(loader))
    loader.close()
    next(iter(TokenLoader([path], seq_len=SEQ, global_batch_size=2, verify=False)))
    with pytest.raises(ConfigError, match="allow_unhashed must be true or false"):
        TokenLoader([path], seq_len=SEQ, global_batch_size=2, allow_unhashed="yes")


def test_a_missing_file_an_unwritable_cache_and_no_cache(data, tmp_path, monkeypatch, caplog):
    """What `verify_file` does without its usual footing: each named, none silently passed."""
    bin_path = data.parent / "train" / "alpha.0000.bin"
    check = verify.Check(bin_path, verify.file_sha256(bin_path))
    gone = verify.Check(data.parent / "train" / "gone.bin", check.sha256)
    with pytest.raises(DataError, match=r"gone\.bin: cannot read it .*tokens\.json lists it"):
        verify.verify_file(gone, tmp_path / "cache")
    # A cache that cannot be made (a file stands in its way): warned, hashed anyway, the hash still compared.
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    with caplog.at_level(logging.WARNING, logger="tokenmill.loader.verify"):
        assert verify.verify_file(check, blocked / "cache") is True
    assert any("not writable" in r.getMessage() for r in caplog.records)
    with pytest.raises(DataError, match=r"alpha\.0000\.bin: sha256"):
        verify.verify_file(verify.Check(bin_path, "0" * 64), blocked / "cache")
    for off in ("off", "0", "none", ""):
        monkeypatch.setenv(marker_folder.VERIFIED_CACHE_ENV, off)
        assert marker_folder.markers_dir() is None
    monkeypatch.setenv(marker_folder.VERIFIED_CACHE_ENV, str(tmp_path / "here"))
    assert marker_folder.markers_dir() == tmp_path / "here"
    monkeypatch.delenv(marker_folder.VERIFIED_CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert marker_folder.markers_dir() == tmp_path / "xdg" / "tokenmill" / "verified"
