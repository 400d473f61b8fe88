"""Benchmark the trainer against a plain single-process PyTorch loop of the same model, in one run; prints JSON.

Both train the same OPT-style model on the same token files through the same TokenLoader, with the same batch,
micro-batches, AdamW and clipping. The plain loop has no FSDP, no process group, no guard, no metrics file. The
trainer's overhead is the ratio of their median step times (wall time between steps, steady state).

With ``--fingerprints`` a third side runs in the same rounds: the trainer with ``fingerprints: {enabled: false}``.
The trainer side keeps the defaults (fingerprints on; ``--fingerprint-every`` sets their checksum interval), so their
overhead is the ratio of the two trainer sides' median step times; the time spent inside the fingerprint code is
also measured in the step itself (``fingerprint_s`` of metrics.jsonl), which the other load of a shared machine
does not blur.

    python benchmarks/train_throughput.py [--model opt-tiny] [--seq-len 256] [--batch 16] [--micro 8] [--steps 40]
        [--rounds 8]
    python benchmarks/train_throughput.py --fingerprints --model opt-125m --seq-len 128 --batch 4 --micro 4 --steps 6 \
        --rounds 4
"""

from __future__ import annotations

import os
import sys


import argparse  # noqa: E402
import gc  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tokenmill.loader import TokenLoader  # noqa: E402
from tokenmill.tokenize.indexed import build_index  # noqa: E402
from tokenmill.train.config import parse_train_config  # noqa: E402
from tokenmill.train.metrics import peak_tflops  # noqa: E402
from tokenmill.train.model import PRESETS, build_model, model_config  # noqa: E402
from tokenmill.train.run import padded_vocab  # noqa: E402
from tokenmill.train.trainer import Trainer  # noqa: E402


def write_tokens(root: Path, tokens: int, vocab: int) -> Path:
    """Random tokens in the tokenize stage's layout (one source, one file, documents of ~1,000 tokens)."""
    rng = np.random.default_rng(0)
    (root / "train").mkdir(parents=True, exist_ok=True)
    data = rng.integers(1, vocab, size=tokens, dtype=np.uint16 if vocab <= 65536 else np.int32)
    lengths = np.full(tokens // 1000, 1000, dtype=np.int64)
    lengths[-1] += tokens - lengths.sum()
    data[np.cumsum(lengths) - 1] = 0
    files = {".bin": data.tobytes(), ".idx": build_index(data.dtype, lengths)}
    for ext, raw in files.items():
        (root / "train" / f"web.0000{ext}").write_bytes(raw)
    index = {"format": "megatron-mmidx", "version": 1, "dtype": str(data.dtype),
             "tokenizer": {"file": "tokenizer.json", "vocab_size": vocab, "eos_id": 0},
             "splits": {"train": {"documents": len(lengths), "tokens": tokens, "files": [
                 {"prefix": "train/web.0000", "documents": len(lengths), "tokens": tokens,
                  "by_source": {"web": {"documents": len(lengths), "tokens": tokens}},
                  "sha256": {ext: hashlib.sha256(raw).hexdigest() for ext, raw in files.items()}}]}}}
    (root / "tokens.json").write_text(json.dumps(index))
    return root / "tokens.json"


def plain_loop(path: Path, args, device: torch.device) -> list[float]:
    """nanoGPT-style: the model, AdamW, clip, accumulate; wall seconds per step."""
    torch.manual_seed(0)
    cfg = model_config(args.model, vocab_size=padded_vocab(args.vocab), max_seq_len=args.seq_len)
    model = build_model(cfg).to(device)
    model.init_weights(torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW(model.param_groups(0.1), lr=3e-4, betas=(0.9, 0.95))
    # A model that masks documents gets the position ids, as in the trainer.
    loader = TokenLoader([str(path)], seq_len=args.seq_len, global_batch_size=args.batch,
                         micro_batch_size=args.micro, num_workers=0, position_ids=cfg.document_mask)
    it = iter(loader)
    accumulation = args.batch // args.micro
    times, last = [], time.perf_counter()
    for _ in range(args.steps):
        for _ in range(accumulation):
            b = next(it)
            positions = b.get("position_ids")
            loss = model(b["input_ids"].to(device), labels=b["labels"].to(device),
                         position_ids=None if positions is None else positions.to(device))
            (loss / accumulation).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()  # the trainer reads the loss every step too
        now = time.perf_counter()
        times.append(now - last)
        last = now
    return times


def trainer_loop(path: Path, args, out: Path, fingerprints: bool = True) -> tuple[list[float], list[dict]]:
    cfg = parse_train_config({"data": str(path), "model": args.model, "seq_len": args.seq_len,
                              "global_batch_size": args.batch, "micro_batch_size": args.micro, "steps": args.steps,
                              "lr": 3e-4, "output": str(out), "checkpoint_every": 10**9, "eval_every": 0,
                              "loader": {"num_workers": 0}, "peak_tflops": args.peak_tflops, "log_every": 10**9,
                              "fingerprints": {"enabled": fingerprints, "every": args.fingerprint_every}})
    stamps, rows = [], []

    def on_step(row):
        stamps.append(time.perf_counter())
        rows.append(row)

    start = time.perf_counter()
    Trainer(cfg, on_step=on_step).run()
    return [b - a for a, b in zip([start] + stamps[:-1], stamps)], rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="opt-tiny", choices=list(PRESETS))
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--peak-tflops", type=float, default=None, help="per device (default: from the GPU name)")
    parser.add_argument("--fingerprints", action="store_true",
                        help="also run the trainer without fingerprints, and report their overhead")
    parser.add_argument("--fingerprint-every", type=int, default=100, help="steps between parameter checksums")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    warm = min(5, args.steps // 4)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_tokens(Path(tmp) / "tokens", max(2_000_000, args.batch * (args.seq_len + 1) * args.steps * 2),
                            args.vocab)
        plain, trained, bare, rows, shares = [], [], [], [], []
        for r in range(args.rounds):  # alternate, keep each side's best median
            # The plain loop runs first in even rounds and last in odd ones, so that neither side always meets the
            # machine in the same state (a round's ratio pairs two runs seconds apart: `ratio_per_round`).
            if r % 2 == 0:
                plain.append(statistics.median(plain_loop(path, args, device)[warm:]))
            # The two trainer sides swap places every round, and the previous model is collected before each, so
            # neither side always runs second (after another 125M-parameter model and optimizer were let go).
            for with_fingerprints in ((True, False) if r % 2 else (False, True)) if args.fingerprints else (True,):
                gc.collect()
                times, side_rows = trainer_loop(path, args, Path(tmp) / f"train-{r}-{int(with_fingerprints)}",
                                                fingerprints=with_fingerprints)
                if not with_fingerprints:
                    bare.append(statistics.median(times[warm:]))
                    continue
                rows = side_rows
                trained.append(statistics.median(times[warm:]))
                shares.append(statistics.median(row["fingerprint_s"] / t for row, t in zip(rows[warm:], times[warm:])))
            if r % 2 == 1:
                gc.collect()
                plain.append(statistics.median(plain_loop(path, args, device)[warm:]))
    tokens_per_step = args.batch * args.seq_len
    with torch.device("meta"):
        flops = build_model(model_config(args.model, vocab_size=padded_vocab(args.vocab), max_seq_len=args.seq_len)) \
            .flops_per_token(args.seq_len)
    best_plain, best_trainer = min(plain), min(trained)
    peak = peak_tflops(device, args.peak_tflops)
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({os.cpu_count()} cores)",
        "model": args.model, "seq_len": args.seq_len, "global_batch": args.batch, "micro_batch": args.micro,
        "steps": args.steps,
        "plain_tokens_per_s": round(tokens_per_step / best_plain, 1),
        "trainer_tokens_per_s": round(tokens_per_step / best_trainer, 1),
        "trainer_overhead": round(best_trainer / best_plain - 1, 4),
        "trainer_tflops": round(statistics.median(r["tflops_per_device"] for r in rows[warm:]), 4),
        "trainer_mfu": statistics.median(r["mfu"] for r in rows[warm:]) if peak else None,
        "peak_tflops": peak,
        "median_step_s": {"plain": [round(x, 4) for x in plain], "trainer": [round(x, 4) for x in trained]},
    }
    result["flops_per_token"] = flops
    per_round = [p / t for p, t in zip(plain, trained)]
    result["ratio_per_round"] = [round(x, 3) for x in per_round]
    # best median against best median, and the median of the rounds' paired ratios: on a machine whose speed
    # drifts by 10-25% between runs of the same code (this one), the paired figure is the steadier of the two
    result["ratios"] = {"trainer_vs_plain_tokens_per_s": round(best_plain / best_trainer, 3),
                        "trainer_vs_plain_median_of_rounds": round(statistics.median(per_round), 3)}
    if args.fingerprints:
        best_bare = min(bare)
        result["fingerprints"] = {
            "every": args.fingerprint_every,
            "steps_per_s": {"with": round(1 / best_trainer, 4), "without": round(1 / best_bare, 4)},
            "median_step_s": {"with": [round(x, 4) for x in trained], "without": [round(x, 4) for x in bare]},
            # side by side: (best median with) / (best median without) - 1; noisy on a shared machine
            "overhead": round(best_trainer / best_bare - 1, 4),
            # the two sides run back to back in each round: their ratio per round, and its median
            "overhead_per_round": [round(w / wo - 1, 4) for w, wo in zip(trained, bare)],
            "overhead_median_of_rounds": round(statistics.median(w / wo - 1 for w, wo in zip(trained, bare)), 4),
            # measured inside the step: seconds in the fingerprint code / step seconds (median, best round)
            "share_of_step": round(min(shares), 6),
        }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
