"""Helpers for the streaming-loader tests: a small tokenize output on the test's S3 server, and a watcher of the
cache folder's size on disk."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from tests.loader.tokens import labelled_docs, write_dataset

BUCKET = "tokens"
URI = f"s3://{BUCKET}/run/tokenize/tokens.json"
KW = {"seq_len": 16, "global_batch_size": 2, "micro_batch_size": 1, "seed": 3}


def dataset(root: Path, files_per_source: int = 16) -> tuple[Path, int, int]:
    """Two sources in 2 x ``files_per_source`` token files (each about 1.4 KB with its .idx); (tokens.json, the
    bytes of the .bin and .idx files, the largest file's .bin + .idx)."""
    rng = np.random.default_rng(0)
    # Heads of 64 bytes (32 tokens: a sample's 17 fit): the sample that runs into the next file reads its head. Every
    # file's sha256 recorded, as the tokenize stage records them: each kind of file in the cache has one to check.
    path = write_dataset(root, {"alpha": labelled_docs(300, rng), "beta": labelled_docs(200, rng, base=1000)},
                         files_per_source=files_per_source, head_bytes=64, every_sha256=True)
    sizes: dict[str, int] = {}
    for p in root.rglob("*"):
        if p.suffix in (".bin", ".idx"):
            sizes[str(p.with_suffix(""))] = sizes.get(str(p.with_suffix("")), 0) + p.stat().st_size
    return path, sum(sizes.values()), max(sizes.values())


def paused_hashing(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """`verify.file_sha256` made to stop inside: (hashing, go): `hashing` is set once a hash has begun, which then
    waits for `go` (20 s at most) before it finishes as the real one."""
    from tokenmill.loader import verify

    hashing, go, real = threading.Event(), threading.Event(), verify.file_sha256

    def paused(path):
        hashing.set()
        go.wait(20)
        return real(path)

    monkeypatch.setattr(verify, "file_sha256", paused)
    return hashing, go


def upload(server, root: Path) -> None:
    server.create_bucket(BUCKET)
    server.upload_tree(root, BUCKET, "run/tokenize")


def folder_bytes(folder: Path, allocated: bool = False) -> int:
    """Every file under ``folder``, as the disk sees them now (locks, downloads in progress, objects): their sizes
    (the cache's own measure: a reserved download counts in full), or with ``allocated`` the blocks they hold (a
    sparse or partly written file counts what it holds: what a competitor's cache really takes)."""
    total = 0
    for base, _, files in os.walk(folder):
        for name in files:
            try:
                st = os.lstat(os.path.join(base, name))
            except FileNotFoundError:  # evicted between the listing and the stat
                continue
            total += st.st_blocks * 512 if allocated else st.st_size
    return total


class Watcher:
    """Samples `folder_bytes(folder, allocated)` in a thread every ``interval`` seconds until stopped, and once more
    then; ``peak`` is the most it saw, ``samples`` how many times it looked."""

    def __init__(self, folder: Path, interval: float = 0.002, allocated: bool = False):
        self.folder, self.interval, self.allocated, self.peak, self.samples = folder, interval, allocated, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Watcher":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _sample(self) -> None:
        if self.folder.exists():
            self.peak = max(self.peak, folder_bytes(self.folder, self.allocated))
            self.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)
