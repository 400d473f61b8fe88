"""The `tokenmill` command: errors before any work, a kill -9 of the driver then a rerun, and loopback-only ports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import make_corpus, write_jsonl
from tests.netstat import group_pids, is_loopback, listeners as listeners_of
from tests.pipeline.test_runner import run_into, tree

CLI = [sys.executable, "-m", "tokenmill"]


def tokenmill(*args, **kwargs):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, **kwargs)


def test_bad_config_stops_before_any_work(tmp_path):
    config = make_corpus(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["sources"][1]["fraction"] = 3
    data["stages"]["sample"]["speed"] = "fast"
    config.write_text(yaml.safe_dump(data))
    result = tokenmill("run", str(config))
    assert result.returncode == 2
    assert "sources[1].fraction" in result.stderr and "stages.sample.speed: unknown key" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_validate_and_unknown_stage(tmp_path):
    config = make_corpus(tmp_path)
    result = tokenmill("validate", str(config))
    assert result.returncode == 0 and "6 files" in result.stdout and "ingest -> sample" in result.stdout
    result = tokenmill("run", str(config), "--stage", "dedup")
    assert result.returncode == 2 and "--stage dedup: not a configured stage" in result.stderr


def test_missing_config_file(tmp_path):
    result = tokenmill("run", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2 and "cannot read config" in result.stderr


@pytest.mark.ray
# Both slow (31 s for sample): `make test` kills the driver mid-stage in tests/faults/test_kill_driver.py and checks
# the CLI's Ray listens on the loopback only in tests/test_interrupts.py
@pytest.mark.parametrize("stage", [pytest.param("ingest", marks=pytest.mark.slow),
                                   pytest.param("sample", marks=pytest.mark.slow)])
def test_kill_driver_then_rerun_matches_uninterrupted(ray_cluster, tmp_path, stage):
    config = make_corpus(tmp_path / "c", n_files=6, docs=60)
    data = yaml.safe_load(config.read_text())
    data["ingest"]["docs_per_shard"] = 10
    config.write_text(yaml.safe_dump(data))
    for i in range(6, 12):  # more files: ingest has a task per file
        write_jsonl(tmp_path / "c" / "data" / "en" / f"extra-{i}.jsonl", [{"id": f"x{i}-{j}", "text": f"extra {i} {j}"} for j in range(15)])
    run_into(config, tmp_path / "reference")

    env = {**os.environ, "TOKENMILL_TASK_DELAY_S": "0.25", "PYTHONUNBUFFERED": "1"}
    driver = subprocess.Popen([*CLI, "run", str(config), "--workers", "1"], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    commits = tmp_path / "c" / "out" / stage / "_work" / "commits" / ("read" if stage == "ingest" else "map")
    listeners: set = set()
    try:
        deadline = time.time() + 180
        while time.time() < deadline and len(list(commits.glob("*.json"))) < 3:
            listeners |= listeners_of(group_pids(driver.pid))  # the driver's own: other tests' servers left out
            assert driver.poll() is None, driver.stderr.read().decode()
            time.sleep(0.1)
        listeners |= listeners_of(group_pids(driver.pid))
        os.kill(driver.pid, signal.SIGKILL)  # the driver only; its Ray cluster is left to itself
        driver.wait()
    finally:
        time.sleep(1)
        try:
            os.killpg(driver.pid, signal.SIGKILL)  # then tidy up what the dead driver's cluster left
        except ProcessLookupError:
            pass
    n_committed = len(list(commits.glob("*.json")))
    reference_commits = tmp_path / "reference" / stage / "_work" / "commits" / commits.name
    n_tasks = len(list(reference_commits.glob("*.json")))
    assert 3 <= n_committed < n_tasks, "the kill must land while some tasks are committed and others not"
    assert not (tmp_path / "c" / "out" / stage / "manifest.json").exists()

    public = {(a, p) for a, p in listeners if not is_loopback(a)}
    assert not public, f"Ray listens beyond 127.0.0.1: {sorted(public)}"
    assert any(is_loopback(a) for a, _ in listeners), "saw no Ray listener at all"

    result = tokenmill("run", str(config))
    assert result.returncode == 0, result.stderr
    assert "resumed" in result.stdout
    assert tree(tmp_path / "c" / "out") == tree(tmp_path / "reference")
    manifest = json.loads((tmp_path / "c" / "out" / stage / "manifest.json").read_text())
    assert manifest["run_info"]["tasks_skipped"] == n_committed


@pytest.mark.ray
# --ray-address: `make test-slow` (the fault suite's driver kills join the session's cluster with it in `make test`)
@pytest.mark.parametrize("named_by", [pytest.param("flag", marks=pytest.mark.slow), "RAY_ADDRESS"])
def test_join_an_existing_cluster(ray_cluster, tmp_path, named_by):
    """`--ray-address`, or else Ray's own RAY_ADDRESS (set by `ray job submit` and in a KubeRay head pod): with the
    variable set and no flag, `tokenmill run` used to fail in `ray.init` with a ValueError traceback."""
    import ray

    config = make_corpus(tmp_path)
    address = ray.get_runtime_context().gcs_address
    if named_by == "flag":
        result = tokenmill("run", str(config), "--ray-address", address, "--workers", "2")
    else:
        result = tokenmill("-v", "run", str(config), "--workers", "2", env={**os.environ, "RAY_ADDRESS": address})
        assert f"joining the Ray cluster at {address} (from RAY_ADDRESS)" in result.stderr, result.stderr[-3000:]
    assert result.returncode == 0, result.stderr
    assert ray.is_initialized() and ray.cluster_resources().get("CPU") == 2  # the shared cluster lives on
    assert (tmp_path / "out" / "sample" / "manifest.json").exists()


# ------------------------------------------------------------------------------------------ printed as text, not markup

BOLD = "[bold]x[/bold]"
CLOSE = "[/]"


def test_report_contamination_prints_names_and_texts_as_text(tmp_path, capsys):
    from tokenmill.cli import main

    run = tmp_path / f"run{CLOSE}"
    (run / "decontaminate").mkdir(parents=True)
    evalset = {"items": 2, "n": 8, "checked_ngram": 2, "found": 1, "fraction": 0.5,
               "by_source": {f"{BOLD}src": {"(none)": {"items": 1}}}}
    report = {"evalsets": {f"{BOLD}set": evalset}, "hits": 1,
              "common_ngrams_ignored": [{"documents": 9, "text": f"a common {CLOSE} phrase"}]}
    manifest = {"content": {"report": report, "shards": []}, "run_info": {}}  # read as any manifest is
    (run / "decontaminate" / "manifest.json").write_text(json.dumps(manifest))
    assert main(["report", "contamination", str(run)]) == 0
    out = capsys.readouterr().out
    for literal in (f"{BOLD}set", f"{BOLD}src 1", f"a common {CLOSE} phrase", f"run{CLOSE}"):
        assert literal in out, literal


def test_report_contamination_before_the_stage_ran_names_it(tmp_path, capsys):
    from tokenmill.cli import main

    assert main(["report", "contamination", str(tmp_path)]) == 2
    err = "".join(capsys.readouterr().err.split())  # rich wraps the message
    assert "decontaminate/manifest.jsondoesnotexist:runthedecontaminatestagefirst" in err


def test_run_summary_prints_sources_reasons_and_errors_as_text(tmp_path, capsys):
    from types import SimpleNamespace

    from tokenmill.pipeline.commands import print_summary

    manifest = tmp_path / "manifest.json"
    content = {"drop_table": {f"{BOLD}reason": {f"{CLOSE}src": {"docs": 3, "percent": 1.5}}}, "by_source": {},
               "shards": [{"errors": [f"data/{BOLD}.jsonl:3: not JSON"]}], "report": {"summary": [f"note {CLOSE}"]}}
    manifest.write_text(json.dumps({"content": content}))
    totals = {"docs_in": 10, "docs_out": 7, "bytes_out": 100}
    print_summary([SimpleNamespace(stage="clean", status="ran", tasks_run=1, tasks_skipped=0, totals=totals,
                                   seconds=1.0, manifest=str(manifest))])
    out = capsys.readouterr().out
    for literal in (f"{BOLD}reason", f"{CLOSE}src", f"data/{BOLD}.jsonl:3", f"note {CLOSE}"):
        assert literal in out, literal


def test_inspect_prints_documents_and_names_as_text(monkeypatch, capsys):
    from tokenmill.cli import main
    from tokenmill.inspect import commands

    row = {"id": f"{CLOSE}id", "source": f"{BOLD}src", "subset": CLOSE, "drop_reason": f"{BOLD}why",
           "text": f"a document with {BOLD} and {CLOSE} in it", "lang": "en"}
    monkeypatch.setattr(commands, "samples", lambda *args, **kwargs: [row])
    assert main(["inspect", "RUN", "--dropped", "-n", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 random dropped documents of clean" in out
    for literal in (f"{CLOSE}id", f"{BOLD}src/{CLOSE}", f"{BOLD}why", f"a document with {BOLD} and {CLOSE} in it"):
        assert literal in out, literal


# ------------------------------------------------------------ a core-only install, a closed pipe (issue 31 items 9, 11)

CORE_ONLY = """
import sys

# What `pip install tokenmill` without the pipeline extra lacks (numpy, torch, pydantic, pyyaml and rich import):
# None in sys.modules is how Python marks a module absent, so `import` raises ModuleNotFoundError and
# `importlib.util.find_spec` answers None, as for a module not installed (torch probes zstandard so).
for name in ("pyarrow", "ray", "polars", "zstandard", "tokenizers", "datatrove", "fasttext", "ftfy", "xxhash"):
    sys.modules[name] = None
from tokenmill.cli import main

sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.long  # a virtual environment with the core dependencies only: about 13 s, `make test-all`
def test_a_core_only_install_shows_help_and_names_the_extra_to_install(tmp_path):
    """Without the pipeline extra, `tokenmill --help` failed with `ModuleNotFoundError: rich`. Now help works, the
    core's commands (`train`, `train doctor`) run, and a command that needs the extra says which one to install, in
    one line (checked by hand in a real venv with only the core's dependencies installed: the same lines)."""
    def core_only(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", CORE_ONLY, *args], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path)

    result = core_only("--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage: tokenmill" in result.stdout and "train" in result.stdout
    for command in (["validate", "x.yaml"], ["run", "x.yaml"], ["runs", "du", "run"]):
        result = core_only(*command)
        assert result.returncode == 2, (command, result.stderr[-2000:])
        assert "Traceback" not in result.stderr, result.stderr[-2000:]
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: tokenmill {command[0]} needs tokenmill's 'pipeline' "
                                                       f"extra"), lines
        assert "pip install 'tokenmill[pipeline]'" in lines[0]

    from tests.train.runs import config, metrics, write_config, write_tokens

    tokens = write_tokens(tmp_path / "tokens")  # written here, with pyarrow; training reads no Parquet
    train = write_config(tmp_path / "train.yaml", config(tokens, tmp_path / "out", steps=4, checkpoint_every=2,
                                                         eval_every=2))
    result = core_only("train", str(train))
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "out" / "checkpoints").is_dir()
    assert [r["step"] for r in metrics(tmp_path / "out") if "loss" in r] == [1, 2, 3, 4]
    result = core_only("train", "doctor", str(tmp_path / "out"), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["faults"] == []


def test_a_missing_module_outside_any_extra_is_still_a_traceback(monkeypatch):
    """Only a module of an extra gets the install line: a missing module of tokenmill itself is a bug to show."""
    from tokenmill import cli

    assert cli._missing_extra(ModuleNotFoundError("No module named 'tokenmill.nothing'", name="tokenmill.nothing")) \
        is None
    line = cli._missing_extra(ModuleNotFoundError("No module named 'ray'", name="ray"))
    assert line is not None and "pip install 'tokenmill[pipeline]'" in line


def _into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """`tokenmill ARGS | head` where head has already exited: stdout is a pipe whose reading end is closed."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([*CLI, *args], stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)


def test_output_into_a_closed_pipe_ends_quietly(tmp_path):
    """`tokenmill train doctor RUN --json | head` ended in a BrokenPipeError traceback. Every command's stdout goes
    through one handler in main(): no traceback, exit 141 (128 + SIGPIPE), as a command killed by SIGPIPE."""
    run = tmp_path / "train-run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "loss": 2.0 - i / 10}) + "\n" for i in range(50)))
    config = make_corpus(tmp_path / "corpus")
    for args in (["train", "doctor", str(run), "--json"], ["validate", str(config)]):
        result = _into_a_closed_pipe(*args)
        assert result.returncode == 141, (args, result.stderr[-2000:])
        assert result.stderr == "", (args, result.stderr[-2000:])
