"""Ranking a stage's documents by a classifier's score (`tokenmill inspect --sort`), the classifier audit read from the
clean manifest, the documents around a threshold, and the histogram plot; checked against every row read back."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.inspect.test_commands import _parse
from tokenmill.errors import TokenmillError
from tokenmill.inspect import around_threshold, classifier_report, classifier_summary, ranked, score_columns
from tokenmill.inspect.commands import print_samples
from tokenmill.inspect.runs import shard_files

pytestmark = pytest.mark.ray


def _every_row(run) -> list[dict]:
    """Every kept and dropped row of clean with its status, read whole with pyarrow (the reference)."""
    rows = []
    for dropped in (False, True):
        for path in shard_files(run, "clean", dropped):
            for r in pq.read_table(path).to_pylist():
                rows.append({**r, "status": "dropped" if dropped else "kept"})
    return rows


def test_best_and_worst_are_the_extremes_of_kept_and_dropped_together(classifier_run):
    every = _every_row(classifier_run)
    found = ranked(classifier_run, column="hq_score", n=4)
    by_score = sorted(every, key=lambda r: (-r["hq_score"], r["id"]))
    assert [r["id"] for r in found["best"]] == [r["id"] for r in by_score[:4]]
    worst = sorted(every, key=lambda r: (r["hq_score"], r["id"]))
    assert [r["id"] for r in found["worst"]] == [r["id"] for r in worst[:4]]
    truth = {r["id"]: r for r in every}
    for r in found["best"] + found["worst"]:
        assert r["status"] == truth[r["id"]]["status"] and r["drop_reason"] == truth[r["id"]].get("drop_reason")
        assert r["text"] == truth[r["id"]]["text"] and r["hq_score"] == pytest.approx(truth[r["id"]]["hq_score"])
    assert {r["status"] for r in found["best"]} == {"kept"}  # the top scores pass both thresholds
    assert {(r["status"], r["drop_reason"]) for r in found["worst"]} == {("dropped", "low_hq_score")}


def test_a_source_and_a_text_cut(classifier_run):
    found = ranked(classifier_run, column="hq_score", n=3, source="web", chars=10)
    assert {r["source"] for r in found["best"] + found["worst"]} == {"web"}
    assert all(len(r["text"]) <= 10 for r in found["best"])
    with pytest.raises(TokenmillError, match="no document of source 'nope'"):
        ranked(classifier_run, column="hq_score", source="nope")


def test_an_unknown_column_names_the_columns_there_are(classifier_run):
    assert score_columns(classifier_run)[:2] == ["escape_score", "hq_score"]  # `*_score` columns first
    with pytest.raises(TokenmillError, match=r"no score column 'hq'; its numeric columns: escape_score, hq_score"):
        ranked(classifier_run, column="hq")
    with pytest.raises(TokenmillError, match="its numeric columns"):
        ranked(classifier_run, column="text")  # there, but not a number


def test_the_command_prints_best_and_worst_with_status_and_reason(classifier_run, capsys):
    assert print_samples(_parse(["inspect", str(classifier_run), "--sort", "hq_score", "-n", "2"])) == 0
    out = capsys.readouterr().out
    best = ranked(classifier_run, column="hq_score", n=2)
    assert "2 best documents of clean by hq_score" in out and "2 worst documents of clean by hq_score" in out
    for r in best["best"] + best["worst"]:
        assert r["id"] in out
    assert "dropped (low_hq_score)" in out and "kept" in out
    with pytest.raises(TokenmillError, match="numeric columns"):
        print_samples(_parse(["inspect", str(classifier_run), "--sort", "nope_score"]))
    with pytest.raises(TokenmillError, match="leave out --dropped"):
        print_samples(_parse(["inspect", str(classifier_run), "--sort", "hq_score", "--dropped"]))


def test_the_audit_is_the_manifests_per_source(classifier_run):
    report = classifier_report(classifier_run)
    assert set(report) == {"hq"} and set(report["hq"]) == {"prose", "web"}
    assert report["hq"]["prose"]["thresholds"] == {"0.518": 240} and report["hq"]["web"]["thresholds"] == {"0.482": 240}
    rows = {r["source"]: r for r in classifier_summary(classifier_run)}
    every = _every_row(classifier_run)
    for source, threshold in (("prose", 0.518), ("web", 0.482)):
        below = sum(r["source"] == source and r["hq_score"] < threshold for r in every)
        assert rows[source]["dropped"] == below > 0 and rows[source]["thresholds"] == str(threshold)


def test_around_the_threshold_are_the_nearest_on_each_side(classifier_run):
    every = _every_row(classifier_run)
    rows = around_threshold(classifier_run, "hq", n=3)
    for source, t in (("prose", 0.518), ("web", 0.482)):
        mine = [r for r in every if r["source"] == source]
        above = sorted((r for r in mine if r["hq_score"] >= t), key=lambda r: (r["hq_score"], r["id"]))[:3]
        below = sorted((r for r in mine if r["hq_score"] < t), key=lambda r: (-r["hq_score"], r["id"]))[:3]
        got = {side: [r for r in rows if r["source"] == source and r["side"] == side] for side in ("above", "below")}
        assert [r["id"] for r in got["above"]] == [r["id"] for r in above]
        assert [r["id"] for r in got["below"]] == [r["id"] for r in below]
        assert all(r["status"] == "kept" and r["threshold"] == t for r in got["above"])
        assert all(r["drop_reason"] == "low_hq_score" for r in got["below"])
    with pytest.raises(TokenmillError, match="no classifier 'nope'; classifiers: hq"):
        around_threshold(classifier_run, "nope")


def test_a_run_without_a_classifier_has_an_empty_audit(small_run):
    assert classifier_report(small_run) == {} and classifier_summary(small_run) == []
    assert not any(c.endswith("_score") and c not in ("escape_score", "lang_score") for c in score_columns(small_run))


def test_the_histogram_plot_has_a_panel_per_classifier_and_the_thresholds(classifier_run, small_run):
    pytest.importorskip("matplotlib", reason="plots need matplotlib (notebooks extra)")
    from tokenmill.inspect.plots import _bin_counts, score_histograms
    from tokenmill.text.score_histogram import bin_counts

    fig = score_histograms(classifier_run)
    (ax,) = fig.axes
    assert ax.get_xscale() == "logit" and "hq" in ax.get_title()
    dashed = sorted(round(line.get_xdata()[0], 6) for line in ax.lines if line.get_linestyle() == "--")
    assert dashed == [0.482, 0.518]
    assert sorted(t.get_text().split(" ")[0] for t in ax.get_legend().get_texts()) == ["prose", "web"]
    every = _every_row(classifier_run)
    for source, entry in classifier_report(classifier_run)["hq"].items():
        # the manifest's rows back into the bins they came from: the counts the stage made of the scores
        expected = bin_counts(np.array([r["hq_score"] for r in every if r["source"] == source], dtype=np.float32))
        counts = _bin_counts(entry["histogram"])
        assert {f"{k:03d}": int(v) for k, v in enumerate(counts) if v} == expected
    empty = score_histograms(small_run)
    assert [t.get_text() for t in empty.axes[0].texts] == ["no classifier in clean"]
