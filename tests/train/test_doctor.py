"""`tokenmill train doctor RUN`: a run's history of faults from events.jsonl, ranks.jsonl and metrics.jsonl, on records
shaped as the trainer writes them, and on a real two-rank run with a poisoned batch and a corrupted gradient."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tokenmill.cli import main
from tokenmill.train.doctor import classify, diagnose
from tokenmill.train.faults import ENV
from tokenmill.train.fingerprints import Anomaly, anomaly_event
from tokenmill.train.replay import DATA, HARDWARE, TRANSIENT, Decision, Pass
from tests.train.runs import config, env, write_config, write_tokens

T0 = 1795568835.0


def _metrics(steps: int, spike: dict[int, str] | None = None) -> list[dict]:
    rows = []
    for s in range(1, steps + 1):
        row = {"step": s, "batch": s - 1, "loss": 5.5 - 0.01 * s, "lr": 0.003, "grad_norm": 1.0, "tokens": 384 * s,
               "step_s": 0.03, "tokens_per_s": 12000.0, "tflops_per_device": 0.004, "mfu": None, "rollbacks": 0,
               "max_rss_gb": 0.33, "fingerprint_s": 0.002}
        if spike and s in spike:
            row["spike"] = spike[s]
        rows.append(row)
    return rows


def _anomaly(step: int, rank: int, host: str, value: float) -> dict:
    """A ``rank_anomaly`` event as step._record_anomalies writes it: anomaly_event's, with time and batch."""
    flag = Anomaly(step, rank, host, "cuda:1", "grad_norm_local", "outlier", value, 1.93, 60.92, (1.93, value))
    event, = anomaly_event(step, [flag])
    return {"time": T0 + step, **event, "batch": step - 1}


def _rollback(step: int, resumed: int, skipped: list[int], docs: list[tuple[str, str]]) -> dict:
    """A ``rollback`` event as restore.rollback writes it, with the skipped batches' documents."""
    return {"time": T0 + step + 0.5, "step": step, "action": "rollback", "rule": "loss_z",
            "reason": "loss 9.1 is 40.2 sigma above its mean 5.3", "loss": 9.1, "grad_norm": 3.2, "batch": step - 1,
            "resumed_from_step": resumed, "lr_scale": 0.5, "clip_scale": 1.0, "skipped_batches": skipped,
            "rollbacks": 1,
            "documents": [{"sample_in_batch": i, "rank": 0, "source": source, "subset": None, "id": doc,
                           "tokens": [0, 33], "document_tokens": 80, "preview": "1 1 1 1"}
                          for i, (source, doc) in enumerate(docs)]}


def _rank_rows(steps: int, flagged: dict[tuple[int, int], float]) -> list[dict]:
    rows = []
    for s in range(1, steps + 1):
        for r in (0, 1):
            row = {"step": s, "rank": r, "host": f"node-{r}", "device": f"cuda:{r}", "loss": 5.4,
                   "grad_norm_local": flagged.get((s, r), 1.2), "grad_norm_shard": 0.7, "param_checksum": None}
            if (s, r) in flagged:
                row["flagged"] = ["grad_norm_local"]
            rows.append(row)
    return rows


def _write(path: Path, rows: list[dict], tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


@pytest.fixture
def faulty(tmp_path) -> Path:
    """20 steps: rank 1 on node-7 flagged at step 9 (run went on), a loss spike at step 14 rolled back to step 10."""
    run = tmp_path / "run"
    run.mkdir()
    docs = [("web", "poison-0"), ("web", "poison-1"), ("books", "b-3"), ("books", "b-4"), ("web", "w-5"),
            ("web", "w-6"), ("web", "w-7")]
    events = [{"time": T0, "step": 0, "action": "skip", "skipped_batches": [[3, 3]], "by": "command line"},
              {**_anomaly(9, 1, "node-7", 1.55e6)}, _rollback(14, 10, [10, 11, 12, 13], docs)]
    _write(run / "events.jsonl", events)
    _write(run / "ranks.jsonl", _rank_rows(20, {(9, 1): 1.55e6}))
    _write(run / "metrics.jsonl", _metrics(20, {14: "loss 9.1 is 40.2 sigma above its mean 5.3"}))
    return run


def _row(text: str, step: int) -> str:
    """The lines of the table's row for ``step`` (from its first line to the next rule), joined."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"│ {step} "))
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] in "├└"), len(lines))
    return "\n".join(lines[start:end])


def _doctor(capsys, monkeypatch, *args: str) -> str:
    monkeypatch.setenv("COLUMNS", "300")  # rich folds nothing: one fault's cells on one line each
    assert main(["train", "doctor", *args]) == 0
    return capsys.readouterr().out


def test_a_rank_anomaly_and_a_data_rollback_are_named_with_a_summary_first(faulty, capsys, monkeypatch):
    out = _doctor(capsys, monkeypatch, str(faulty))
    lines = out.splitlines()
    assert lines[0] == ("2 faults in 20 steps: rank anomaly on rank 1 (host node-7) at step 9; "
                        "data at step 14 (rolled back to step 10)")
    anomaly = _row(out, 9)
    assert "rank 1 on host node-7 (cuda:1)" in anomaly and "flagged; run went on" in anomaly
    assert "2026-11-25" in out and "grad_norm_local 1.55e+06 vs the others' 1.93" in out
    data = _row(out, 14)
    assert "documents: web/poison-0, web/poison-1, books/b-3, books/b-4, web/w-5 and 2 more" in data
    assert "rolled back to step 10; LR x0.5; batches 10-13 skipped" in data and "batch 13" in data
    assert "loss 9.1 is 40.2 sigma" in data
    assert out.rstrip().endswith("other events: step 0: skip")


def test_json_lists_the_faults_with_their_evidence(faulty, capsys, monkeypatch):
    found = json.loads(_doctor(capsys, monkeypatch, str(faulty), "--json"))
    assert found["steps"] == 20 and found["summary"].startswith("2 faults")
    rank, data = found["faults"]
    assert (rank["step"], rank["kind"], rank["batch"]) == (9, "rank", 8)
    assert rank["ranks"] == [{"rank": 1, "host": "node-7", "device": "cuda:1",
                              "reason": "grad_norm_local 1.55e+06 vs the others' 1.93 (60.9 spreads)",
                              "values": {"loss": 5.4, "grad_norm_local": 1.55e6, "grad_norm_shard": 0.7}}]
    assert (data["step"], data["kind"], data["resumed_from_step"], data["lr_scale"]) == (14, "data", 10, 0.5)
    assert data["skipped_batches"] == [10, 11, 12, 13] and len(data["documents"]) == 7
    assert data["documents"][0]["id"] == "poison-0" and data["events"][0]["action"] == "rollback"
    assert [e["action"] for e in found["notes"]] == ["skip"] and found["missing"] == []


def test_a_clean_run_says_so(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "metrics.jsonl", _metrics(3) + [{"step": 3, "valid_loss": 5.1, "tokens": 1152}])
    _write(run / "ranks.jsonl", _rank_rows(3, {}))
    _write(run / "events.jsonl", [{"time": T0, "step": 2, "action": "resume", "checkpoint": "c/step-2",
                                   "healthy": True, "metrics_rows_dropped": 1, "world_size": 2}])
    out = _doctor(capsys, monkeypatch, str(run))
    assert out.splitlines()[0] == "no faults in 3 steps" and "faults" not in out.splitlines()[1:]
    assert "step 2: resume" in out
    assert json.loads(_doctor(capsys, monkeypatch, str(run), "--json"))["faults"] == []


def test_an_older_run_without_ranks_and_a_killed_run_truncated_mid_line(faulty, capsys, monkeypatch):
    (faulty / "ranks.jsonl").unlink()
    with open(faulty / "events.jsonl", "a") as f:
        f.write(json.dumps(_anomaly(19, 0, "node-0", 9.0))[:70])  # killed while writing the last event
    out = _doctor(capsys, monkeypatch, str(faulty))
    assert out.startswith("2 faults in 20 steps: rank anomaly on rank 1 (host node-7) at step 9;")
    assert "note: no ranks.jsonl" in out and "events.jsonl: 1 line(s) not JSON skipped" in out
    found = diagnose(faulty)
    assert found.missing == ["ranks.jsonl"] and found.unreadable == {"events.jsonl": 1}
    assert "values" not in found.faults[0].ranks[0]  # nothing to read them from
    assert main(["train", "doctor", str(faulty / "nope")]) != 0
    assert "nope: no such folder" in capsys.readouterr().err


def test_the_doctor_and_train_refuse_what_is_not_theirs(tmp_path, capsys):
    def error() -> str:
        return " ".join(capsys.readouterr().err.split())  # the console wraps long lines

    assert main(["train", "doctor", str(tmp_path)]) == 2  # a folder, but no train run's logs in it
    assert "neither events.jsonl nor metrics.jsonl" in error()
    assert main(["train", "doctor"]) == 2
    assert "name the run's output folder" in error()
    assert main(["train", str(tmp_path / "train.yaml"), "extra"]) == 2
    assert "unexpected argument 'extra'" in error()
    assert main(["train", str(tmp_path / "train.yaml"), "--json"]) == 2
    assert "--json is for `train doctor RUN`" in error()


def test_a_spike_with_no_rollback_stopped_the_run(tmp_path):
    """RollbacksExhausted: the spike's metrics row is written, no rollback event follows."""
    metrics = _metrics(8, {8: "loss 12 is 50 sigma above its mean 5"})
    faults, _ = classify([_anomaly(8, 1, "node-1", 50.0)], [], metrics)
    assert [(f.step, f.kind) for f in faults] == [(8, "rank"), (8, "spike")]
    assert faults[1].action.startswith("stopped") and faults[1].batch == 7


def test_a_flag_and_its_rollback_at_one_step_are_one_fault_and_undo_earlier_flags():
    events = [_anomaly(7, 0, "node-0", 9.5), _anomaly(9, 1, "node-1", 1.5e6),
              _rollback(9, 5, [5, 6, 7, 8], [("alpha", "a-1")]), _anomaly(7, 0, "node-0", 9.6)]
    faults, _ = classify(events, [], [])
    assert [(f.step, f.kind, [r["rank"] for r in f.ranks]) for f in faults] == [(7, "rank", [0]), (9, "rank", [1]),
                                                                              (7, "rank", [0])]
    assert faults[0].action == "flagged; run went on (step undone by the rollback at step 9)"
    assert faults[1].resumed_from_step == 5 and faults[1].documents[0]["id"] == "a-1"
    assert faults[2].action == "flagged; run went on"  # step 7 trained again after the rollback, flagged again


def test_an_event_that_classifies_itself_gives_its_kind_without_a_new_reader():
    """The replay writes its verdict with a ``classification``; the reader takes it as the entry's kind, and the
    flag it answers at that step is the same fault."""
    replay = {"time": T0, "step": 12, "action": "replay", "classification": "hardware", "rank": 1, "host": "node-7",
              "device": "cuda:1", "reason": "reproduces only on rank 1 whatever its batch", "decision": "stopped"}
    faults, notes = classify([_anomaly(12, 1, "node-7", 1e6), replay], [], [])
    assert notes == [] and [f.kind for f in faults] == ["hardware"]
    assert faults[0].ranks[0]["host"] == "node-7" and faults[0].action == "stopped" and len(faults[0].events) == 2
    assert classify([{**_anomaly(3, 1, "h", 1e6), "classification": "transient"}], [], [])[0][0].kind == "transient"
    alone, _ = classify([{**replay, "step": 13}], [], [])  # no flag before it (a guard spike): a fault of its own
    assert [(f.step, f.kind, f.ranks[0]["rank"]) for f in alone] == [(13, "hardware", 1)]


def _verdict(step: int, classification: str, rank: int, decision: str) -> dict:
    """A ``replay`` event as replay_step.replay_step writes it: replay.Decision.event's, with time."""
    bad = (5.4, 1.3e6, 0.5)
    original = Pass("original", 5.35, 6.5e5, ((5.3, 1.6, 0.5), bad), (0, 1))
    same = Pass("same", 5.35, 1.2, ((5.3, 1.6, 0.5), (5.4, 1.3, 0.5)), (0, 1)) if classification == TRANSIENT \
        else original
    swapped = None if classification == TRANSIENT else Pass("swapped", 5.35, 6.5e5, ((5.4, 1.3, 0.5), bad), (1, 0))
    reason = {TRANSIENT: "does not reproduce", HARDWARE: "stayed on rank 1", DATA: "followed the batch"}[classification]
    decision_ = Decision(classification, rank, reason, [p for p in (original, same, swapped) if p is not None],
                         partner=None if swapped is None else 0, ranks=[] if classification == DATA else [rank])
    event = decision_.event(step, step - 1, f"rank {rank}: grad_norm_local", decision,
                            ["node-0", "node-7"], ["cuda:0", "cuda:1"])
    return {"time": T0 + step + 0.2, **event}


def test_the_replays_verdicts_are_one_fault_each_with_their_flag_and_rollback(capsys, monkeypatch, tmp_path):
    """A transient at step 7 (the replayed step applied), data at step 9 (with its rollback and documents), a
    hardware fault at step 12 that stopped the run; a probe is a note, not a fault."""
    events = [{"time": T0, "step": 3, "action": "replay_probe", "batch": 2, "reproduces": True, "evidence": []},
              _anomaly(7, 1, "node-7", 1.3e6), _verdict(7, TRANSIENT, 1, "replayed step applied; run went on"),
              _anomaly(9, 1, "node-7", 1.3e6), _verdict(9, DATA, 1, "rolled back and skipped its batches"),
              {**_rollback(9, 5, [5, 6, 7, 8], [("web", "poison-0")]), "rule": "rank_anomaly", "classification": DATA},
              _anomaly(12, 1, "node-7", 1.3e6), _verdict(12, HARDWARE, 1, "stopped; faulty_ranks.json written")]
    faults, notes = classify(events, [], _metrics(11, {9: "rank 1: grad_norm_local"}))
    assert [(f.step, f.kind) for f in faults] == [(7, TRANSIENT), (9, DATA), (12, HARDWARE)]
    assert [e["action"] for e in notes] == ["replay_probe"]
    transient, data, hardware = faults
    assert transient.action.startswith("replayed step applied") and "replay: transient" in transient.what
    assert [r["rank"] for r in transient.ranks] == [1] and len(transient.events) == 2
    assert data.resumed_from_step == 5 and data.documents[0]["id"] == "poison-0" and len(data.events) == 3
    assert data.action.startswith("rolled back to step 5") and "followed the batch" in data.what
    assert hardware.ranks[0]["device"] == "cuda:1" and hardware.action.startswith("stopped")
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "events.jsonl", events)
    _write(run / "metrics.jsonl", _metrics(11, {9: "rank 1: grad_norm_local"}))
    out = _doctor(capsys, monkeypatch, str(run))
    assert out.splitlines()[0] == ("3 faults in 11 steps: transient fault on rank 1 (host node-7) at step 7 "
                                   "(replayed step applied); data at step 9 (rolled back to step 5); hardware fault "
                                   "on rank 1 (host node-7) at step 12 (stopped)")
    assert "transient" in _row(out, 7) and "hardware" in _row(out, 12) and "web/poison-0" in _row(out, 9)
    found = json.loads(_doctor(capsys, monkeypatch, str(run), "--json"))
    assert [f["kind"] for f in found["faults"]] == [TRANSIENT, DATA, HARDWARE]
    assert found["faults"][2]["events"][1]["evidence"][2]["pass"] == "swapped"


@pytest.mark.long  # a two-rank run with two faults injected: about 13 s, `make test-all`
def test_a_real_two_rank_run_with_a_poisoned_batch_and_a_corrupted_gradient(tmp_path, capsys, monkeypatch):
    """Poison on global batch 6 (rank 0's samples, step 7), rank 1's gradient x1e6 once at step 9: the doctor names
    both steps, both ranks with this host, and the documents of the batches the rollback skipped."""
    tokens = write_tokens(tmp_path / "tokens")
    out = tmp_path / "run"
    guard = {"warmup_steps": 8, "ewm_alpha": 0.5, "z_threshold": 12.0, "lr_factor": 0.5}
    cfg = write_config(tmp_path / "train.yaml", config(tokens, out, steps=12, checkpoint_every=5, eval_every=0,
                                                       warmup_steps=0, guard=guard))
    plan = tmp_path / "faults.json"
    plan.write_text(json.dumps({"grad": {"rank": 1, "step": 9, "factor": 1e6},
                                "poison": {"batch": 6, "samples": [0, 5], "tokens": 255}}))
    done = subprocess.run([sys.executable, "-m", "tokenmill.cli", "train", str(cfg), "--nproc", "2"],
                          capture_output=True, text=True, timeout=240, env=env(**{ENV: str(plan)}))
    assert done.returncode == 0, done.stderr[-3000:]
    rollback = next(json.loads(x) for x in (out / "events.jsonl").read_text().splitlines() if '"rollback"' in x)
    host = socket.gethostname()
    text = _doctor(capsys, monkeypatch, str(out))
    assert text.splitlines()[0] == (f"2 faults in 12 steps: rank anomaly on rank 0 (host {host}) at step 7; "
                                    f"rank anomaly on rank 1 (host {host}) at step 9 (rolled back)")
    row9 = _row(text, 9)
    assert f"rank 1 on host {host} (cpu)" in row9 and "rolled back to step 5" in row9
    first = rollback["documents"][0]
    assert f"documents: {first['source']}/{first['id']}" in row9
    row7 = _row(text, 7)
    assert f"rank 0 on host {host} (cpu)" in row7 and "batch 6" in row7
