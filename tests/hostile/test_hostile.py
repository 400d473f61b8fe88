"""Every hostile case comes to its counted, named outcome (tests/data/hostile/generate.py says which).

One ingest run reads every `ingest` case (one source each); `config` cases must stop at load time before any
output exists; `manifest` cases edit a completed run to point outside it and must be refused. Big cases are also
read alone in a subprocess whose peak RSS is bounded. `--full` sizes run under `-m slow`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.hostile import CHECKED
from tests.hostile.conftest import load_generator
from tokenmill.errors import ConfigError, ManifestError

REPO = Path(__file__).resolve().parents[2]
CASES = load_generator().case_names()
INGEST = [name for name, group, _ in CASES if group == "ingest"]
CONFIG = [name for name, group, _ in CASES if group == "config"]
MANIFEST = [name for name, group, _ in CASES if group == "manifest"]
MEMORY = [name for name, _, memory in CASES if memory]


def test_at_least_30_cases():
    assert len(CASES) >= 30 and len({name for name, _, _ in CASES}) == len(CASES)


# ---------------------------------------------------------------------------------------------------- ingest


def _ingest(out: Path, cases: dict[str, dict], names: list[str]) -> dict:
    from tokenmill.pipeline.config import parse_config
    from tokenmill.pipeline.runner import run_pipeline

    config = parse_config({"output": "run", "seed": 11, "ingest": {"docs_per_shard": 1000},
                           "sources": [cases[n]["source"] for n in names]}, out)
    run_pipeline(config, workers=2)
    return json.loads((out / "run" / "ingest" / "manifest.json").read_text())


@pytest.fixture(scope="module")
def ingest_run(ray_cluster, hostile_corpus):
    out, cases = hostile_corpus
    return out, cases, _ingest(out, cases, INGEST)


def check_counted(out: Path, case: dict, manifest: dict) -> None:
    """Kept and dropped counts as expected, every file shown, every drop kept in dropped/ with its reason and
    named (file and line) among the manifest's errors."""
    name, expect = case["name"], case["expect"]
    content = manifest["content"]
    tally = content["by_source"][name]
    assert tally["docs_out"] == expect["kept"], (name, tally)
    assert tally["drops"] == expect["drops"], (name, tally)
    assert tally["docs_in"] == expect["kept"] + sum(expect["drops"].values())
    shards = [s for s in content["shards"] if s["source"] == name]
    assert len({s["input"] for s in shards}) == len(case["files"]), "every file, empty ones too, has a shard entry"
    stage = out / "run" / "ingest"
    assert sum(pq.read_metadata(stage / s["path"]).num_rows for s in shards) == expect["kept"]
    reasons = Counter()
    for s in shards:
        if s["dropped_path"]:
            reasons.update(pq.read_table(stage / s["dropped_path"], columns=["drop_reason"]).column(0).to_pylist())
    assert dict(reasons) == expect["drops"], "every dropped record is in dropped/ with its reason"
    errors = [e for s in shards for e in s["errors"]]
    for message in expect["messages"]:
        assert any(message in e for e in errors), (message, errors)


@pytest.mark.ray
@pytest.mark.parametrize("name", INGEST)
def test_ingest_case(ingest_run, name):
    out, cases, manifest = ingest_run
    check_counted(out, cases[name], manifest)
    CHECKED.append(name)


@pytest.mark.ray
def test_ingest_run_conserves_and_reports_worker_memory(ingest_run):
    _, _, manifest = ingest_run
    totals = manifest["content"]["totals"]
    assert totals["docs_in"] == totals["docs_out"] + sum(totals["drops"].values())
    peak = manifest["run_info"]["phases"]["read"]["max_worker_peak_rss_mb"]
    print(f"ingest of every hostile case: worker peak RSS {peak} MB")


# ---------------------------------------------------------------------------------------------------- memory


def read_alone(out: Path, name: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "tests.hostile.read_case", str(out), name], cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_memory(out: Path, case: dict) -> float:
    got = read_alone(out, case["name"])
    expect = case["expect"]
    assert (got["kept"], got["drops"]) == (expect["kept"], expect["drops"]), got
    assert got["peak_rss_mb"] < case["memory"]["max_rss_mb"], (case["name"], got["peak_rss_mb"])
    print(f"{case['name']}: peak RSS {got['peak_rss_mb']} MB")
    return got["peak_rss_mb"]


@pytest.mark.parametrize("name", MEMORY)
def test_memory_bounded(hostile_corpus, name):
    out, cases = hostile_corpus
    check_memory(out, cases[name])
    CHECKED.append(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", MEMORY)
def test_memory_bounded_full(hostile_corpus_full, name):
    out, cases = hostile_corpus_full
    check_memory(out, cases[name])
    CHECKED.append(name)


@pytest.mark.slow
@pytest.mark.ray
def test_full_sizes_through_the_pipeline(ray_cluster, hostile_corpus_full):
    out, cases = hostile_corpus_full
    manifest = _ingest(out, cases, MEMORY)
    for name in MEMORY:
        check_counted(out, cases[name], manifest)
        CHECKED.append(name)
    print(f"full sizes: worker peak RSS {manifest['run_info']['phases']['read']['max_worker_peak_rss_mb']} MB")


# ---------------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize("name", CONFIG)
def test_config_case(hostile_corpus, name):
    from tokenmill.cli import main
    from tokenmill.pipeline.config import load_config

    out, cases = hostile_corpus
    case = cases[name]
    path = out / f"{name}.yaml"
    path.write_text(case["yaml"] if "yaml" in case else yaml.safe_dump(case["config"], allow_unicode=True))
    with pytest.raises(ConfigError, match=re.escape(case["expect"]["match"])):
        load_config(path)
    for command in ("validate", "run"):
        assert main([command, str(path)]) == 2
    assert not (out / name / "run").exists(), "nothing written before the config is valid"
    assert not (out / name / "PWNED").exists()
    CHECKED.append(name)


# -------------------------------------------------------------------------------------------------- manifest


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def base_run(ray_cluster, hostile_corpus):
    from tokenmill.pipeline.config import parse_config
    from tokenmill.pipeline.runner import run_pipeline

    out, _ = hostile_corpus
    data = out / "manifest_base" / "data"
    data.mkdir(parents=True)
    (data / "a.jsonl").write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(20)) + "{bad\n")
    raw = {"output": "manifest_runs/base", "sources": [{"name": "s", "format": "jsonl",
                                                       "paths": ["manifest_base/data/*.jsonl"]}],
           "stages": {"sample": {}}}
    run_pipeline(parse_config(raw, out))
    return out, raw


def _edit(run: Path, edit: dict) -> None:
    target = sorted(run.glob(edit["file"]))[0]
    value = json.loads(target.read_text())
    field = edit["field"]
    if field in ("path", "dropped_path"):
        value["content"]["shards"][0][field] = edit["value"]
    elif field == "files.path":
        stage_dir = run / "ingest"
        value["files"][0]["path"] = edit["value"]
        value["files"][0]["bytes"] = os.path.getsize(stage_dir / edit["value"])  # so the size check passes
    elif field == "result.path":
        value["result"]["shards"][0]["path"] = edit["value"]
    target.write_text(json.dumps(value))
    if edit["file"].startswith("ingest/_work"):
        (run / "ingest" / "manifest.json").unlink()  # so the rerun reuses the edited record


@pytest.mark.ray
@pytest.mark.parametrize("name", MANIFEST)
def test_manifest_case(base_run, hostile_corpus, name):
    from tokenmill.pipeline.config import parse_config
    from tokenmill.pipeline.runner import run_pipeline

    out, raw = base_run
    case = hostile_corpus[1][name]
    run = out / "manifest_runs" / name
    shutil.copytree(out / "manifest_runs" / "base", run, symlinks=True)
    _edit(run, case["edit"])
    outside = _snapshot(out / "manifest_outside")
    before = _snapshot(run)
    config = parse_config({**raw, "output": f"manifest_runs/{name}"}, out)
    with pytest.raises(ManifestError, match=re.escape(case["expect"]["match"])):
        run_pipeline(config)
    assert _snapshot(out / "manifest_outside") == outside, "nothing outside the run folder was written"
    after = _snapshot(run)
    new = set(after) - set(before)
    assert all(p.startswith(("_logs/", "_lock/")) for p in new), new  # a log record and the run lock
    assert not any("secret" in p for p in after if p.startswith(("ingest/shards", "sample/"))), after
    CHECKED.append(name)
