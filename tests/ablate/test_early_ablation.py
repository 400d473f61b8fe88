"""Early stopping in a whole ablation (the known-truth corpus of test_ablation.py): the variant with 30% planted junk
is stopped before the end and trains no further, the copy of the base is not, the runs trained in rounds equal a run
trained in one go, and a rerun trains nothing and writes the same report bytes."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.ablate.corpus import JUNK_SOURCE, assert_rerun_trains_nothing, write_ablation, write_corpus
from tokenmill.ablate.ablation import jobs, prepare_heldout, run_ablation
from tokenmill.ablate.config import load_ablate_config
from tokenmill.ablate.layout import proxy_dir
from tokenmill.ablate.proxy import DONE, eval_path, train_proxy

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def ablation(tmp_path_factory, ray_cluster):
    root = tmp_path_factory.mktemp("ablate-early")
    write_corpus(root, clean_docs=300)
    path = write_ablation(root, {"junk": {"sources+": [JUNK_SOURCE]}, "same": {}}, early_stop={"patience": 1})
    result = run_ablation(load_ablate_config(path))
    report_path = root / "ablation" / "report.json"
    return root, path, result, json.loads(report_path.read_text()), report_path.read_bytes()


def test_the_junk_variant_is_stopped_early_and_trains_no_further(ablation):
    root, path, result, report, _ = ablation
    config = load_ablate_config(path)
    es = report["early_stop"]
    junk = es["variants"]["junk"]
    assert junk["stopped"] and junk["step"] < 40, junk
    assert junk["saved"]["tokens"] == 3 * (40 - junk["step"]) * 32 * 8 and junk["saved"]["train_flops"] > 0
    assert not es["variants"]["same"]["stopped"] and not es["variants"]["base"]["stopped"]
    for s in config.seeds:
        out = proxy_dir(config, "junk", s)
        done = json.loads((out / DONE).read_text())
        assert done["stopped"]["step"] == junk["step"] and done["steps"] == junk["step"]
        assert not eval_path(out, junk["step"] + 10).exists()
        steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert max(steps) == junk["step"]
    assert result["trained_now"] == 9
    assert report["compute"]["tokens"] == 6 * 40 * 256 + 3 * junk["step"] * 256
    assert report["comparisons"]["junk"]["heldout/clean/bpb"]["verdict"] == "worse"


def test_runs_trained_in_rounds_score_as_a_run_trained_in_one_go(ablation):
    root, path, _, _, _ = ablation
    config = load_ablate_config(path)
    docs, _ = prepare_heldout(config)
    job = jobs(config, docs)[0]  # base, first seed
    alone = root / "alone"
    train_proxy(replace(job, train={**job.train, "output": str(alone)}))
    for p in config.proxy.eval_steps():
        assert eval_path(alone, p).read_bytes() == eval_path(job.output, p).read_bytes(), p


def test_rerun_trains_nothing_and_gives_the_same_report_bytes(ablation):
    assert_rerun_trains_nothing(ablation, 9)


def test_the_notebook_plots_the_curves_and_the_stop(ablation):
    from tests.ablate.notebook import images, run_notebook, text_of

    root, _, _, _, _ = ablation
    outputs = run_notebook(root / "ablation")
    text = text_of(outputs)
    assert images(outputs) == 2  # the one metric's curves, and its comparisons
    assert "junk: step 10" in text or "junk: step 20" in text or "junk: step 30" in text, text
    assert "no mixture block" in text
