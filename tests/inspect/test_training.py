"""Training helpers and the training plot on a real tiny run that rolls back once."""

from __future__ import annotations

import io

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.inspect import event_documents, loss_segments, training_events, training_metrics


def test_metrics_split_train_valid_and_spikes(train_output):
    m = training_metrics(train_output)
    assert all("loss" in r for r in m["train"]) and all("valid_loss" in r for r in m["valid"])
    assert [r["step"] for r in m["valid"]] == [10, 20]
    assert len(m["spikes"]) == 1 and m["spikes"][0] in m["train"]
    assert {"lr", "grad_norm", "tokens", "tokens_per_s"} <= set(m["train"][0])


def test_loss_segments_cut_where_a_rollback_repeats_steps(train_output):
    m = training_metrics(train_output)
    rollback, = training_events(train_output, "rollback")
    segments = loss_segments(m["train"])
    assert len(segments) == 2
    assert segments[0][-1]["step"] == rollback["step"]
    assert segments[1][0]["step"] == rollback["resumed_from_step"] + 1 and segments[1][-1]["step"] == 24
    assert sum(map(len, segments)) == len(m["train"])
    for seg in segments:
        assert [r["step"] for r in seg] == list(range(seg[0]["step"], seg[-1]["step"] + 1))


def test_events_and_the_documents_of_a_rollback(train_output):
    events = training_events(train_output)
    rollback = [e for e in events if e["action"] == "rollback"]
    assert len(rollback) == 1 and rollback[0]["lr_scale"] == 0.5
    assert training_events(train_output, "skip") == []
    docs = event_documents(train_output)
    assert "poison-0" in {d["id"] for d in docs}
    assert all(d["step"] == rollback[0]["step"] and d["batch"] == rollback[0]["batch"] for d in docs)


def test_the_output_folder_comes_from_the_environment_and_must_hold_metrics(train_output, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENMILL_TRAIN", str(train_output))
    assert training_metrics()["train"]
    with pytest.raises(TokenmillError, match="metrics.jsonl"):
        training_metrics(tmp_path)


def test_training_curves_draw_every_panel_and_mark_the_rollback(train_output):
    pytest.importorskip("matplotlib", reason="plots need matplotlib (the notebooks extra)")
    from tokenmill.inspect.plots import training_curves

    fig = training_curves(train_output)
    loss, lr, grad = fig.axes
    assert [a.get_ylabel() for a in fig.axes] == ["loss", "lr", "grad_norm"]
    labels = [line.get_label() for line in loss.get_lines()]
    assert {"train", "valid", "spike", "rollback"} <= set(labels)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    assert buf.getvalue().startswith(b"\x89PNG")
