"""A train run's history of faults, read from its events.jsonl, ranks.jsonl and metrics.jsonl (`tokenmill train doctor`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tokenmill.loader.batches import merge_ranges
from tokenmill.train.fingerprints import METRICS
from tokenmill.train.metrics import EVENTS_JSONL, METRICS_JSONL, RANKS_JSONL, JsonLines
from tokenmill.train.replay import DATA, HARDWARE, TRANSIENT

# The kinds of fault an entry has: "rank" (flagged, not replayed), "spike" (stopped the run), and a replay's verdict,
# "data", "hardware" or "transient", which an event's ``classification`` gives its entry. A rollback with no replay
# before it is "data" too (the trainer without replay treats every spike as bad data); "hang", the watchdog's stop.
RANK, SPIKE, HANG = "rank", "spike", "hang"
KINDS = (DATA, HARDWARE, TRANSIENT, RANK, SPIKE, HANG)
FAULT_ACTIONS = ("rank_anomaly", "replay", "rollback", "hang")  # events.jsonl actions that are (part of) a fault
NOTE_ACTIONS = ("resume", "skip", "data_change", "replay_probe")  # the run's history, not faults


@dataclass
class Fault:
    """One incident: what happened at which step, on which ranks or in which documents, and what the trainer did."""

    step: int
    kind: str
    what: str
    action: str
    time: float | None = None
    batch: int | None = None
    ranks: list[dict[str, Any]] = field(default_factory=list)  # rank, host, device, reason, values (ranks.jsonl)
    documents: list[dict[str, Any]] = field(default_factory=list)  # the skipped batches' documents (rollback)
    resumed_from_step: int | None = None
    skipped_batches: list[int] = field(default_factory=list)
    lr_scale: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)  # the evidence: the events.jsonl records, as written
    named: list[int] | None = None  # the ranks a replay's verdict names (its suspect); None: no verdict names any

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Diagnosis:
    """What the doctor found in a run folder: faults in the order they happened, the other events, what it skipped."""

    run: str
    steps: int
    faults: list[Fault]
    notes: list[dict[str, Any]]
    missing: list[str]  # files absent (an older run has no ranks.jsonl)
    unreadable: dict[str, int]  # lines that are not JSON per file (a killed run's truncated last line)

    def summary(self) -> str:
        """One line: "2 faults: 1 data (rolled back), 1 rank anomaly on rank 1 (host h)", or that there were none."""
        if not self.faults:
            return f"no faults in {self.steps} steps"
        parts = []
        for f in self.faults:
            # The ranks a verdict names, when one does (a NaN on one rank reaches every shard: the others were
            # flagged too, but the replay's suspect is the one); else the ranks flagged
            who = ", ".join(f"rank {r['rank']} (host {r.get('host')})" for r in f.ranks
                            if f.named is None or r["rank"] in f.named)
            if f.kind == RANK:
                parts.append(f"rank anomaly on {who} at step {f.step}" + (" (rolled back)" if f.resumed_from_step
                                                                          is not None else ""))
            elif f.kind in (HARDWARE, TRANSIENT) and who:
                parts.append(f"{f.kind} fault on {who} at step {f.step} ({f.action.split(';')[0]})")
            elif f.kind == HANG:
                parts.append(f"hang {'on ' + who + ' ' if who else ''}at step {f.step} (stopped by the watchdog)")
            else:
                parts.append(f"{f.kind} at step {f.step} ({f.action.split(';')[0]})")
        n = len(self.faults)
        return f"{n} fault{'s' if n != 1 else ''} in {self.steps} steps: " + "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "steps": self.steps, "summary": self.summary(),
                "faults": [f.to_json() for f in self.faults], "notes": self.notes, "missing": self.missing,
                "unreadable_lines": self.unreadable}


def diagnose(run: Path) -> Diagnosis:
    """Read a train run's output folder and classify its faults."""
    logs = {name: JsonLines(run / name, True) for name in (EVENTS_JSONL, RANKS_JSONL, METRICS_JSONL)}
    missing = [name for name, log in logs.items() if not log.path.exists()]
    read = {name: log.read() for name, log in logs.items()}
    unreadable = {name: bad for name, (_, bad) in read.items() if bad}
    (events, _), (ranks, _), (metrics, _) = read.values()
    faults, notes = classify(events, ranks, metrics)
    steps = max((r["step"] for r in metrics if isinstance(r.get("step"), int) and not r.get("rolled_back")
                 and "loss" in r), default=0)
    return Diagnosis(str(run), steps, faults, notes, missing, unreadable)


def classify(events: list[dict[str, Any]], ranks: list[dict[str, Any]],
             metrics: list[dict[str, Any]]) -> tuple[list[Fault], list[dict[str, Any]]]:
    """Records in, fault entries out (and the other events as notes). Rank anomalies at one step, the replay's
    verdict on that step (its ``classification`` is the entry's kind) and the rollback that follows are one fault;
    a rollback alone is a data fault (the trainer without replay rolls back and skips the batches, as for bad data);
    a spike in metrics.jsonl with no rollback after it stopped the run. In the events' order (the file's, not the
    clocks'), the stopping spikes last."""
    flagged: dict[tuple[Any, Any], list[dict[str, Any]]] = {}  # a step retrained after a rollback has rows twice
    for r in ranks:
        if "flagged" in r:
            flagged.setdefault((r.get("step"), r.get("rank")), []).append(r)
    faults: list[Fault] = []
    notes: list[dict[str, Any]] = []
    rolled_back: dict[Any, int] = {}  # rollbacks per step (a step retrained after one can spike again)
    for event in events:
        action = event.get("action")
        if action in NOTE_ACTIONS or action not in FAULT_ACTIONS and "classification" not in event:
            notes.append(event)
            continue
        step = event.get("step")
        last = faults[-1] if faults else None
        # An event joins the fault before it at its step while that fault is open: flagged ranks, then the replay's
        # verdict, then the rollback (a verdict joins flags only; a rollback joins flags or a verdict).
        joins = ("rank_anomaly",) if action in ("rank_anomaly", "replay") else ("rank_anomaly", "replay")
        same = (last is not None and last.step == step and last.resumed_from_step is None
                and last.events[-1].get("action") in joins)
        joined = last if same else None
        if action == "rank_anomaly":
            entry = _on_rank_anomaly(faults, event, joined, flagged)
        elif action == "hang":
            _on_hang(faults, event)
            continue
        elif action == "rollback":
            entry = _on_rollback(faults, event, joined)
            rolled_back[step] = rolled_back.get(step, 0) + 1
        else:
            entry = _on_verdict(faults, event, joined)
        if "classification" in event:
            entry.kind = str(event["classification"])
    _mark_undone(faults)
    _add_stopping_spikes(faults, metrics, rolled_back)
    return faults, notes


def _on_rank_anomaly(faults: list[Fault], event: dict[str, Any], joined: Fault | None,
                     flagged: dict[tuple[Any, Any], list[dict[str, Any]]]) -> Fault:
    """A flagged rank, joining ``joined`` (the open fault at its step) or a new rank fault, with its flagged values."""
    entry = joined if joined is not None else _new(faults, event, RANK, "rank anomaly", "flagged; run went on")
    rank = {k: event.get(k) for k in ("rank", "host", "device", "reason")}
    rows = flagged.get((event.get("step"), event.get("rank")))
    if rows:  # the k-th anomaly of a (step, rank) is its k-th flagged row
        row = rows.pop(0)
        rank["values"] = {k: row[k] for k in METRICS if k in row}  # a run of before top_token_share has none
    entry.ranks.append(rank)
    if joined is not None:
        entry.events.append(event)
    return entry


def _on_hang(faults: list[Fault], event: dict[str, Any]) -> None:
    """The watchdog's stop (watchdog.hang_event): a fault of its own, with the ranks that did not arrive."""
    entry = _new(faults, event, HANG, str(event.get("reason", "hang")), str(event.get("decision", "stopped")))
    behind = event.get("ranks_behind") or ([event["rank"]] if "rank" in event else [])
    beats = event.get("heartbeats") or {}
    for r in behind:
        beat = beats.get(str(r)) or beats.get(r) or {}
        entry.ranks.append({"rank": r, "host": beat.get("host", event.get("host")),
                            "device": beat.get("device", event.get("device")), "reason": "did not arrive"})


def _on_rollback(faults: list[Fault], event: dict[str, Any], joined: Fault | None) -> Fault:
    """A rollback, closing ``joined`` (flags or a verdict at its step) or alone a data fault: what it skipped."""
    entry = joined if joined is not None else _new(faults, event, DATA, "", "")
    if joined is not None:
        entry.events.append(event)
    if not any(e.get("action") == "replay" for e in entry.events):  # a verdict said it already
        entry.what = (f"{entry.what}; " if joined is not None else "") + f"{event.get('rule')}: {event.get('reason')}"
    entry.resumed_from_step = event.get("resumed_from_step")
    entry.skipped_batches = list(event.get("skipped_batches") or [])
    entry.lr_scale = event.get("lr_scale")
    entry.documents = list(event.get("documents") or [])
    entry.batch = event.get("batch", entry.batch)
    entry.action = (f"rolled back to step {entry.resumed_from_step}; LR x{entry.lr_scale}; "
                    f"batches {_ranges(entry.skipped_batches)} skipped")
    return entry


def _on_verdict(faults: list[Fault], event: dict[str, Any], joined: Fault | None) -> Fault:
    """An event that classifies itself (the replay's): its own kind, what and decision, and the rank it names."""
    action = event.get("action")
    kind = str(event.get("classification", action))
    verdict = f"replay: {kind}, {event.get('reason', action)}"
    if joined is not None:
        entry = joined
        entry.events.append(event)
        entry.what = f"{entry.what}; {verdict}"
        entry.action = str(event.get("decision", action))
    else:
        trigger = f"{event['trigger']}; " if event.get("trigger") else ""
        entry = _new(faults, event, kind, trigger + verdict, str(event.get("decision", action)))
    if kind == DATA:  # what the run did is the rollback's to say: until one joins, the events record none
        entry.action = "classified as data; no rollback recorded after it (the run stopped, or was stopped)"
    else:  # the rank a hardware or transient verdict names (data is named by its documents)
        named = event.get("ranks") or ([{"rank": event["rank"]}] if "rank" in event else [])
        entry.named = [r.get("rank") for r in named]
        for r in named:
            if all(x.get("rank") != r.get("rank") for x in entry.ranks):
                entry.ranks.append({"rank": r.get("rank"), "host": r.get("host", event.get("host")),
                                    "device": r.get("device", event.get("device")),
                                    "reason": event.get("reason")})
    entry.documents = list(event.get("documents") or entry.documents)
    return entry


def _mark_undone(faults: list[Fault]) -> None:
    """A flag whose step a later rollback undid (the step was trained again) says so in its action."""
    for i, f in enumerate(faults):
        undo = next((r for r in faults[i + 1:] if r.resumed_from_step is not None
                     and r.resumed_from_step < f.step < r.step), None)
        if f.resumed_from_step is None and undo is not None:
            f.action += f" (step undone by the rollback at step {undo.step})"


def _add_stopping_spikes(faults: list[Fault], metrics: list[dict[str, Any]], rolled_back: dict[Any, int]) -> None:
    """A spike the trainer did not roll back: the run stopped there (rollbacks exhausted). Uses up ``rolled_back``."""
    for row in metrics:
        if "spike" not in row:
            continue
        if rolled_back.get(row.get("step"), 0) > 0:
            rolled_back[row.get("step")] -= 1
        else:
            faults.append(Fault(step=row.get("step", 0), kind=SPIKE, what=str(row["spike"]), batch=row.get("batch"),
                                action="stopped: no rollback after it (rollbacks exhausted, or the run was killed)",
                                events=[row]))


def _new(faults: list[Fault], event: dict[str, Any], kind: str, what: str, action: str) -> Fault:
    entry = Fault(step=event.get("step", 0), kind=kind, what=what, action=action, time=event.get("time"),
                  batch=event.get("batch"), events=[event])
    faults.append(entry)
    return entry


def _ranges(batches: list[int]) -> str:
    """[5, 6, 7, 9] -> "5-7, 9" (the loader's own merge of batch ranges)."""
    return ", ".join(f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in merge_ranges((b, b) for b in batches)) \
        or "none"
