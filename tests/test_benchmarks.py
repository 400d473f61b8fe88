"""Smoke run of `make bench`: every benchmark in benchmarks/ run by benchmarks/run_all.py at quick size, exactly as
its docstring documents it, must exit 0, print JSON and report at least one ratio (or be skipped for a stated
reason: ../shared/data absent, or scipy missing for dedup_quality). No timing asserts.

The quick runs take about two minutes in all (scale.py, ingest_sample.py and dedup_scale.py alone 40, 20 and 10 s):
they are `slow` (`make test-slow`, and `make bench-quick` runs the same). In `make test` every script still starts
(`--help`) with benchmarks/ as sys.path[0], and no script in benchmarks/ may shadow a standard-library or installed
module.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"


def _load_runner():
    spec = importlib.util.spec_from_file_location("tokenmill_bench_run_all", BENCH / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


run_all = _load_runner()
NAMES = [b.name for b in run_all.BENCHMARKS]


def run_quick(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([sys.executable, str(BENCH / "run_all.py"), "--size", "quick", "--dir", str(tmp_path), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    path = tmp_path / "quick" / "summary.json"
    assert path.exists(), proc.stderr[-3000:]
    return proc, json.loads(path.read_text())


def test_every_script_has_an_entry():
    """A new benchmark script not in the runner's list would never run in `make bench`."""
    # Not ratio benchmarks, run by hand: gpu_check.py is `make gpu-check` (it needs a CUDA device), rank_detector.py
    # a matrix of multi-rank training runs (hours on two cores; resumable), dedup_task_memory.py a probe of another
    # benchmark's finished run (dedup_web.py's). And dedup_incremental.py, a ratio benchmark of three ingest + dedup
    # runs (minutes at its 400 MB default), run by hand as its docstring says until run_all.py lists it, and
    # subdoc_scale.py, a probe of the subdoc stage's cost and memory at two sizes (no baseline to be a ratio of)
    scripts = {p.name for p in BENCH.glob("*.py")} - {"run_all.py", "gpu_check.py", "rank_detector.py",
                                                      "dedup_task_memory.py", "dedup_incremental.py",
                                                      "subdoc_scale.py"}
    assert scripts == {b.script for b in run_all.BENCHMARKS}


def test_gpu_check_without_a_gpu_exits_0_saying_so(tmp_path):
    """`make gpu-check` on a machine with no CUDA device (CI, this one): exit 0, one line saying why nothing ran."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: `make gpu-check` runs the check itself")
    proc = subprocess.run([sys.executable, str(BENCH / "gpu_check.py"), "--out", str(tmp_path / "gpu")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no CUDA device" in proc.stdout and not (tmp_path / "gpu").exists()


def test_no_script_shadows_a_module():
    """A script's folder is sys.path[0] for every script there: benchmarks/tokenize.py once broke `inspect` for all."""
    installed = set(metadata.packages_distributions())
    for path in BENCH.glob("*.py"):
        assert path.stem not in sys.stdlib_module_names, f"{path.name} shadows the standard library's {path.stem}"
        assert path.stem not in installed, f"{path.name} shadows the installed package {path.stem}"


@pytest.mark.parametrize("name", NAMES)
def test_every_script_starts(name):
    script = next(b.path for b in run_all.BENCHMARKS if b.name == name)
    proc = subprocess.run([sys.executable, str(script), "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "usage:" in proc.stdout


@pytest.mark.slow  # about two minutes for all at quick size: `make test-slow` and `make bench-quick`
@pytest.mark.parametrize("name", NAMES)
def test_benchmark_runs_at_quick_size(name, tmp_path):
    proc, summary = run_quick(tmp_path, "--only", name)
    rows = {n: r for n, r in summary["benchmarks"].items() if n == name or n.startswith(f"{name}[")}
    assert rows, summary
    for row_name, row in rows.items():
        if row["status"] == "skipped":
            pytest.skip(f"{row_name}: {row['reason']}")
        assert row["status"] == "ok", f"{row_name}: {row.get('reason')}\n{row.get('stderr_tail', '')}"
        assert row["exit_code"] == 0 and row["json"] is not None
        assert row["ratios"], f"{row_name} reported no ratio"
        assert all(isinstance(v, (int, float)) for v in row["ratios"].values())
    assert proc.returncode == 0, proc.stderr[-3000:]
    for row_name in rows:  # the table names every row
        assert row_name in proc.stdout


def test_runner_fails_naming_a_broken_benchmark(tmp_path, monkeypatch, capsys):
    """A crash, no JSON and JSON without a ratio are failed rows and exit 1; a stated skip is not a failure."""
    scripts = {
        "crashes": "raise SystemExit('boom')",
        "silent": "print('no json here')",
        "no_ratio": "import json; print(json.dumps({'docs_per_s': 5}))",
        "skips": "import json; print(json.dumps({'skipped': 'no shared data'}))",
        "fine": "import json; print(json.dumps({'ratios': {'ours_vs_theirs': 2.5}}))",
    }
    benches = []
    for name, code in scripts.items():
        (tmp_path / f"{name}.py").write_text(code + "\n")
        benches.append(run_all.Benchmark(name, str(tmp_path / f"{name}.py"), takes_dir=False))
    monkeypatch.setattr(run_all, "BENCHMARKS", benches)
    assert run_all.main(["--size", "quick", "--dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    summary = json.loads((tmp_path / "out" / "quick" / "summary.json").read_text())
    status = {n: r["status"] for n, r in summary["benchmarks"].items()}
    assert status == {"crashes": "failed", "silent": "failed", "no_ratio": "failed", "skips": "skipped", "fine": "ok"}
    assert summary["failed"] == ["crashes", "silent", "no_ratio"]
    assert "FAILED: crashes, silent, no_ratio" in err
    assert summary["benchmarks"]["fine"]["ratios"] == {"ratios.ours_vs_theirs": 2.5}
    assert "boom" in summary["benchmarks"]["crashes"]["stderr_tail"]


def test_parse_json_lines_and_ratios():
    out = 'noise\n{"scenario": "a", "x_vs_y": 0.5}\n{"scenario": "b", "x_vs_y": 1}\n'
    value = run_all.parse_json(out)
    assert value == [{"scenario": "a", "x_vs_y": 0.5}, {"scenario": "b", "x_vs_y": 1}]
    assert run_all.find_ratios(value) == {"a.x_vs_y": 0.5, "b.x_vs_y": 1}
    nested = run_all.parse_json('{\n "ratio_a_to_b": {"speed": 3, "ok": true},\n "n": 4\n}\n')
    assert run_all.find_ratios(nested) == {"ratio_a_to_b.speed": 3}
