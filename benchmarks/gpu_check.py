"""Check the trainer's GPU paths in one command (`make gpu-check`); prints a table and writes JSON.

On a machine with a CUDA device, each part as a user runs it (`tokenmill train CONFIG` in a subprocess, on token
files in the tokenize stage's layout):

1. **Throughput**: opt-1.3b and llama-1b (or the models named) at seq 2048, bf16 (`dtype: auto`), dropout on, eager and
   with `compile: true`: the median step time of the steady steps, tokens/s, MFU from the model's
   `flops_per_token` and the device's peak, peak memory.
   Each model also compiled with `deterministic: false` (the fastest kernels): what bit-identical reruns cost.
2. **Exact resume**: opt-125m and llama-125m (or the models named), bf16, killed (SIGKILL) after its first checkpoint and rerun: the
   losses against an uninterrupted run's, bit for bit; and two uninterrupted runs against each other (the
   kernels' own determinism, `deterministic: true` by default). PyTorch's warnings of operations without a
   deterministic kernel are listed (`determinism_warnings`).
3. **NCCL and FSDP2**: with two or more GPUs, the same kill and resume on two ranks (`--nproc 2`, NCCL); with one,
   said so (two ranks on one GPU are refused by NCCL).
4. **The loader keeps the GPU fed**: seconds per micro-batch of the loader (0 and 2 workers) against the GPU's
   seconds per micro-batch of part 1.

Without a CUDA device it says so and exits 0. Each part has its own time limit and its result is written as it ends,
so a part that fails or hangs still leaves the others'.

    python benchmarks/gpu_check.py [--out bench/gpu] [--models opt-1.3b,llama-1b] [--steps 10]
        [--parts throughput,resume,nccl,loader] [--resume-model opt-125m,llama-125m]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.train_throughput import write_tokens  # noqa: E402

VOCAB = 50272
SHAPE = {"seq_len": 2048, "global_batch_size": 16, "micro_batch_size": 4}
"""The runs' shape (`--seq-len`, `--batch`, `--micro`)."""


def _env() -> dict:
    import torch

    return {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0),
            "devices": torch.cuda.device_count(), "python": sys.version.split()[0],
            "memory_gb": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)}


def _config(tokens: Path, out: Path, **kw) -> dict:
    return {"data": str(tokens), "model": "opt-125m", **SHAPE, "steps": 12, "lr": 3e-4, "warmup_steps": 2, "output": str(out), "checkpoint_every": 1000,
            "keep_checkpoints": 1, "eval_every": 0, "seed": 7, "log_every": 1, "loader": {"num_workers": 1}, **kw}


def _train(cfg: dict, folder: Path, timeout: float, nproc: int = 1, kill_at: int | None = None
           ) -> tuple[int, str, list[dict]]:
    """`tokenmill train` on ``cfg``; killed (SIGKILL, its whole process group) once metrics.jsonl has step
    ``kill_at``. Returns (exit status, the output's tail, metrics rows)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"train-{time.monotonic_ns()}.yaml"
    path.write_text(json.dumps(cfg))
    cmd = [sys.executable, "-m", "tokenmill.cli", "train", str(path)] + (["--nproc", str(nproc)] if nproc > 1 else [])
    metrics = Path(cfg["output"]) / "metrics.jsonl"
    log = folder / "train.log"
    with open(log, "ab") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        started = time.monotonic()
        while proc.poll() is None:
            if time.monotonic() - started > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return -9, "timed out after %d s\n" % timeout + _tail(log), _rows(metrics)
            if kill_at is not None and any(r["step"] >= kill_at for r in _rows(metrics)):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return -9, "killed", _rows(metrics)
            time.sleep(0.2)
    return proc.returncode, _tail(log), _rows(metrics)


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line being written
    return rows


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def throughput(tokens: Path, work: Path, models: list[str], steps: int) -> dict:
    out = {}
    for model in models:
        # As a user runs it (deterministic kernels, the default), then compiled, then compiled with the fastest
        # kernels (`deterministic: false`): what bit-identical reruns cost.
        for compiled, deterministic in ((False, True), (True, True), (True, False)):
            name = f"{model}{' compile' if compiled else ''}{'' if deterministic else ' nondeterministic'}"
            cfg = _config(tokens, work / name.replace(" ", "-"), model=model, steps=steps, compile=compiled,
                          deterministic=deterministic)
            # Stopped once the last step is logged: its final checkpoint (16 GB for opt-1.3b) is not what is measured
            code, tail, rows = _train(cfg, work / "logs", timeout=300, kill_at=steps)
            code = 0 if code == -9 and len(rows) == steps else code
            shutil.rmtree(cfg["output"], ignore_errors=True)
            steady = [r for r in rows if r["step"] > max(2, steps // 2)]
            entry = {"exit": code, "steps": len(rows)}
            if steady:
                step_s = statistics.median(r["step_s"] for r in steady)
                entry.update({"step_s": step_s, "tokens_per_s": round(cfg["global_batch_size"] * cfg["seq_len"] / step_s),
                              "mfu": statistics.median(r["mfu"] for r in steady if r.get("mfu") is not None)
                              if any(r.get("mfu") is not None for r in steady) else None,
                              "tflops": statistics.median(r["tflops_per_device"] for r in steady),
                              "memory_gb": max(r.get("memory_gb", 0) for r in rows),
                              "first_step_s": rows[0]["step_s"],
                              "micro_batch_s": step_s * cfg["micro_batch_size"] / cfg["global_batch_size"]})
            if code != 0:
                entry["error"] = tail
            out[name] = entry
            print(f"throughput {name}: {entry}", flush=True)
    return out


def _losses(rows: list[dict]) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in rows}


def resume(tokens: Path, work: Path, model: str, nproc: int = 1) -> dict:
    """Uninterrupted twice, then killed after the step-4 checkpoint and rerun; losses compared bit for bit."""
    base = dict(model=model, steps=10, checkpoint_every=4, keep_checkpoints=3)
    runs = {}
    for name in ("a", "b"):
        code, tail, rows = _train(_config(tokens, work / f"resume{nproc}-{model}-{name}", **base), work / "logs",
                                  timeout=240, nproc=nproc)
        runs[name] = (code, tail, _losses(rows))
    killed = _config(tokens, work / f"resume{nproc}-{model}-killed", **base)
    first = _train(killed, work / "logs", timeout=240, nproc=nproc, kill_at=6)
    second = _train(killed, work / "logs", timeout=240, nproc=nproc)
    a, b, resumed = runs["a"][2], runs["b"][2], _losses(second[2])
    diff = {s: abs(a[s] - resumed[s]) for s in a if s in resumed}
    out = {"nproc": nproc, "exits": [runs["a"][0], runs["b"][0], first[0], second[0]],
           "steps": len(a), "repeat_equal": a == b and bool(a) and runs["a"][0] == runs["b"][0] == 0,
           "repeat_max_diff": max((abs(a[s] - b[s]) for s in a if s in b), default=None),
           "resume_equal": a == resumed and bool(a) and runs["a"][0] == second[0] == 0, "resume_max_diff": max(diff.values(), default=None),
           "killed_at_step": max(_losses(first[2]), default=None)}
    for name, code, tail in (("a", runs["a"][0], runs["a"][1]), ("b", runs["b"][0], runs["b"][1]),
                             ("resumed", second[0], second[1])):
        if code != 0:
            out[f"error_{name}"] = tail
    print(f"resume {model} (nproc {nproc}): {out}", flush=True)
    return out


def determinism_warnings(log: Path) -> list[str]:
    """PyTorch's warnings of operations with no deterministic kernel (`deterministic: true` warns, not stops), each
    once, from the runs' log."""
    if not log.exists():
        return []
    return sorted({line.strip()[:300] for line in log.read_text(errors="replace").splitlines()
                   if "deterministic" in line and "Warning" in line})


def loader_feed(tokens: Path, device: str) -> dict:
    from tokenmill.loader import TokenLoader

    out = {}
    for workers in (0, 2):
        loader = TokenLoader([str(tokens)], **SHAPE, seed=1, num_workers=workers, pin_memory=device == "cuda")
        it = iter(loader)
        next(it)
        t0 = time.perf_counter()
        n = 200
        for _ in range(n):
            batch = next(it)
            batch["input_ids"].to(device, non_blocking=True)
        out[f"workers_{workers}_micro_batch_s"] = round((time.perf_counter() - t0) / n, 6)
        loader.close()
    print(f"loader: {out}", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/gpu")
    parser.add_argument("--models", default="opt-1.3b,llama-1b")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--parts", default="throughput,resume,nccl,loader")
    parser.add_argument("--resume-model", default="opt-125m,llama-125m")
    parser.add_argument("--seq-len", type=int, default=SHAPE["seq_len"])
    parser.add_argument("--batch", type=int, default=SHAPE["global_batch_size"])
    parser.add_argument("--micro", type=int, default=SHAPE["micro_batch_size"])
    parser.add_argument("--cpu", action="store_true", help="run the parts on the CPU (to try the script itself)")
    args = parser.parse_args()
    SHAPE.update(seq_len=args.seq_len, global_batch_size=args.batch, micro_batch_size=args.micro)
    import torch

    if not torch.cuda.is_available() and not args.cpu:
        print("gpu-check: no CUDA device on this machine; nothing to check (run it where there is one)")
        return 0
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict = {"env": _env() if torch.cuda.is_available() else {"torch": torch.__version__, "device": "cpu"}}
    print(json.dumps(report["env"]), flush=True)
    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        tokens = write_tokens(work / "tokens", tokens=4_000_000, vocab=VOCAB)
        jobs = {"throughput": lambda: throughput(tokens, work, args.models.split(","), args.steps),
                "resume": lambda: {model: resume(tokens, work, model) for model in args.resume_model.split(",")},
                "nccl": lambda: {model: resume(tokens, work, model, nproc=2) for model in args.resume_model.split(",")}
                if torch.cuda.device_count() >= 2
                else {"skipped": f"{torch.cuda.device_count()} GPU: NCCL refuses two ranks on one GPU"},
                "loader": lambda: loader_feed(tokens, "cuda" if torch.cuda.is_available() else "cpu")}
        for part in parts:
            t0 = time.perf_counter()
            try:
                report[part] = jobs[part]()
            except Exception as err:  # noqa: BLE001 - one part's failure is its result; the others still run
                report[part] = {"error": f"{type(err).__name__}: {err}"}
            report[part]["seconds"] = round(time.perf_counter() - t0, 1)
            report["determinism_warnings"] = determinism_warnings(work / "logs" / "train.log")
            (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=1))
            for log in (work / "logs").glob("*.log"):
                (out_dir / "train.log").write_text(log.read_text(errors="replace")[-200_000:])
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
