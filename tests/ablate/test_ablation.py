"""A whole ablation on a tiny generated corpus with a known truth: a variant with 30% planted junk loses to the clean
base on held-out loss, a copy of the base under another name shows no difference, shared stages are linked, and a
rerun (or a rerun after a SIGKILL) trains nothing finished and writes the same report bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.ablate.corpus import JUNK_SOURCE, assert_rerun_trains_nothing, write_ablation, write_corpus
from tokenmill.ablate.ablation import run_ablation
from tokenmill.ablate.config import load_ablate_config
from tokenmill.ablate.stats import SAME, WORSE

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def ablation(tmp_path_factory, ray_cluster):
    root = tmp_path_factory.mktemp("ablate")
    write_corpus(root, clean_docs=300)
    path = write_ablation(root, {"junk": {"sources+": [JUNK_SOURCE]}, "same": {}})
    result = run_ablation(load_ablate_config(path))
    report_path = root / "ablation" / "report.json"
    return root, path, result, json.loads(report_path.read_text()), report_path.read_bytes()


def test_planted_junk_loses_on_heldout_loss_with_the_interval_excluding_zero(ablation):
    _, _, result, report, _ = ablation
    assert result["trained_now"] == 9 and result["found_finished"] == 0
    junk = report["comparisons"]["junk"]["heldout/clean/bpb"]
    assert junk["verdict"] == WORSE and junk["points"][-1]["low"] > 0, junk["points"][-1]
    assert junk["held_from"]["fraction_of_budget"] <= 0.5, junk["held_from"]
    # the report's early signal: at 50% of the budget (step 20) both verdicts, junk's and same's, are the final ones
    signal = report["early_signal"]["by_metric"]["heldout/clean/bpb"]["at"]
    assert [(r["step"], r["agree"], r["of"]) for r in signal][1] == (20, 2, 2), signal
    assert junk["points"][1]["agrees_with_final"]
    assert report["variants"]["junk"]["metrics"]["heldout/clean/bpb"][-1]["mean"] > \
        report["variants"]["base"]["metrics"]["heldout/clean/bpb"][-1]["mean"]


def test_a_copy_of_the_base_under_another_name_shows_no_difference(ablation):
    _, _, _, report, _ = ablation
    for metric, c in report["comparisons"]["same"].items():
        assert c["verdict"] == SAME, metric


def test_stages_are_shared_by_link_and_reported(ablation):
    root, _, _, report, _ = ablation
    assert report["variants"]["same"]["pipeline"] == {"stages": ["ingest", "tokenize"], "shared_from": "base",
                                                      "shared": ["ingest", "tokenize"], "recomputed": []}
    assert report["variants"]["junk"]["pipeline"]["recomputed"] == ["ingest", "tokenize"]
    runs = root / "ablation" / "runs"
    a, b = (runs / v / "tokenize" / "tokens.json" for v in ("base", "same"))
    assert os.stat(a).st_ino == os.stat(b).st_ino  # one file, two names: nothing copied
    assert report["compute"]["train_flops"] > 0 and report["variants"]["base"]["compute"]["tokens"] == 3 * 32 * 8 * 40
    assert sum(report["heldout"]["documents"].values()) > 10


def test_rerun_trains_nothing_and_gives_the_same_report_bytes(ablation):
    assert_rerun_trains_nothing(ablation, 9)


def test_a_run_killed_mid_training_resumes_to_the_same_report(ablation):
    """One proxy run's folder removed, then `tokenmill ablate` SIGKILLed after step 25 of its retraining (checkpoint
    at 20); the rerun resumes it from step 20, trains no other run, and writes the report of the uninterrupted run."""
    import shutil

    from tokenmill.train.trainer import KILL_AFTER_STEP_ENV

    root, path, _, _, first = ablation
    shutil.rmtree(root / "ablation" / "proxies" / "junk" / "seed-1")
    env = {**os.environ, KILL_AFTER_STEP_ENV: "25"}
    killed = subprocess.run([sys.executable, "-m", "tokenmill.cli", "ablate", str(path)], capture_output=True,
                            text=True, timeout=300, env=env)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert (root / "ablation" / "proxies" / "junk" / "seed-1" / "evals" / "step_000020.json").is_file()
    assert not (root / "ablation" / "proxies" / "junk" / "seed-1" / "done.json").exists()
    again = run_ablation(load_ablate_config(path))
    assert again["trained_now"] == 1 and again["found_finished"] == 8
    assert (root / "ablation" / "report.json").read_bytes() == first
