"""Shared fixtures: one real Ray cluster for the session, small corpora, the shared real-data samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# One line at the end of every session: fault trials, faults injected and hostile cases checked.
pytest_plugins = ["tests.faults.counts"]

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _default_signal_handlers(request):
    """Every test starts with Python's own SIGINT and SIGTERM handling, as a process started from a shell does.

    Tests share a worker process (pytest-xdist): a handler one test's command or Ray left installed (or SIG_IGN, which
    every child process then inherits) made later Ctrl-C tests in that worker see no interrupt at all. A test that
    leaves either changed is named in a warning (the next test starts clean regardless), so the leak can be found
    and fixed where it is made."""
    import signal
    import threading
    import warnings

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    for signum, handler in defaults.items():
        signal.signal(signum, handler)
    yield
    # None: a handler installed outside Python (Ray's C++ SIGTERM handler).
    left = {signal.Signals(s).name: signal.getsignal(s) for s, handler in defaults.items()
            if signal.getsignal(s) is not handler}
    if left:
        warnings.warn(f"{request.node.nodeid} left signal handlers changed: {left}", stacklevel=1)


@pytest.fixture(autouse=True, scope="session")
def _node_caches(tmp_path_factory):
    """The loader's node caches go to folders of the test session, never to ~/.cache: verified-file markers
    (tokenmill.markers) and the streaming loader's token files (tokenmill.loader)."""
    from tokenmill.loader.loader import TOKEN_CACHE_ENV
    from tokenmill.markers import VERIFIED_CACHE_ENV

    mp = pytest.MonkeyPatch()
    mp.setenv(VERIFIED_CACHE_ENV, str(tmp_path_factory.mktemp("verified")))
    mp.setenv(TOKEN_CACHE_ENV, str(tmp_path_factory.mktemp("token-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster for every test that needs one (starting one costs ~4 s and ~840 MB)."""
    import ray

    from tokenmill.pipeline.ray_cluster import start_local

    if not ray.is_initialized():
        start_local(num_cpus=2)
    yield
    ray.shutdown()


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA} (they sit beside the repository in CI)")
    return SHARED_DATA


def write_jsonl(path: Path, records, raw_lines=()) -> Path:
    """Write records as JSON lines, then any raw byte lines (for planted damage)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for r in records:
            f.write(json.dumps(r).encode() + b"\n")
        for line in raw_lines:
            f.write(line + b"\n")
    return path


def make_corpus(root: Path, n_files: int = 4, docs: int = 60) -> Path:
    """A small two-source corpus (with a few bad records) and its config; returns the config path."""
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    for f in range(n_files):
        recs = [{"id": f"f{f}-{i}", "text": " ".join(words[(i + k) % len(words)] for k in range(5 + i % 7)) + f" {f}.{i}",
                 "tag": f"t{i % 3}"} for i in range(docs)]
        write_jsonl(root / "data" / "en" / f"part-{f}.jsonl", recs, [b"{not json", b'{"id": "x", "text": ""}'])
    for f in range(2):
        write_jsonl(root / "data" / "zh" / f"zh-{f}.jsonl", [{"content": f"\u4e2d\u6587\u6587\u6863 {f} {i}"} for i in range(docs)])
    config = {
        "output": "out",
        "seed": 1234,
        "sources": [
            {"name": "en", "format": "jsonl", "paths": ["data/en/*.jsonl"], "id_field": "id", "subset_field": "tag",
             "fraction": 0.6},
            {"name": "zh", "format": "jsonl", "paths": ["data/zh/*.jsonl"], "text_field": "content", "language": "zh"},
        ],
        "ingest": {"docs_per_shard": 25},
        "stages": {"sample": {}},
    }
    import yaml

    (root / "run.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return root / "run.yaml"


@pytest.fixture
def s3_server(monkeypatch, tmp_path):
    """A moto S3 server on 127.0.0.1 for one test, its endpoint and credentials in this process's environment."""
    from tests.s3server import running

    with running(log=tmp_path / "moto.log") as server:
        for key, value in server.env().items():
            monkeypatch.setenv(key, value)
        yield server
