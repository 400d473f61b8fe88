"""Benchmark the rank detector on real token files: false alarms in clean runs, and what each injected fault is
found and classified as, at several world sizes; prints a table and JSON.

Each cell is `tokenmill train --nproc N` as a user runs it (opt-tiny, gloo on the CPU), on the demo run's tokens
and on the shared data's (the Pile and Common Crawl samples of ../shared/data, tokenized with a BPE trained on them):

- **Clean**: every world size x seed x dropout x token set, ``--steps`` steps with the default fingerprints and
  ``faults.replay`` off; a ``rank_anomaly`` event is a false alarm. The detector of the commit before this one
  (``--baseline-src``, a ``src`` folder) reads the same ``ranks.jsonl`` side by side, so the ratio of their false
  alarms is measured on the very same values.
- **Faults**: per world size, on the demo's tokens with dropout, ``faults.replay: true`` and each injected fault on
  the last rank at ``--fault-step``: a gradient scaled by 1e6 or set to NaN (once; always), a poisoned batch (random
  tokens in that rank's samples), a sleeping rank (the watchdog). Found: an anomaly (or a hang) naming that rank at
  that step; classified: the replay's verdict (transient for once, hardware for always, data for the batch).

    python benchmarks/rank_detector.py [--dir bench/rank_detector] [--worlds 2,3,4,8] [--seeds 0,1,2]
        [--dropouts 0,0.1] [--steps 200] [--fault-step 24] [--baseline-src /tmp/old/src] [--tokens A.json,B.json]
        [--parts clean,faults] [--faults scale_once,...]

Each cell's row is kept beside its run (`<cell>.json`): a rerun with the same arguments goes on where the last one
stopped (the whole matrix takes hours on two cores).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data"
EXPECTED = {"scale_once": "transient", "scale_always": "hardware", "nan_once": "transient",
            "nan_always": "hardware", "poison": "data", "sleep": "hang", "poison_random": "data"}
"""Each injected fault and the verdict it should get. ``poison``: the rank's samples one token repeated (a block of
0xFF bytes read as tokens), the tests' poison; ``poison_random``: uniformly random tokens, a subtler batch (its loss
about 10% above its peers' early in a run), reported apart: ``found_ratio`` counts the others."""


def _cli(*args: str, env: dict | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tokenmill.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def demo_tokens(folder: Path) -> Path:
    """The demo corpus through every stage (`tokenmill demo-data`, `tokenmill run`): its tokens.json."""
    tokens = folder / "run" / "tokenize" / "tokens.json"
    if not tokens.exists():
        for args in (("demo-data", str(folder)), ("run", str(folder / "demo.yaml"))):
            done = _cli(*args)
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return tokens


def shared_tokens(folder: Path) -> Path:
    """The shared data's Pile and Common Crawl samples, ingested and tokenized with a 4,096-token BPE trained on them
    by the tokenize stage (the demo's size: with GPT-2's 50,257 the output head makes an 8-rank CPU step 12x
    dearer)."""
    tokens = folder / "run" / "tokenize" / "tokens.json"
    if tokens.exists():
        return tokens
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "output": "run", "seed": 1,
        "sources": [
            {"name": "pile", "format": "pile", "paths": [str(SHARED / "pile" / "the_pile_hf_dummy_train00.jsonl.zst")],
             "language": "en"},
            {"name": "cc", "format": "jsonl", "paths": [str(SHARED / "commoncrawl" / "dolma_*.jsonl.gz")],
             "text_field": "text", "id_field": "id", "language": "any"},
        ],
        "stages": {"tokenize": {"tokenizer": {"train": {"vocab_size": 4096, "sample_docs": 2000}},
                                "valid_fraction": 0.01}},
    }
    (folder / "shared.yaml").write_text(json.dumps(config))
    done = _cli("run", str(folder / "shared.yaml"))
    if done.returncode != 0:
        raise SystemExit(f"tokenizing the shared data failed:\n{done.stderr[-2000:]}")
    return tokens


def _config(tokens: Path, out: Path, world: int, seed: int, dropout: float, steps: int, **extra) -> dict:
    return {"data": str(tokens), "model": "opt-tiny", "seq_len": 128, "global_batch_size": 8 * world,
            "micro_batch_size": 8, "steps": steps, "lr": 3e-3, "warmup_steps": 4, "seed": seed, "dropout": dropout,
            "output": str(out), "checkpoint_every": 10_000, "eval_every": 0, "loader": {"num_workers": 0}, **extra}


def _cached(out: Path, make) -> dict:
    """A cell's row: read from ``<out>.json`` when an earlier run of the benchmark finished it (the matrix takes
    hours on two cores; a rerun goes on where it stopped), else made and written there."""
    done = out.parent / f"{out.name}.json"
    if done.exists():
        return json.loads(done.read_text())
    row = make()
    done.write_text(json.dumps(row))
    return row


def _train(cfg: dict, world: int, faults: dict | None = None) -> tuple[int, float]:
    out = Path(cfg["output"])
    out.mkdir(parents=True, exist_ok=True)
    path = out.parent / f"{out.name}.yaml"
    path.write_text(json.dumps(cfg))
    env = {"OMP_NUM_THREADS": "1"}
    if faults is not None:
        (out.parent / f"{out.name}.faults.json").write_text(json.dumps(faults))
        env["TOKENMILL_TRAIN_FAULTS"] = str(out.parent / f"{out.name}.faults.json")
    t0 = time.perf_counter()
    done = _cli("train", str(path), "--nproc", str(world), env=env)
    (out.parent / f"{out.name}.log").write_text(done.stdout + done.stderr)
    return done.returncode, time.perf_counter() - t0


def _events(out: Path) -> list[dict]:
    path = out / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _detector(src: str | None):
    """The `fingerprints` module of ``src`` (another checkout's src folder), or this one's."""
    if src is None:
        from tokenmill.train import fingerprints
        return fingerprints
    spec = importlib.util.spec_from_file_location("baseline_fingerprints", Path(src) / "tokenmill/train/fingerprints.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def offline_flags(module, ranks_jsonl: Path) -> int:
    """Steps at which ``module``'s detector flags a rank, run over a run's recorded values."""
    rows = [json.loads(line) for line in ranks_jsonl.read_text().splitlines()]
    world = max(r["rank"] for r in rows) + 1
    by_step: dict[int, dict[int, list[float]]] = {}
    for r in rows:
        by_step.setdefault(r["step"], {})[r["rank"]] = [r[m] for m in module.METRICS]
    d = module.Detector(module.FingerprintConfig(), world)
    return sum(bool(d.check(np.array([by_step[s][r] for r in range(world)]))) for s in sorted(by_step))


def clean(args, sets: dict[str, Path], work: Path, baseline) -> list[dict]:
    rows = []
    for name, tokens in sets.items():
        for world in args.worlds:
            for seed in args.seeds:
                for dropout in args.dropouts:
                    out = work / f"clean-{name}-{world}-{seed}-{dropout}-{args.steps}"

                    def cell(tokens=tokens, out=out, world=world, seed=seed, dropout=dropout, name=name) -> dict:
                        code, seconds = _train(_config(tokens, out, world, seed, dropout, args.steps), world)
                        events = [e for e in _events(out) if e.get("action") == "rank_anomaly"]
                        row = {"tokens": name, "world": world, "seed": seed, "dropout": dropout, "exit": code,
                               "steps": args.steps, "false_alarms": len(events),
                               "flagged_steps": len({e["step"] for e in events}), "seconds": round(seconds, 1)}
                        if baseline is not None and (out / "ranks.jsonl").exists():
                            row["baseline_flagged_steps"] = offline_flags(baseline, out / "ranks.jsonl")
                        return row

                    row = _cached(out, cell)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    return rows


def _fault_plan(kind: str, world: int, step: int) -> tuple[dict, dict]:
    """The fault file and the config changes of one injected fault on the last rank."""
    rank = world - 1
    if kind.startswith("poison"):
        per_rank = 8
        tokens = "random" if kind == "poison_random" else 255
        return {"poison": {"batch": step - 1, "samples": [rank * per_rank, (rank + 1) * per_rank - 1],
                           "tokens": tokens}}, {}
    if kind == "sleep":
        return {"sleep": {"rank": rank, "step": step, "seconds": 120}}, {"watchdog": {"timeout_s": 20}}
    how, mode = kind.split("_")
    return {"grad": {"rank": rank, "step": step, "mode": mode, "kind": how}}, {}


def faults(args, tokens: Path, work: Path) -> list[dict]:
    rows = []
    for world in args.worlds:
        for kind, expected in EXPECTED.items():
            if kind not in args.faults.split(","):
                continue
            out = work / f"fault-{kind}-{world}-{args.fault_step}"

            def cell(kind=kind, expected=expected, world=world, out=out) -> dict:
                plan, extra = _fault_plan(kind, world, args.fault_step)
                cfg = _config(tokens, out, world, 0, 0.1, args.fault_step + 6, faults={"replay": True}, **extra)
                code, seconds = _train(cfg, world, plan)
                events = _events(out)
                rank, step = world - 1, args.fault_step
                at = [e for e in events if e.get("step") == step]
                # Found: the fingerprints flag that rank at that step, or the guard's spike replays or rolls it
                # back (a bad batch), or the watchdog names the rank (a sleep)
                found = any(e.get("action") == "rank_anomaly" and e.get("rank") == rank or e.get("action") in
                            ("replay", "rollback") for e in at) or any(
                    e.get("action") == "hang" and rank in e.get("ranks_behind", []) for e in events)
                replays = [e for e in at if e.get("action") == "replay"]
                got = "hang" if any(e.get("action") == "hang" for e in events) else \
                    (replays[0]["classification"] if replays else None)
                suspect = replays[0].get("suspect") if replays else None
                others = sorted({e["step"] for e in events if e.get("action") == "rank_anomaly" and e["step"] < step})
                return {"world": world, "fault": kind, "exit": code, "found": found, "classified": got,
                        "expected": expected,
                        "right": got == expected and (suspect in (None, rank) or expected == "data"),
                        "suspect": suspect, "flags_before_the_fault": others, "seconds": round(seconds, 1)}

            row = _cached(out, cell)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="bench/rank_detector")
    parser.add_argument("--worlds", default="2,3,4,8")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--dropouts", default="0,0.1")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--fault-step", type=int, default=24, help="after the guard's 20 warm-up steps")
    parser.add_argument("--baseline-src", default=None, help="another checkout's src/: its detector, side by side")
    parser.add_argument("--tokens", default=None, help="comma-separated tokens.json files instead of building them")
    parser.add_argument("--parts", default="clean,faults")
    parser.add_argument("--faults", default=",".join(EXPECTED), help="which injected faults (comma-separated)")
    args = parser.parse_args()
    args.worlds = [int(w) for w in args.worlds.split(",")]
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.dropouts = [float(p) for p in args.dropouts.split(",")]
    work = Path(args.dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if args.tokens:
        sets = {Path(p).parent.parent.parent.name or f"set{i}": Path(p) for i, p in enumerate(args.tokens.split(","))}
    else:
        sets = {"demo": demo_tokens(work / "demo")}
        if SHARED.is_dir():
            sets["shared"] = shared_tokens(work / "shared")
    baseline = _detector(args.baseline_src) if args.baseline_src else None
    report: dict = {"tokens": {k: str(v) for k, v in sets.items()}}
    if "clean" in args.parts:
        report["clean"] = clean(args, sets, work, baseline)
        alarms = sum(r["false_alarms"] for r in report["clean"])
        steps = sum(r["steps"] for r in report["clean"])
        report["false_alarm_ratio"] = alarms / steps  # rank_anomaly events per step
        if baseline is not None:
            before = sum(r.get("baseline_flagged_steps", 0) for r in report["clean"])
            report["flagged_steps_ratio_vs_baseline"] = (sum(r["flagged_steps"] for r in report["clean"]) / before
                                                         if before else None)
            report["baseline_false_alarm_ratio"] = before / steps
    if "faults" in args.parts:
        report["faults"] = faults(args, next(iter(sets.values())), work)
        counted = [r for r in report["faults"] if r["fault"] != "poison_random"] or report["faults"]
        report["found_ratio"] = sum(r["found"] for r in counted) / len(counted)
        report["classified_right_ratio"] = sum(r["right"] for r in counted) / len(counted)
    (work / "rank_detector.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
