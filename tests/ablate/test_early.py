"""Early stopping: the rule on synthetic curves, the rounds that apply it (trainer stubbed), the report's section on a
synthetic ablation folder, and training in rounds against training in one go (a real trainer, tiny)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tokenmill.ablate import early
from tokenmill.ablate.config import AblateConfig
from tokenmill.ablate.layout import CONFIG_FILE, PLAN_FILE, proxy_dir
from tokenmill.ablate.proxy import DONE, MODEL_INFO, eval_path


def _iv(mean, half=0.1):
    return (mean, mean - half, mean + half)


def test_a_variant_behind_the_best_for_patience_points_is_stopped_at_the_last_of_them():
    curves = {"base": [_iv(3.0), _iv(2.8), _iv(2.6), _iv(2.5)],
              "junk": [_iv(3.1), _iv(3.1), _iv(3.0), _iv(2.9)],  # behind from index 1 (2.8 + 0.1 < 3.1 - 0.1)
              "near": [_iv(3.05), _iv(2.85), _iv(2.65), _iv(2.55)]}  # overlapping the best: never behind
    assert [early.behind_at({v: c[i] for v, c in curves.items()}, True)["junk"] for i in range(4)] == \
        [False, True, True, True]
    assert early.decide(curves, True, patience=1) == {"junk": 1}
    assert early.decide(curves, True, patience=2) == {"junk": 2}
    assert early.decide(curves, True, patience=4) == {}
    # the base is never stopped, even behind
    flipped = {"base": curves["junk"], "good": curves["base"]}
    assert early.decide(flipped, True, 1, protected=["base"]) == {}
    assert early.decide(flipped, True, 1) == {"base": 1}


def test_higher_is_better_metrics_stop_the_variant_below():
    curves = {"base": [_iv(0.5, 0.01)] * 3, "bad": [_iv(0.3, 0.01)] * 3, "same": [_iv(0.5, 0.01)] * 3}
    assert early.decide(curves, lower_is_better=False, patience=3) == {"bad": 2}


def test_a_run_of_points_behind_must_be_consecutive():
    assert early.stop_index([True, False, True, True, False], 2) == 3
    assert early.stop_index([True, False, True, False], 2) is None


def test_decisions_between_rounds_equal_the_rule_applied_to_the_whole_curves():
    """Random curves: deciding point by point, each stopped variant's curve cut at its stop (as the rounds do), gives
    the same stops as the rule applied afterwards to the uncut curves (it never reads a score past a stop)."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        names = ["base", "a", "b", "c"]
        n = 6
        curves = {v: [_iv(float(m), float(h)) for m, h in zip(rng.normal(0, 1, n).cumsum() * 0.2 + rng.normal(0, 1),
                                                                rng.uniform(0.05, 0.5, n))] for v in names}
        whole = early.decide(curves, True, 2, ["base"])
        stopped: dict[str, int] = {}
        for i in range(n):
            cut = {v: c[:min(i, stopped.get(v, i)) + 1] for v, c in curves.items()}
            for v, k in early.decide(cut, True, 2, ["base"]).items():
                stopped.setdefault(v, k)
        assert stopped == whole


def test_a_stopped_variant_no_longer_sets_the_best():
    # `b` is behind the base at points 0 and 1 and stopped at 1; at point 2 it would be the best, but it is no
    # longer running: `c` is compared with the base, not with `b`.
    curves = {"base": [_iv(2.0), _iv(2.0), _iv(2.0)], "b": [_iv(3.0), _iv(3.0), _iv(0.0)],
              "c": [_iv(2.05), _iv(2.05), _iv(2.05)]}
    assert early.decide(curves, True, 2, ["base"]) == {"b": 1}


def test_the_check_counts_a_stop_that_the_final_verdict_contradicts():
    curves = {"base": [_iv(3.0), _iv(2.9), _iv(2.8)],
              "late": [_iv(3.3), _iv(3.1), _iv(2.5)],  # behind at first, best at the end
              "bad": [_iv(3.4), _iv(3.3), _iv(3.2)]}
    rows = early.check(curves, True, [1, 2], finished=["base", "late", "bad"],
                       final_worse={"base": True, "late": False, "bad": True})
    one, two = (r.to_json([10, 20, 30]) for r in rows)
    assert one["would_stop"] == 2 and one["wrong"] == 1 and one["wrong_fraction"] == 0.5
    assert one["stopped_at"] == {"bad": 10, "late": 10} and one["wrong_variants"] == ["late"]
    assert two["would_stop"] == 1 and two["wrong"] == 0 and two["wrong_fraction"] == 0.0
    none = early.check(curves, True, [3], ["base"], {"base": False})[0].to_json([10, 20, 30])
    assert none["would_stop"] == 0 and none["wrong_fraction"] is None


# A synthetic ablation: per variant a bits-per-byte curve over steps; per seed a small offset.

POINTS = [10, 20, 30, 40]
DOCS = 20


def _bpb(curve, step, seed_index):
    return curve(step) + 0.01 * (seed_index - 1)


def _scores(curve, step, seed_index):
    nbytes = [100 + 10 * d for d in range(DOCS)]
    bpb = _bpb(curve, step, seed_index)
    return {"step": step, "tokens": step * 256, "tasks": {},
            "heldout": {"clean": {"nll": [bpb * math.log(2) * b * (1 + 0.01 * math.sin(d)) for d, b in
                                          enumerate(nbytes)], "bytes": nbytes}}}


CURVES = {
    "base": lambda s: 3.0 - s / 100,
    "junk": lambda s: 3.2 - s / 200,  # behind from the first point
    "same": lambda s: 3.0 - s / 100,
    "late": lambda s: 3.0 - s / 100 + (0.5 if s == 40 else 0.0),  # behind at the last point only
}


def _config(root: Path, variants=("junk", "same"), **early_stop) -> AblateConfig:
    config = AblateConfig.model_validate({
        "base": "base.yaml", "output": str(root / "ablation"), "variants": {v: {} for v in variants},
        "proxy": {"seq_len": 32, "global_batch_size": 8, "tokens": 32 * 8 * 40, "eval_every": 10},
        "early_stop": {"patience": 2, **early_stop}, "bootstrap": 200, "base_dir": str(root)})
    out = config.output_dir
    out.mkdir(parents=True)
    (out / CONFIG_FILE).write_text(json.dumps({**json.loads(config.model_dump_json()), "base_dir": str(root)}))
    plan = {"variants": {v: {"stages": [], "shared_from": None, "shared": [], "recomputed": []} for v in config.names},
            "heldout": {"documents": {"clean": DOCS}, "removed_as_trained": 0}}
    (out / PLAN_FILE).write_text(json.dumps(plan))
    return config


def _fake_train(job):
    """What `train_proxy` leaves, without training: the scores at each point up to `until`, the model's info, and
    at the last step the done marker."""
    out = job.output
    if (out / DONE).is_file():
        return {"trained_now": False}
    until = job.until or POINTS[-1]
    i = job.train["seed_index"]
    trained = False
    for p in POINTS:
        if p <= until and not eval_path(out, p).is_file():
            eval_path(out, p).parent.mkdir(parents=True, exist_ok=True)
            eval_path(out, p).write_text(json.dumps(_scores(CURVES[job.variant], p, i)))
            trained = True
    (out / MODEL_INFO).write_text(json.dumps({"flops_per_token": 1000.0, "params": 1}))
    if until == POINTS[-1]:
        (out / DONE).write_text(json.dumps({"variant": job.variant, "seed": job.seed, "steps": until,
                                            "tokens": until * 256, "flops_per_token": 1000.0, "params": 1}))
    return {"trained_now": trained}


def _jobs(config):
    from tokenmill.ablate.proxy import ProxyJob

    return [ProxyJob(v, s, {"output": str(proxy_dir(config, v, s)), "steps": 40, "seed_index": i}, tuple(POINTS),
                     {}, {}) for v in config.names for i, s in enumerate(config.seeds)]


def test_rounds_stop_the_variant_behind_and_a_rerun_trains_nothing(tmp_path, monkeypatch):
    from tokenmill.ablate import ablation
    from tokenmill.ablate.report import build_report, report_bytes

    monkeypatch.setattr(ablation, "train_proxy", _fake_train)
    config = _config(tmp_path)
    said = []
    counts = ablation.run_proxies_in_rounds(config, _jobs(config), said.append)
    assert counts == {"trained_now": 9, "found_finished": 0}
    assert any("junk: stopped at step 20" in s for s in said), said
    for s in config.seeds:
        junk = proxy_dir(config, "junk", s)
        done = json.loads((junk / DONE).read_text())
        assert done["stopped"] == {"step": 20, "of_steps": 40, "metric": "heldout/clean/bpb", "patience": 2}
        assert done["tokens"] == 20 * 256 and done["flops_per_token"] == 1000.0
        assert not eval_path(junk, 30).exists()  # never trained past its stop
        assert eval_path(proxy_dir(config, "same", s), 40).is_file()
    report = build_report(config.output_dir)
    es = report["early_stop"]
    assert es["variants"]["junk"] == {"stopped": True, "final_verdict_against_best": None, "step": 20,
                                      "tokens": 5120, "fraction_of_budget": 0.5,
                                      "saved": {"tokens": 3 * 5120, "train_flops": 3 * 5120 * 1000.0}}
    assert es["variants"]["same"]["stopped"] is False and "step" not in es["variants"]["same"]
    assert es["saved"]["tokens"] == 3 * 5120
    assert report["compute"]["tokens"] == 3 * 10240 + 3 * 10240 + 3 * 5120
    assert report["variants"]["junk"]["stopped_at"]["step"] == 20
    assert [p["step"] for p in report["comparisons"]["junk"]["heldout/clean/bpb"]["points"]] == [10, 20]
    assert report["comparisons"]["junk"]["heldout/clean/bpb"]["verdict"] == "worse"
    # the runs trained to the end (base, same): identical, neither would be stopped at any patience
    assert [r["would_stop"] for r in es["check"]] == [0, 0] and es["check"][0]["runs_checked"] == 2
    first = report_bytes(report)
    again = ablation.run_proxies_in_rounds(config, _jobs(config), said.append)
    assert again == {"trained_now": 0, "found_finished": 9}
    assert report_bytes(build_report(config.output_dir)) == first


def test_rounds_after_a_kill_between_two_seeds_markers_decide_the_same(tmp_path, monkeypatch):
    from tokenmill.ablate import ablation

    monkeypatch.setattr(ablation, "train_proxy", _fake_train)
    config = _config(tmp_path)
    ablation.run_proxies_in_rounds(config, _jobs(config), lambda s: None)
    (proxy_dir(config, "junk", config.seeds[1]) / DONE).unlink()  # as if killed before its marker
    counts = ablation.run_proxies_in_rounds(config, _jobs(config), lambda s: None)
    assert counts == {"trained_now": 0, "found_finished": 8}
    done = json.loads((proxy_dir(config, "junk", config.seeds[1]) / DONE).read_text())
    assert done["stopped"]["step"] == 20


def test_measure_only_trains_every_run_to_the_end_and_reports_where_the_rule_would_stop(tmp_path, monkeypatch):
    from tokenmill.ablate import proxy
    from tokenmill.ablate.report import build_report

    monkeypatch.setattr(proxy, "train_proxy", _fake_train)
    config = _config(tmp_path, ("junk", "same", "late"), apply=False)
    proxy.run_proxies(config, _jobs(config), lambda s: None)
    es = build_report(config.output_dir)["early_stop"]
    assert "step" not in es["variants"]["late"]  # behind at the last point only: a stop there saves nothing
    assert es["apply"] is False
    junk = es["variants"]["junk"]
    assert junk["stopped"] is False and junk["step"] == 20 and junk["final_verdict_against_best"] == "worse"
    assert junk["saved"]["tokens"] == 3 * 5120
    check = {r["patience"]: r for r in es["check"]}
    assert check[2]["would_stop"] == 1 and check[2]["wrong"] == 0 and check[2]["wrong_fraction"] == 0.0
    assert check[1]["stopped_at"] == {"junk": 10} and check[1]["runs_checked"] == 4


def test_early_stop_config_is_checked(tmp_path):
    from tests.ablate.corpus import write_ablation, write_corpus
    from tokenmill.ablate.config import load_ablate_config
    from tokenmill.ablate.validate import problems
    from tokenmill.errors import ConfigError

    write_corpus(tmp_path, clean_docs=20)
    bad = load_ablate_config(write_ablation(tmp_path, {"same": {}}, early_stop={"metric": "heldout/web/bpb"}))
    assert any(p.startswith("early_stop.metric: 'heldout/web/bpb' is not scored") for p in problems(bad))
    good = load_ablate_config(write_ablation(tmp_path, {"same": {}}, early_stop={"metric": "heldout/clean/bpb"}))
    assert problems(good) == []
    with pytest.raises(ConfigError, match="patience"):
        load_ablate_config(write_ablation(tmp_path, {"same": {}}, early_stop={"patience": 0}))


@pytest.mark.slow  # three trainer starts, ~8 s
def test_training_in_rounds_gives_the_losses_of_one_go(tmp_path):
    """The same proxy trained to step 6 in two rounds (each a new trainer, the second resuming from the first's
    checkpoint) and in one go: the same loss at every step; a round leaves no done marker; a round already scored
    trains nothing."""
    from dataclasses import replace

    from tests.train.runs import losses, write_tokens
    from tokenmill.ablate.proxy import ProxyJob, is_done, train_proxy

    tokens = write_tokens(tmp_path / "data")

    def job(name):
        train = {"data": str(tokens), "output": str(tmp_path / name), "model": "opt-tiny", "seq_len": 32,
                 "global_batch_size": 8, "steps": 6, "lr": 3e-3, "warmup_steps": 2, "checkpoint_every": 3,
                 "keep_checkpoints": 1, "eval_every": 0, "log_every": 10 ** 9, "seed": 3,
                 "loader": {"num_workers": 0}, "dropout": 0.0}
        return ProxyJob("v", 3, train, (3, 6), {}, {})

    whole = train_proxy(job("whole"))
    assert whole["trained_now"] and whole["steps"] == 6
    assert train_proxy(replace(job("rounds"), until=3)) == {"variant": "v", "seed": 3, "steps": 3, "trained_now": True}
    assert not is_done(tmp_path / "rounds")
    assert train_proxy(replace(job("rounds"), until=3))["trained_now"] is False  # scored there already
    last = train_proxy(replace(job("rounds"), until=6))
    assert last["steps"] == 6 and is_done(tmp_path / "rounds")
    assert losses(tmp_path / "rounds") == losses(tmp_path / "whole") and len(losses(tmp_path / "whole")) == 6
    assert json.loads((tmp_path / "rounds" / "config.json").read_text())["steps"] == 6  # the whole run's config
