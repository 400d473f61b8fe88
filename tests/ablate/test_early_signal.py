"""The early signal: how often the verdict at an earlier point was the final one (synthetic verdict curves, then a
synthetic ablation folder through the report and its table), and independent seeds for a variant (`seed_offsets`)."""

from __future__ import annotations

import pytest

from tests.ablate.test_early import _config, _fake_train, _jobs
from tokenmill.ablate import stats
from tokenmill.ablate.stats import BETTER, SAME, WORSE


def test_agreement_counts_the_pairs_whose_early_verdict_is_the_final_one():
    fractions = [0.125, 0.25, 0.375, 0.5, 0.75, 1.0]
    verdicts = {
        "heldout/bpb": {"junk": [SAME, WORSE, WORSE, WORSE, WORSE, WORSE],  # worse from 25%
                        "same": [SAME] * 6,
                        "late": [SAME, SAME, SAME, SAME, SAME, WORSE]},  # worse at the end only
        "arc/acc": {"junk": [BETTER, SAME, SAME, SAME, SAME, SAME],
                    "same": [SAME] * 6,
                    "late": [SAME] * 6},
    }
    out = stats.agreement(fractions, verdicts)
    bpb = out["by_metric"]["heldout/bpb"]
    assert [(r["fraction"], r["point"], r["agree"], r["of"]) for r in bpb["at"]] == [(0.25, 1, 2, 3), (0.5, 3, 2, 3)]
    assert bpb["every_point"] == {"agree": 4 + 5 + 0, "of": 15, "agreement": 9 / 15}
    acc = out["by_metric"]["arc/acc"]
    assert [r["agree"] for r in acc["at"]] == [3, 3] and acc["every_point"]["agree"] == 14
    assert [(r["agree"], r["of"]) for r in out["at"]] == [(5, 6), (5, 6)]  # over every metric
    assert out["every_point"] == {"agree": 23, "of": 30, "agreement": 23 / 30}


def test_a_fraction_before_the_first_point_has_no_point_and_a_short_curve_is_refused():
    out = stats.agreement([0.4, 1.0], {"m": {"v": [WORSE, WORSE]}})
    assert out["at"][0] == {"fraction": 0.25, "point": None, "point_fraction": None, "agree": 0, "of": 0,
                            "agreement": None}
    assert out["at"][1]["point"] == 0 and out["at"][1]["agreement"] == 1.0
    with pytest.raises(ValueError, match="3 verdicts for 2"):
        stats.agreement([0.5, 1.0], {"m": {"v": [SAME, SAME, SAME]}})


def test_the_report_states_the_early_agreement_and_the_cli_prints_it(tmp_path, monkeypatch, capsys):
    """junk is worse from the first point, same never differs, late is worse at the last point only: at 25% and
    50% of the budget two of three verdicts are the final ones, 6 of the 9 earlier (pair, point)."""
    from tokenmill.ablate import proxy
    from tokenmill.ablate.commands import print_report
    from tokenmill.ablate.report import build_report, report_bytes

    monkeypatch.setattr(proxy, "train_proxy", _fake_train)
    config = _config(tmp_path, ("junk", "same", "late"), apply=False)
    proxy.run_proxies(config, _jobs(config), lambda s: None)
    report = build_report(config.output_dir)
    signal = report["early_signal"]
    assert signal["variants"] == ["junk", "same", "late"] and signal["left_out_stopped"] == []
    assert [(r["fraction"], r["step"], r["tokens"], r["agree"], r["of"]) for r in signal["at"]] == \
        [(0.25, 10, 2560, 2, 3), (0.5, 20, 5120, 2, 3)]
    assert signal["every_point"] == {"agree": 6, "of": 9, "agreement": 0.666667}
    late = report["comparisons"]["late"]["heldout/clean/bpb"]["points"]
    assert [p["agrees_with_final"] for p in late] == [False, False, False, True]
    assert report_bytes(build_report(config.output_dir)) == report_bytes(report)
    print_report(report)
    printed = capsys.readouterr().out
    assert "early signal" in printed and "at 25% (step 10)" in printed and "2/3 (67%)" in printed
    assert "6/9 (67%)" in printed


def test_a_variant_stopped_early_is_left_out_of_the_agreement(tmp_path, monkeypatch):
    from tokenmill.ablate import ablation
    from tokenmill.ablate.report import build_report

    monkeypatch.setattr(ablation, "train_proxy", _fake_train)
    config = _config(tmp_path)  # junk stopped at step 20
    ablation.run_proxies_in_rounds(config, _jobs(config), lambda s: None)
    signal = build_report(config.output_dir)["early_signal"]
    assert signal["variants"] == ["same"] and signal["left_out_stopped"] == ["junk"]
    assert [(r["agree"], r["of"]) for r in signal["at"]] == [(1, 1), (1, 1)]


def test_seed_offsets_give_a_variant_its_own_training_seeds_in_the_base_folders_names(tmp_path):
    from tokenmill.ablate.ablation import jobs
    from tokenmill.ablate.config import AblateConfig

    base = {"base": "base.yaml", "output": str(tmp_path / "ablation"), "variants": {"same": {}},
            "base_dir": str(tmp_path)}
    config = AblateConfig.model_validate({**base, "seed_offsets": {"same": 1000}})
    got = {(j.variant, j.seed): (j.train["seed"], j.output.name) for j in jobs(config, {})}
    assert got == {("base", 0): (0, "seed-0"), ("base", 1): (1, "seed-1"), ("base", 2): (2, "seed-2"),
                   ("same", 0): (1000, "seed-0"), ("same", 1): (1001, "seed-1"), ("same", 2): (1002, "seed-2")}
    with pytest.raises(ValueError, match="seed_offsets: 'other' is not a variant"):
        AblateConfig.model_validate({**base, "seed_offsets": {"other": 1}})
