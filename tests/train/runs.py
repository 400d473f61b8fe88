"""Token data and configs for trainer tests, and a torchrun launcher that keeps every socket on the loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.loader.tokens import write_dataset

VOCAB = 256


def pattern_docs(n: int, rng: np.random.Generator) -> list[list[int]]:
    """Arithmetic progressions modulo the vocabulary: easy to learn, so the loss falls within a few steps."""
    docs = []
    for _ in range(n):
        a, b, length = int(rng.integers(1, VOCAB - 1)), int(rng.integers(1, 5)), int(rng.integers(40, 160))
        docs.append([(a + b * t) % (VOCAB - 2) + 1 for t in range(length)])
    return docs


def constant_docs(n: int, rng: np.random.Generator) -> list[list[int]]:
    """Each document token 1 repeated: learnt within a few steps, after which anything else stands out."""
    return [[1] * int(rng.integers(40, 160)) for _ in range(n)]


CONSTANT_FINGERPRINTS = {"max_token_share": 1.0}
"""The fingerprints of a run on `constant_docs`: their samples are one id repeated by design, which the default
`max_token_share` flags as a zero-filled block would be."""


def write_tokens(root: Path, seed: int = 0, extra: dict[str, list[list[int]]] | None = None,
                 docs=pattern_docs) -> Path:
    rng = np.random.default_rng(seed)
    sources = {"alpha": docs(120, rng), "beta": docs(80, rng), **(extra or {})}
    write_dataset(root, sources, vocab_size=VOCAB)
    return write_dataset(root, {"alpha": docs(20, rng), "beta": docs(10, rng)}, split="valid", vocab_size=VOCAB)


def config(tokens: Path, output: Path, **overrides) -> dict:
    base = {"data": str(tokens), "model": "opt-tiny", "seq_len": 32, "global_batch_size": 12, "steps": 20,
            "lr": 3e-3, "warmup_steps": 2, "output": str(output), "checkpoint_every": 5, "eval_every": 10,
            "eval_batches": 2, "loader": {"num_workers": 0}, "seed": 7}
    return {**base, **overrides}


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(**extra: str) -> dict:
    return {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", **extra}


def torchrun(nproc: int, args: list[str], timeout: int = 240, **extra_env: str) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node N -m tokenmill.cli ARGS`` (or a script path) with the store on 127.0.0.1."""
    target = ["-m", "tokenmill.cli", *args] if not args[0].endswith(".py") else args
    cmd = [str(Path(sys.executable).parent / "torchrun"), "--nnodes", "1", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), *target]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env(**extra_env))


def metrics(output: Path) -> list[dict]:
    return rows(output / "metrics.jsonl")


def losses(output: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in metrics(output) if "loss" in r}


def rows(path: Path) -> list[dict]:
    """The JSON lines of a run's log (metrics, events, ranks, an injector's log); none when it is absent."""
    from tokenmill.train.metrics import JsonLines

    return JsonLines(path, True).rows()


def train_nproc(tmp_path: Path, name: str, cfg: dict, nproc: int, faults: dict | None = None,
                timeout: int = 300) -> subprocess.CompletedProcess:
    """``tokenmill train <name>.yaml --nproc N`` of ``cfg``, with a fault plan (``TOKENMILL_TRAIN_FAULTS``) if given."""
    from tokenmill.train.faults import ENV

    extra = {}
    if faults is not None:
        plan = tmp_path / f"{name}-faults.json"
        plan.write_text(json.dumps(faults))
        extra[ENV] = str(plan)
    path = write_config(tmp_path / f"{name}.yaml", cfg)
    return subprocess.run([sys.executable, "-m", "tokenmill.cli", "train", str(path), "--nproc", str(nproc)],
                          capture_output=True, text=True, timeout=timeout, env=env(**extra))
