"""The ablation's report: per variant and metric the mean and interval at each point, differences, verdicts, compute."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from tokenmill.ablate import stats
from tokenmill.ablate.config import AblateConfig
from tokenmill.ablate.layout import CONFIG_FILE, PLAN_FILE, proxy_dir
from tokenmill.ablate.proxy import DONE, eval_path
from tokenmill.errors import TokenmillError
from tokenmill.train.atomic import write_atomic

REPORT_FILE = "report.json"
ALL = "all"
"""The held-out 'domain' that pools every source's documents."""


def _round(value: Any) -> Any:
    """Floats to 6 significant digits, recursively: the report's bytes do not hang on the last bits of a sum."""
    if isinstance(value, float):
        return float(f"{value:.6g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(v) for v in value]
    return value


def load_config(folder: Path) -> AblateConfig:
    """The ablation config that made `folder` (its `ablate_config.json`), its output set to `folder` itself: a folder
    handed over by someone else is read where it lies, never where its recorded `output` points."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise TokenmillError(f"{folder} is not an ablation folder (no {CONFIG_FILE}); run `tokenmill ablate CONFIG`")
    recorded = json.loads(path.read_text(encoding="utf-8"))
    return AblateConfig.model_validate({**recorded, "output": str(Path(folder).resolve())})


def lower_is_better(metric: str) -> bool:
    return metric.endswith("/bpb")


def _runs(evals: dict[int, dict], metric: str) -> stats.Runs:
    """One metric at one point from each seed's scores (`evals`: seed index -> that point's scores), as `Runs`."""
    nums, dens = [], []
    for k in sorted(evals):
        e = evals[k]
        if metric.startswith("heldout/"):
            source = metric.split("/")[1]
            parts = e["heldout"].values() if source == ALL else [e["heldout"][source]]
            nll = np.concatenate([np.asarray(p["nll"], dtype=np.float64) for p in parts])
            nbytes = np.concatenate([np.asarray(p["bytes"], dtype=np.float64) for p in parts])
            nums.append(nll / math.log(2))
            dens.append(nbytes)
        else:
            task, name = metric.split("/")
            values = np.asarray(e["tasks"][task][name], dtype=np.float64)
            nums.append(values)
            dens.append(np.ones_like(values))
    return stats.Runs(np.stack(nums), np.stack(dens))


def _metrics(sample: dict) -> list[str]:
    heldout = sorted(sample["heldout"])
    out = [f"heldout/{s}/bpb" for s in heldout] + ([f"heldout/{ALL}/bpb"] if len(heldout) > 1 else [])
    return out + [f"{t}/{m}" for t in sorted(sample["tasks"]) for m in ("acc", "acc_norm", "p_correct")]


def build_report(folder: Path) -> dict[str, Any]:
    """The report of a finished ablation folder (every proxy run done); a TokenmillError naming the runs not done."""

    config = load_config(folder)
    points = config.proxy.eval_steps()
    missing = [f"{v} seed {s}" for v in config.names for s in config.seeds
               if not (proxy_dir(config, v, s) / DONE).is_file()]
    if missing:
        raise TokenmillError(f"{folder}: proxy runs not finished: {', '.join(missing)}; run `tokenmill ablate "
                             f"CONFIG` to finish them")
    plan = json.loads((folder / PLAN_FILE).read_text(encoding="utf-8"))
    scores: dict[str, dict[int, dict[int, dict]]] = {}
    compute: dict[str, dict[str, float]] = {}
    for v in config.names:
        scores[v] = {}
        tokens = flops = 0.0
        for i, s in enumerate(config.seeds):
            out = proxy_dir(config, v, s)
            done = json.loads((out / DONE).read_text(encoding="utf-8"))
            tokens += done["tokens"]
            flops += done["tokens"] * done["flops_per_token"]
            for p in points:
                scores[v].setdefault(p, {})[i] = json.loads(eval_path(out, p).read_text(encoding="utf-8"))
        compute[v] = {"tokens": tokens, "train_flops": flops}
    base = config.base_name
    metrics = _metrics(scores[base][points[-1]][0])
    tokens_at = {p: scores[base][p][0]["tokens"] for p in points}
    budget = tokens_at[points[-1]]
    variants_out: dict[str, Any] = {}
    for v in config.names:
        curves = {}
        for m in metrics:
            curve = []
            for p in points:
                mean, low, high = stats.mean_interval(_runs(scores[v][p], m).per_seed(), config.confidence)
                curve.append({"step": p, "tokens": tokens_at[p], "mean": mean, "low": low, "high": high})
            curves[m] = curve
        variants_out[v] = {"metrics": curves, "compute": compute[v], "pipeline": plan["variants"][v]}
    comparisons: dict[str, Any] = {}
    for v in config.names[1:]:
        comparisons[v] = {}
        for m in metrics:
            curve = []
            for p in points:
                diff, low, high = stats.bootstrap_difference(_runs(scores[v][p], m), _runs(scores[base][p], m),
                                                             config.bootstrap, config.confidence, [v, base, m, p])
                curve.append({"step": p, "tokens": tokens_at[p], "difference": diff, "low": low, "high": high,
                              "verdict": stats.verdict(low, high, lower_is_better(m))})
            held = stats.held_from([c["verdict"] for c in curve])
            comparisons[v][m] = {"points": curve, "verdict": curve[-1]["verdict"],
                                 "held_from": {"step": points[held], "tokens": tokens_at[points[held]],
                                               "fraction_of_budget": tokens_at[points[held]] / budget}}
    report = {
        "base": base,
        "seeds": config.seeds,
        "confidence": config.confidence,
        "bootstrap": config.bootstrap,
        "proxy": {"model": config.proxy.model, "seq_len": config.proxy.seq_len, "steps": config.proxy.steps,
                  "tokens_per_run": budget, "eval_steps": points},
        "metrics": {m: {"lower_is_better": lower_is_better(m)} for m in metrics},
        "heldout": plan["heldout"],
        "variants": variants_out,
        "comparisons": comparisons,
        "compute": {"tokens": sum(c["tokens"] for c in compute.values()),
                    "train_flops": sum(c["train_flops"] for c in compute.values())},
    }
    return _round(report)


def report_bytes(report: dict[str, Any]) -> bytes:
    """The report as JSON: sorted keys, floats rounded (`_round`), so the same ablation gives the same bytes."""
    return (json.dumps(report, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def write_report(folder: Path) -> Path:
    """`report.json` in the ablation folder, written atomically."""
    path = folder / REPORT_FILE
    write_atomic(path, report_bytes(build_report(folder)).decode("utf-8"))
    return path
