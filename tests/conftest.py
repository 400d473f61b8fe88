"""Shared fixtures: one real Ray cluster for the session, small corpora, the shared real-data samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# One line at the end of every session: fault trials, faults injected and hostile cases checked.
pytest_plugins = ["tests.faults.counts"]

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

# ---- how `make test` spreads the files over its processes (pytest-xdist, --dist loadfile) ----------------------

SHARED_SCOPES = {
    "tests/inspect/": "tests/inspect/", "tests/faults/": "tests/faults/",
    "tests/test_golden_manifests.py": "the demo", "tests/fasttext/test_model_file.py": "the demo",
}
"""Files (or folders) that share session fixtures (a demo run, a training run, the fault suites' reference run, the
`demo_corpus` below), by the unit they make: a unit's files go to one process, so each fixture
is built once, not once in every process."""

SECONDS = {
    "tests/faults/": 84, "tests/inspect/": 75, "the demo": 61, "tests/hostile/test_hostile.py": 52,
    "tests/stages/clean/test_classifier_top_fraction.py": 45, "tests/stages/test_tokenize_stage.py": 43,
    "tests/tokenize/test_fast_engine.py": 37, "tests/train/test_trainer.py": 36, "tests/pipeline/test_run_folder.py": 35,
    "tests/cluster/test_storage_uri.py": 30, "tests/objectstore/test_loader_cache_trust.py": 28, "tests/test_cli.py": 28,
    "tests/train/test_disk_full.py": 27, "tests/objectstore/test_sources_s3.py": 27, "tests/pipeline/test_runner.py": 27,
    "tests/pipeline/test_runs_gc.py": 25, "tests/manifests/test_show.py": 24, "tests/text/test_quality.py": 23,
    "tests/manifests/test_diff.py": 22, "tests/demo/test_demo_corpus.py": 21,
    "tests/objectstore/test_loader_streaming.py": 21, "tests/loader/test_loader.py": 19,
    # `make test-all`'s long tests (-m long): the longest of them
    "tests/conformance/test_real_data.py": 75,
}
"""Rough seconds per file on two busy cores (from `--durations=0` of `make test`, 3 processes), for the files that take
longest: they start first, so that no long file starts last while the others have nothing left. Any other file
counts 0.05 s per test."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, but the files of a SHARED_SCOPES unit go together, and the longest unit left goes first."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return next((unit for prefix, unit in SHARED_SCOPES.items() if path.startswith(prefix)), path)

        def _assign_work_unit(self, node) -> None:
            longest = max(self.workqueue, key=lambda scope: SECONDS.get(scope, 0.05 * len(self.workqueue[scope])))
            self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

    return Scheduling(config, log)


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


@pytest.fixture(autouse=True, scope="session")
def _dataloader_shutdown_wait():
    """torch's DataLoader, stopping its iterator's workers, waits up to 5 s for each to see the stop before it
    terminates it. From the garbage collector (an iterator in a reference cycle, freed inside whichever test comes
    next) the stop never reaches them and the full 5 s pass: 10 s added to an unrelated test for each two-worker
    loader. Here the wait is 0.5 s; workers that see the stop end at once, as before."""
    from torch.utils.data import _utils, dataloader

    shutdown = dataloader._MultiProcessingDataLoaderIter._shutdown_workers

    def shutdown_waiting_less(self) -> None:
        wait, _utils.MP_STATUS_CHECK_INTERVAL = _utils.MP_STATUS_CHECK_INTERVAL, 0.5
        try:
            shutdown(self)
        finally:
            _utils.MP_STATUS_CHECK_INTERVAL = wait

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dataloader._MultiProcessingDataLoaderIter, "_shutdown_workers", shutdown_waiting_less)
        yield


@pytest.fixture(autouse=True)
def _stop_dataloader_workers():
    """The worker processes of every torch DataLoader iterator a test starts (a TokenLoader's with num_workers too)
    are stopped when the test ends, not later by the garbage collector in another test (see above). Iterators that
    module or session fixtures start are left alone."""
    import weakref

    from torch.utils.data import dataloader

    started: weakref.WeakSet = weakref.WeakSet()
    init = dataloader._MultiProcessingDataLoaderIter.__init__

    def recording(self, *args, **kwargs):
        started.add(self)
        init(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dataloader._MultiProcessingDataLoaderIter, "__init__", recording)
        yield
    for iterator in list(started):
        if getattr(iterator, "_shutdown", True) is False:  # started and not yet stopped
            iterator._shutdown_workers()


@pytest.fixture(scope="session")
def demo_corpus(tmp_path_factory) -> Path:
    """The demo corpus exactly as `tokenmill demo-data DIR` writes it for `make demo` (seed 1234, 600 documents per
    source, its quality classifier trained), written once per process for tests/test_golden_manifests.py (which runs
    the demo into DIR/run, as `make demo` does) and tests/fasttext/test_model_file.py (its model). Read only otherwise.
    (tests/test_demo_run.py makes its own at 120 documents per source: at 600 its clean survival is 0.898, under the
    0.90 it asserts.)"""
    from tokenmill.demo import write_demo_corpus

    root = tmp_path_factory.mktemp("demo")
    write_demo_corpus(root, seed=1234)
    return root


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


@pytest.fixture(scope="session")
def _moto(tmp_path_factory):
    """One moto server process for the session (starting one, and its first request, cost about a second each)."""
    from tests.s3server import S3Server

    server = S3Server(log=tmp_path_factory.mktemp("moto") / "moto.log").start()
    yield server
    server.stop()


@pytest.fixture
def s3_server(_moto, monkeypatch, tmp_path):
    """A moto S3 server on 127.0.0.1 for one test, its endpoint and credentials in this process's environment: the
    session's, emptied (moto's reset: no bucket or object of an earlier test) and started again if a test stopped it,
    its request log from this test on at `tmp_path / "moto.log"`, as a server of the test's own would be."""
    import urllib.request

    if _moto.proc is None or _moto.proc.poll() is not None:
        _moto.start()
    urllib.request.urlopen(urllib.request.Request(f"{_moto.endpoint}/moto-api/reset", method="POST"), timeout=30).read()
    _moto.log.write_bytes(b"")  # the server appends to it: what follows is this test's
    (tmp_path / "moto.log").symlink_to(_moto.log)
    for key, value in _moto.env().items():
        monkeypatch.setenv(key, value)
    yield _moto
