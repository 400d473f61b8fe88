"""Run-folder integrity (issue 17): one driver per run folder, never touch what is not ours, catch a stale config
or a missing committed file before building on it. `docs/pipeline.md` ("What tokenmill guarantees about a run
folder") points at these tests."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import make_corpus
from tests.faults.harness import kill_group, wait_workers_gone
from tokenmill.cli import main as cli
from tokenmill.errors import ConfigError, TokenmillError
from tokenmill.manifests.show import show_run
from tokenmill.pipeline import faults, runfolder, storage
from tokenmill.pipeline.config import load_config
from tokenmill.pipeline.runner import run_pipeline

REPO = Path(__file__).resolve().parents[2]


def edited(config_path: Path, name: str, edit) -> Path:
    data = yaml.safe_load(config_path.read_text())
    edit(data)
    path = config_path.with_name(f"{name}.yaml")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_into(config_path: Path, output: Path, **kwargs):
    return run_pipeline(load_config(config_path).model_copy(update={"output": str(output)}), **kwargs)


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------ 1. one driver per folder


def _start_driver(config: Path, tmp_path: Path, name: str, delay: float = 0.0) -> subprocess.Popen:
    import ray

    plan = tmp_path / f"plan-{name}.json"
    plan.write_text(json.dumps({"pids": str(tmp_path / f"pids-{name}")}))
    env = {**os.environ, faults.ENV: str(plan), faults.DELAY_ENV: str(delay), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": str(REPO / "src")}
    command = [sys.executable, "-m", "tokenmill", "run", str(config),
               "--ray-address", ray.get_runtime_context().gcs_address]
    return subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=str(tmp_path))


def _wait_until_running(driver: subprocess.Popen, out: Path, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while not (out / "ingest" / "_work" / "key.json").exists():
        if driver.poll() is not None:
            pytest.fail(f"driver ended (exit {driver.returncode}) before it ran: {driver.stderr.read().decode()[-2000:]}")
        assert time.time() < deadline, "the driver did not start the ingest stage"
        time.sleep(0.02)


@pytest.mark.ray
@pytest.mark.slow  # two `tokenmill run` processes with their clusters: about 15 s; the lock with a real driver in
# `make test`: test_lock_of_a_killed_driver_is_taken_over
def test_second_driver_on_one_run_folder_is_refused_naming_the_holder(ray_cluster, tmp_path):
    """Two real `tokenmill run` processes, different configs, one output: the second stops at once, A's output
    is A's alone (before: both exited 0 and B's tokenizer ended up beside A's token files)."""
    corpus = make_corpus(tmp_path / "corpus")
    out = tmp_path / "shared-run"
    config_a = edited(corpus, "a", lambda d: d.__setitem__("output", str(out)))
    config_b = edited(config_a, "b", lambda d: d["sources"][0].__setitem__("fraction", 0.3))
    driver_a = _start_driver(config_a, tmp_path, "a", delay=0.6)  # A runs ~10 s more: B is refused well before
    try:
        _wait_until_running(driver_a, out)
        started = time.time()
        driver_b = _start_driver(config_b, tmp_path, "b")
        _, err_b = driver_b.communicate(timeout=120)
        refused_in = time.time() - started
        err_b = " ".join(err_b.decode().split())
        assert driver_a.poll() is None, "A must still run while B is refused"
        assert driver_b.returncode == 2, err_b
        assert "in use by another tokenmill run" in err_b
        assert f"pid {driver_a.pid}" in err_b and f"host {socket.gethostname()}" in err_b
        assert refused_in < 30, f"B took {refused_in:.0f} s to refuse (it must not wait for A)"
        _, err_a = driver_a.communicate(timeout=300)
        assert driver_a.returncode == 0, err_a.decode()[-2000:]
    finally:
        kill_group(driver_a.pid)
    wait_workers_gone(tmp_path / "pids-a")
    # Everything committed is A's: its fraction in the sample stage's key, and nobody superseded anything.
    key = json.loads((out / "sample" / "_work" / "key.json").read_text())
    assert key["identity"]["fractions"]["en"] == 0.6
    assert not (out / "_superseded").exists()
    locks = sorted((out / "_lock").glob("*.json"))
    assert len(locks) == 1 and json.loads(locks[0].read_text())["released"] is True
    assert json.loads(locks[0].read_text())["pid"] == driver_a.pid


@pytest.mark.long  # a driver killed and its lock waited out: 9 s on 2 loaded cores
@pytest.mark.ray
def test_lock_of_a_killed_driver_is_taken_over(ray_cluster, tmp_path, caplog):
    corpus = make_corpus(tmp_path / "corpus")
    out = tmp_path / "killed-run"
    config = edited(corpus, "k", lambda d: d.__setitem__("output", str(out)))
    driver = _start_driver(config, tmp_path, "k", delay=0.2)
    try:
        _wait_until_running(driver, out)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    finally:
        kill_group(driver.pid)
    wait_workers_gone(tmp_path / "pids-k")
    [held] = (out / "_lock").glob("*.json")
    assert json.loads(held.read_text())["pid"] == driver.pid and "released" not in json.loads(held.read_text())
    caplog.set_level("WARNING", logger="tokenmill.pipeline.runfolder")
    reports = run_pipeline(load_config(config))
    assert [r.stage for r in reports] == ["ingest", "sample"]
    assert f"pid {driver.pid} is not running on this machine" in caplog.text
    [lock] = (out / "_lock").glob("*.json")
    assert lock.name == "00000002.json" and json.loads(lock.read_text())["pid"] == os.getpid()


def _fake_lock(root: Path, generation: int, **fields) -> Path:
    from tokenmill.pipeline.runfolder import _boot_id, _pid_namespace

    info = {"host": socket.gethostname(), "boot_id": _boot_id(), "pid_ns": _pid_namespace(), "pid": os.getpid(),
            "proc_start": None, "started": time.time() - 100, "token": "t", "generation": generation, **fields}
    path = root / "_lock" / f"{generation:08d}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(info))
    return path


def test_lock_staleness_rules(tmp_path, monkeypatch):
    import pyarrow.fs as pafs

    from tokenmill.pipeline.runfolder import RunFolderLocked, RunLock, _proc_start

    fs = pafs.LocalFileSystem()
    # Another machine, fresh heartbeat: held, named.
    root = tmp_path / "other-host"
    _fake_lock(root, 3, host="node-7", boot_id="b", pid=4242)
    with pytest.raises(RunFolderLocked, match="host node-7, pid 4242"):
        RunLock(fs, str(root)).acquire()
    # The same lock with a heartbeat older than the timeout (by the filesystem's clock): taken over.
    old = time.time() - 3600
    os.utime(root / "_lock" / "00000003.json", (old, old))
    lock = RunLock(fs, str(root))
    lock.acquire()
    assert sorted(p.name for p in (root / "_lock").glob("*.json")) == ["00000004.json"]
    lock.release()
    assert json.loads((root / "_lock" / "00000004.json").read_text())["released"] is True
    # This machine, a live pid with its real start time: held.
    root = tmp_path / "live"
    _fake_lock(root, 1, proc_start=_proc_start(os.getpid()))
    with pytest.raises(RunFolderLocked, match=f"pid {os.getpid()}"):
        RunLock(fs, str(root)).acquire()
    # This machine, the pid reused by another process (another start time): stale at once.
    root = tmp_path / "reused"
    _fake_lock(root, 1, proc_start=_proc_start(os.getpid()) + 1)
    lock = RunLock(fs, str(root))
    lock.acquire()
    assert lock.generation == 2
    # A driver whose lock was taken over (a later generation appeared) stops before writing more.
    _fake_lock(root, 3, host="node-9", boot_id="b")
    with pytest.raises(RunFolderLocked, match="no longer holds it.*host node-9"):
        lock.check()
    lock.release()
    assert "released" not in json.loads((root / "_lock" / "00000002.json").read_text())  # not ours to release


def test_a_lock_that_a_full_disk_refuses_leaves_no_temporary_file(tmp_path, monkeypatch):
    """The lock's generation file is written to a temporary name first: a write that fails (a full disk) removes
    it too, as a failed link always did (seen: a 0-byte `_lock/00000001.json.<uuid>.tmp` left for good)."""
    import errno

    import pyarrow.fs as pafs

    from tokenmill.pipeline.runfolder import RunLock

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        RunLock(pafs.LocalFileSystem(), str(tmp_path / "run")).acquire()
    assert list((tmp_path / "run" / "_lock").iterdir()) == []


RACER = textwrap.dedent("""
    import os, sys, time
    import pyarrow.fs as pafs
    from tokenmill.pipeline.runfolder import RunFolderLocked, RunLock
    root, go = sys.argv[1], sys.argv[2]
    while not os.path.exists(go):
        time.sleep(0.001)
    lock = RunLock(pafs.LocalFileSystem(), root)
    try:
        lock.acquire()
    except RunFolderLocked:
        print("refused")
        sys.exit(0)
    print("won", lock.generation)
    sys.stdout.flush()
    time.sleep(3)
    lock.release()
""")


def test_racing_takeover_of_a_stale_lock_has_one_winner(tmp_path):
    root = tmp_path / "race"
    _fake_lock(root, 5, pid=2**22 + 17, proc_start=1)  # this machine, a pid that runs nothing: stale
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(root), str(go)], env=env, stdout=subprocess.PIPE,
                               text=True) for _ in range(6)]
    time.sleep(2.0)  # let every racer import and wait at the line
    go.write_text("")
    results = [r.communicate(timeout=60)[0].strip() for r in racers]
    assert sorted(results) == ["refused"] * 5 + ["won 6"], results


def test_lock_on_an_object_store(monkeypatch):
    import pyarrow.fs as pafs

    from tokenmill.pipeline import runfolder

    monkeypatch.setattr(runfolder, "SETTLE_S", 0.01)
    fs = pafs._MockFileSystem()  # not a LocalFileSystem: the write, settle, read-back path
    first = runfolder.RunLock(fs, "bucket/run")
    first.acquire()
    assert first.generation == 1
    with pytest.raises(runfolder.RunFolderLocked, match=f"pid {os.getpid()}"):
        runfolder.RunLock(fs, "bucket/run").acquire()
    first.release()
    second = runfolder.RunLock(fs, "bucket/run")
    second.acquire()
    assert second.generation == 2
    second.release()


# ---------------------------------------------------------------------------- 2. an output inside a source glob


def test_output_inside_a_source_glob_is_refused_at_validation(tmp_path, capsys):
    root = tmp_path / "lib"
    (root / "books" / "a").mkdir(parents=True)
    pq.write_table(pa.table({"text": ["one book", "another book"]}), root / "books" / "a" / "x.parquet")
    config = {"output": "books/run", "sources": [{"name": "books", "format": "parquet",
                                                  "paths": ["books/**/*.parquet"]}]}
    (root / "inside.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=r"sources\[0\]\.paths\[0\]: 'books/\*\*/\*\.parquet' would match files the "
                                          r"run writes under its output folder .*books/run/"):
        load_config(root / "inside.yaml")
    assert cli(["validate", str(root / "inside.yaml")]) == 2
    assert "read its own output" in " ".join(capsys.readouterr().err.split())
    assert not (root / "books" / "run").exists()
    # A json source reaching the manifests is caught too; an output beside the sources is fine.
    config["sources"][0].update(format="json", paths=["books/**/*.json"])
    (root / "manifests.yaml").write_text(yaml.safe_dump({**config, "output": "books/json-run"}))
    (root / "books" / "a" / "x.json").write_text("[]")
    with pytest.raises(ConfigError, match="would match files the run writes under .*json-run/ingest/manifest.json"):
        load_config(root / "manifests.yaml")
    (root / "beside.yaml").write_text(yaml.safe_dump({**config, "output": "run"}))
    assert load_config(root / "beside.yaml").output == "run"


@pytest.mark.ray
def test_a_source_file_already_under_the_run_folder_is_refused(ray_cluster, tmp_path):
    corpus = make_corpus(tmp_path / "corpus")
    run_into(corpus, tmp_path / "corpus" / "out")
    (tmp_path / "corpus" / "out" / "notes").mkdir()
    (tmp_path / "corpus" / "out" / "notes" / "n.jsonl").write_text('{"text": "x"}\n')
    reach = edited(corpus, "reach", lambda d: d["sources"][1].__setitem__("paths", ["data/zh/*.jsonl", "out/*/*.jsonl"]))
    with pytest.raises(ConfigError, match=r"sources\[1\]\.paths\[1\]: 'out/\*/\*\.jsonl' matches files under its output folder .*notes/n.jsonl"):
        load_config(reach)


# ------------------------------------------- 2b. real paths and real names (issue 31 item 5), on the demo's books


@pytest.fixture(scope="module")
def demo_books(tmp_path_factory) -> Path:
    """The demo corpus's `books_en` source: real Parquet files named `books-0000N.parquet`, written once."""
    from tokenmill.demo import write_demo_corpus

    root = tmp_path_factory.mktemp("demo")
    write_demo_corpus(root, docs_per_source=40, classifier=False)
    return root / "books_en"


def _books(root: Path, demo_books: Path, output: str, pattern: str) -> Path:
    """A copy of the demo's books under `root` and a config reading them (`pattern`) into `output`."""
    import shutil

    shutil.copytree(demo_books, root / "books_en")
    source = {"name": "books_en", "format": "parquet", "paths": [pattern], "text_field": "text",
              "id_field": "doc_id", "language": "en"}
    config = root / "books.yaml"
    config.write_text(yaml.safe_dump({"output": output, "sources": [source], "stages": {"sample": {}}}))
    return config


def _refused_by_validate_and_run(config: Path, capsys, match: str) -> str:
    """`tokenmill validate` and `tokenmill run` both stop with exit 2 and one message (no traceback)."""
    for command in ("validate", "run"):
        assert cli([command, str(config)]) == 2, command
        captured = capsys.readouterr()
        err = " ".join(captured.err.split())
        assert "Traceback" not in err, f"{command}: {err}"
        assert re.search(match, err), f"{command}: {err}"
    return err


@pytest.mark.ray
def test_an_output_symlinked_into_a_source_folder_is_refused(ray_cluster, demo_books, tmp_path, capsys):
    """`output: out`, `out` a symlink to `books_en/runs`: the pattern `books_en/**/*.parquet` reaches the real run
    folder. It passed validation and every later run read the run's own shards (validate counted 6 of them)."""
    root = tmp_path / "demo"
    config = _books(root, demo_books, "out", "books_en/**/*.parquet")
    (root / "books_en" / "runs").mkdir()
    (root / "out").symlink_to("books_en/runs")
    err = _refused_by_validate_and_run(config, capsys, r"sources\[0\]\.paths\[0\]: 'books_en/\*\*/\*\.parquet' "
                                                       r"would match files the run writes under its output folder")
    assert f"{root}/books_en/runs (where {root}/out leads)" in err
    assert list((root / "books_en" / "runs").iterdir()) == []  # nothing written
    # Reached through a symlinked folder inside the source tree (its target inside the folder the pattern starts
    # from, so not refused as a link leading out), the run's files are found as they are matched.
    config = _books(tmp_path / "tree", demo_books, "books_en/run", "books_en/**/in/*/*.parquet")
    shards = tmp_path / "tree" / "books_en" / "run" / "ingest" / "shards"
    shards.mkdir(parents=True)
    (tmp_path / "tree" / "books_en" / "run" / runfolder.ROOT_MARKER).write_text("{}")
    pq.write_table(pa.table({"text": ["a shard"]}), shards / "books_en.x.p00000.parquet")
    (tmp_path / "tree" / "books_en" / "in" / "a").mkdir(parents=True)
    pq.write_table(pa.table({"text": ["a book"], "doc_id": ["1"]}), tmp_path / "tree" / "books_en" / "in" / "a" / "b.parquet")
    (tmp_path / "tree" / "books_en" / "in" / "x").symlink_to("../run/ingest/shards")
    # The example is named by its real path, which shows it is the run's own shard.
    _refused_by_validate_and_run(config, capsys, r"'books_en/\*\*/in/\*/\*\.parquet' matches files under its "
                                                 r"output folder .*books_en/run \(e\.g\. .*books_en/run/ingest/shards/"
                                                 r"books_en\.x\.p00000\.parquet\)")


@pytest.mark.ray
def test_a_pattern_matching_the_names_a_run_writes_is_refused(ray_cluster, demo_books, tmp_path, capsys):
    """`paths: ["books_en/**/*books-*.parquet"]` with `output: books_en/run`: the check used invented names
    (`<source>.00000.parquet`), so it passed, and every later run was refused (InputChangedError). Now the shard
    named in the message is one a real run of these files writes."""
    config = _books(tmp_path / "demo", demo_books, "books_en/run", "books_en/**/*books-*.parquet")
    err = _refused_by_validate_and_run(config, capsys, r"'books_en/\*\*/\*books-\*\.parquet' would match files the "
                                                       r"run writes under its output folder")
    example = re.search(r"\(e\.g\. (\S+)\)", err).group(1)
    assert not (tmp_path / "demo" / "books_en" / "run").exists()
    # The example is a name the run really writes: the same files run into a folder outside the sources.
    reports = run_pipeline(load_config(edited(config, "elsewhere", lambda d: d.__setitem__(
        "output", str(tmp_path / "elsewhere")))))
    assert reports[0].stage == "ingest"
    written = {p.name for p in (tmp_path / "elsewhere" / "ingest" / "shards").iterdir()}
    assert example.startswith(f"{tmp_path}/demo/books_en/run/ingest/shards/")
    assert Path(example).name in written, (example, sorted(written))
    # A pattern that reaches the run folder only where the run writes nothing is not refused.
    (tmp_path / "demo" / "books_en" / "2024" / "raw").mkdir(parents=True)
    (tmp_path / "demo" / "books_en" / "books-00000.parquet").rename(
        tmp_path / "demo" / "books_en" / "2024" / "raw" / "books-00000.parquet")
    fine = edited(config, "fine", lambda d: d["sources"][0].__setitem__("paths", ["books_en/*/raw/*.parquet",
                                                                                   "books_en/*.parquet"]))
    assert load_config(fine).output == "books_en/run"


def test_a_dangling_symlink_as_output_is_one_line(tmp_path, demo_books, capsys):
    """`output` a symlink to a folder that does not exist: pyarrow's raw FileExistsError came out of `run`."""
    root = tmp_path / "demo"
    config = _books(root, demo_books, "out", "books_en/*.parquet")
    (root / "out").symlink_to("missing/run")
    _refused_by_validate_and_run(config, capsys, rf"output: {root}/out is a symlink to missing/run, which does not "
                                                 rf"exist .*create the folder it points to")
    assert not (root / "missing").exists() and (root / "out").is_symlink()


def test_symlinked_folders_of_a_run_folder_are_never_written_through(tmp_path, demo_books, capsys):
    """A stage folder, or `_superseded`, that is a symlink (to another run's folder): tokenmill would write, move and
    delete there without that run's lock. Refused, naming the link; the folder it leads to is left as it was."""
    other = tmp_path / "other"
    (other / "ingest" / "shards").mkdir(parents=True)
    (other / "ingest" / runfolder.STAGE_MARKER).write_text("")
    (other / "ingest" / "shards" / "theirs.parquet").write_bytes(b"not this run's")
    before = files_under(other)
    config = _books(tmp_path / "demo", demo_books, "run", "books_en/*.parquet")
    run = tmp_path / "demo" / "run"
    run.mkdir()
    (run / runfolder.ROOT_MARKER).write_text("{}")
    (run / "ingest").symlink_to(other / "ingest")
    assert cli(["run", str(config)]) == 2
    assert re.search(r"run/ingest is a symlink to .*other/ingest: tokenmill reads, writes, moves and deletes only "
                     r"folders inside the run folder", " ".join(capsys.readouterr().err.split()))
    assert files_under(other) == before
    (run / "ingest").unlink()
    (run / "_superseded").symlink_to(other)
    _refused_by_validate_and_run(config, capsys, r"output: .*run/_superseded is a symlink to")
    assert files_under(other) == before


@pytest.mark.parametrize("inside", ["shards", "dropped", "_work", "_work/tmp"])
def test_a_symlink_inside_a_stage_folder_is_refused_and_what_it_leads_to_is_kept(tmp_path, demo_books, capsys, inside):
    """A link below a real stage folder (its shards, dropped or work folder): pyarrow lists and deletes through it, so
    the runner once removed the linked folder's files as "leftovers no record names". Refused before the stage runs,
    naming the link; the folder it leads to is left as it was."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "books-00000.parquet").write_bytes(b"someone's shard")
    (elsewhere / "note.json.x.tmp").write_bytes(b"someone's temporary file")
    before = files_under(elsewhere)
    config = _books(tmp_path / "demo", demo_books, "run", "books_en/*.parquet")
    run = tmp_path / "demo" / "run"
    stage = run / "ingest"
    stage.mkdir(parents=True)
    (run / runfolder.ROOT_MARKER).write_text("{}")
    (stage / runfolder.STAGE_MARKER).write_text("")
    (stage / inside).parent.mkdir(parents=True, exist_ok=True)
    (stage / inside).symlink_to(elsewhere)
    assert cli(["run", str(config)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert re.search(rf"run/ingest/{inside} is a symlink to .*elsewhere: tokenmill reads, writes, moves and deletes", err), err
    assert files_under(elsewhere) == before


def test_listing_a_run_folder_never_enters_a_symlink(tmp_path):
    """`storage.list_tree`, which every listing of a run folder uses: a link is listed as itself and not followed
    (pyarrow's FileSelector lists the linked folder's files as if they were below)."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "theirs").write_bytes(b"x")
    (tmp_path / "stage" / "shards").mkdir(parents=True)
    (tmp_path / "stage" / "shards" / "ours").write_bytes(b"y")
    (tmp_path / "stage" / "dropped").symlink_to(tmp_path / "elsewhere")
    fs = pafs.LocalFileSystem()
    through = [i.path for i in fs.get_file_info(pafs.FileSelector(str(tmp_path / "stage"), recursive=True))]
    assert str(tmp_path / "stage" / "dropped" / "theirs") in through  # what the runner used to list
    listed = {i.path: i.type for i in storage.list_tree(fs, str(tmp_path / "stage"), recursive=True)}
    assert listed == {str(tmp_path / "stage" / "dropped"): pafs.FileType.Unknown,
                      str(tmp_path / "stage" / "shards"): pafs.FileType.Directory,
                      str(tmp_path / "stage" / "shards" / "ours"): pafs.FileType.File}
    assert storage.list_tree(fs, str(tmp_path / "missing")) == []


# ----------------------------------------------------------------------------------- 3. never touch what is not ours


def test_output_dot_with_an_input_folder_named_like_a_stage_is_refused(ray_cluster, tmp_path):
    """`output: .` beside an input folder `clean/`: before, the input was moved to `_superseded/` and the next run
    failed. Now a non-empty folder that is not a tokenmill run is refused before anything is written."""
    root = tmp_path / "proj"
    (root / "clean").mkdir(parents=True)
    (root / "clean" / "a.jsonl").write_text('{"text": "hello there"}\n')
    config = {"output": ".", "sources": [{"name": "s", "format": "jsonl", "paths": ["clean/*.jsonl"]}],
              "stages": {"sample": {}, "clean": {}}}
    (root / "dot.yaml").write_text(yaml.safe_dump(config))
    before = files_under(root)
    with pytest.raises(ConfigError, match=r"output: .*proj is not empty \(clean, dot.yaml\) and is not a tokenmill run"):
        load_config(root / "dot.yaml")
    assert files_under(root) == before


def test_output_naming_a_file_is_refused_at_validation(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "corpus")
    (tmp_path / "corpus" / "taken").write_text("mine")
    config = edited(corpus, "file", lambda d: d.__setitem__("output", "taken"))
    with pytest.raises(ConfigError, match="output: .*taken exists and is not a folder"):
        load_config(config)
    assert cli(["validate", str(config)]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert (tmp_path / "corpus" / "taken").read_text() == "mine"


def test_which_existing_folders_count_as_a_run_folder(tmp_path):
    """A new or empty folder, one with only tokenmill's root entries, a marked run, or a run made before the markers
    (a stage folder holding `_work/key.json`) may be written; anything else is refused, naming what is there."""
    fs = pafs.LocalFileSystem()

    def problem(folder: Path):
        return runfolder._root_problem(fs, str(folder))

    assert problem(tmp_path / "new") is None
    (tmp_path / "empty").mkdir()
    assert problem(tmp_path / "empty") is None
    (tmp_path / "own" / "_logs").mkdir(parents=True)
    assert problem(tmp_path / "own") is None
    (tmp_path / "legacy" / "sample" / "_work").mkdir(parents=True)
    (tmp_path / "legacy" / "notes.txt").write_text("x")
    assert "is not a tokenmill run folder" in problem(tmp_path / "legacy")
    (tmp_path / "legacy" / "sample" / "_work" / "key.json").write_text("{}")
    assert problem(tmp_path / "legacy") is None
    (tmp_path / "marked" / "dedup").mkdir(parents=True)
    (tmp_path / "marked" / "notes.txt").write_text("x")
    (tmp_path / "marked" / "dedup" / runfolder.STAGE_MARKER).write_text("")
    assert problem(tmp_path / "marked") is None
    (tmp_path / "theirs" / "data").mkdir(parents=True)
    assert "(data) and is not a tokenmill run folder" in problem(tmp_path / "theirs")
    (tmp_path / "theirs" / runfolder.ROOT_MARKER).write_text("{}")
    assert problem(tmp_path / "theirs") is None


@pytest.mark.ray
def test_folders_tokenmill_did_not_make_are_never_moved(ray_cluster, tmp_path):
    corpus = make_corpus(tmp_path / "corpus")
    out = tmp_path / "run"
    run_into(corpus, out)
    # A user's folder named like a stage the config does not have: a recompute leaves it where it is.
    (out / "tokenize").mkdir()
    (out / "tokenize" / "mine.txt").write_text("my notes")
    reports = run_into(edited(corpus, "third", lambda d: d["sources"][0].__setitem__("fraction", 0.3)), out)
    assert reports[1].status == "ran"
    assert (out / "tokenize" / "mine.txt").read_text() == "my notes"
    assert [p.name for p in (out / "_superseded").glob("*/*")] == ["sample"]
    assert (out / ".tokenmill-run").is_file() and (out / "sample" / ".tokenmill-stage").is_file()
    # A user's folder in place of a configured stage: refused before any work, named, left alone.
    only_ingest = tmp_path / "run2"
    run_into(corpus, only_ingest, only="ingest")
    (only_ingest / "sample").mkdir()
    (only_ingest / "sample" / "keep.txt").write_text("mine")
    with pytest.raises(TokenmillError, match=r"run2/sample exists but tokenmill did not make it"):
        run_into(corpus, only_ingest)
    assert files_under(only_ingest / "sample") == {"keep.txt": b"mine"}
    assert not (only_ingest / "_superseded").exists()


# -------------------------------------------------------------------------------- 5. an edited earlier stage


@pytest.mark.ray
def test_stage_run_alone_refuses_an_earlier_stage_made_with_another_config(ray_cluster, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "corpus")
    out = tmp_path / "corpus" / "out"
    run_pipeline(load_config(corpus))
    changed = edited(corpus, "reshard", lambda d: d["ingest"].__setitem__("docs_per_shard", 7))
    before = files_under(out / "sample")
    with pytest.raises(TokenmillError, match=r"earlier stage 'ingest' was made from another config.*"
                                             r"docs_per_shard: 25 -> 7.*tokenmill run CONFIG --stage ingest"):
        run_pipeline(load_config(changed), only="sample")
    assert files_under(out / "sample") == before
    assert cli(["run", str(changed), "--stage", "sample"]) == 2
    capsys.readouterr()

    result = show_run(str(out), config_path=str(changed))
    rows = {r["stage"]: r for r in result["stages"]}
    assert not result["consistent"]
    assert rows["ingest"]["status"] == "config changed" and "docs_per_shard: 25 -> 7" in rows["ingest"]["problems"][-1]
    assert rows["sample"]["status"] == "stale upstream"
    assert cli(["manifest", "show", str(out), "--config", str(changed)]) == 1
    assert show_run(str(out), config_path=str(corpus))["consistent"]


# ------------------------------------------------------------------------------ 6. a deleted committed file


@pytest.mark.ray
def test_deleted_committed_shard_is_reported_and_recomputed(ray_cluster, tmp_path):
    corpus = make_corpus(tmp_path / "corpus")
    out = tmp_path / "corpus" / "out"
    run_pipeline(load_config(corpus))
    shard = sorted((out / "ingest" / "shards").glob("*.parquet"))[3]
    original = shard.read_bytes()
    shard.unlink()

    result = show_run(str(out))
    rows = {r["stage"]: r for r in result["stages"]}
    assert rows["ingest"]["status"] == "files missing" and f"shards/{shard.name} (missing)" in rows["ingest"]["problems"][0]
    assert not result["consistent"]
    with pytest.raises(TokenmillError, match=rf"earlier stage 'ingest' lost committed files \(shards/{shard.name} "
                                             r"\(missing\)\).*--stage ingest"):
        run_pipeline(load_config(corpus), only="sample")

    reports = run_pipeline(load_config(corpus))
    assert [(r.stage, r.status, r.tasks_run) for r in reports] == [("ingest", "resumed", 1), ("sample", "up to date", 0)]
    assert f"shards/{shard.name} (missing)" in reports[0].notes[0]
    assert shard.read_bytes() == original
    assert show_run(str(out))["consistent"]
    # A truncated file counts too: its size differs from the committed one.
    shard.write_bytes(original[:100])
    assert {r["stage"]: r["status"] for r in show_run(str(out))["stages"]}["ingest"] == "files missing"
    assert run_pipeline(load_config(corpus))[0].tasks_run == 1 and shard.read_bytes() == original
