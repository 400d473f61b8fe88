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


def _done(config: AblateConfig, variant: str, seed: int) -> dict[str, Any]:
    return json.loads((proxy_dir(config, variant, seed) / DONE).read_text(encoding="utf-8"))


def _scores(config: AblateConfig, variant: str, points: list[int]) -> dict[int, dict[int, dict]]:
    """{point: {seed index: that point's scores}} of one variant's runs."""
    out: dict[int, dict[int, dict]] = {}
    for i, s in enumerate(config.seeds):
        folder = proxy_dir(config, variant, s)
        for p in points:
            out.setdefault(p, {})[i] = json.loads(eval_path(folder, p).read_text(encoding="utf-8"))
    return out


def early_stop_metric(config: AblateConfig) -> str:
    """The metric the early-stopping rule reads: `early_stop.metric`, or held-out bits per byte pooled over every
    source (the one source's where there is one); a TokenmillError when the scores have no such metric."""
    first = config.proxy.eval_steps()[0]
    sample = json.loads(eval_path(proxy_dir(config, config.base_name, config.seeds[0]), first).read_text(
        encoding="utf-8"))
    metrics = _metrics(sample)
    wanted = config.early_stop.metric if config.early_stop is not None else None
    if wanted is None:
        held = [m for m in metrics if m.startswith("heldout/")]
        return f"heldout/{ALL}/bpb" if f"heldout/{ALL}/bpb" in held else (held or metrics)[0]
    if wanted not in metrics:
        raise TokenmillError(f"early_stop.metric: {wanted!r} is not a metric of this ablation; it has "
                             f"{', '.join(metrics)}")
    return wanted


def interval_curves(config: AblateConfig, metric: str, upto: dict[str, int]) -> dict[str, list[tuple]]:
    """{variant: [(mean, low, high) over seeds at each of the first `upto[variant]` evaluation points]}, from the
    scores on disk (what the early-stopping rule reads between rounds)."""
    points = config.proxy.eval_steps()
    out = {}
    for v in config.names:
        scores = _scores(config, v, points[:upto[v]])
        out[v] = [stats.mean_interval(_runs(scores[p], metric).per_seed(), config.confidence)
                  for p in points[:upto[v]]]
    return out


def _variants_part(config: AblateConfig, plan: dict) -> dict[str, Any]:
    """Per variant its curves, compute and pipeline; per variant against the base its comparisons; the early-stop
    section. A variant stopped early has scores up to its stop: its curves and comparisons end there."""
    points = config.proxy.eval_steps()
    missing = [f"{v} seed {s}" for v in config.names for s in config.seeds
               if not (proxy_dir(config, v, s) / DONE).is_file()]
    if missing:
        raise TokenmillError(f"{config.output_dir}: proxy runs not finished: {', '.join(missing)}; run `tokenmill "
                             f"ablate CONFIG` to finish them")
    scores: dict[str, dict[int, dict[int, dict]]] = {}
    compute: dict[str, dict[str, float]] = {}
    reached: dict[str, list[int]] = {}
    stopped: dict[str, int] = {}
    fpt: dict[str, float] = {}
    for v in config.names:
        tokens = flops = 0.0
        last = points[-1]
        for s in config.seeds:
            done = _done(config, v, s)
            tokens += done["tokens"]
            flops += done["tokens"] * done["flops_per_token"]
            fpt[v] = done["flops_per_token"]
            if "stopped" in done:
                last = min(last, done["stopped"]["step"])
                stopped[v] = done["stopped"]["step"]
        reached[v] = [p for p in points if p <= last]
        scores[v] = _scores(config, v, reached[v])
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
            for p in reached[v]:
                mean, low, high = stats.mean_interval(_runs(scores[v][p], m).per_seed(), config.confidence)
                curve.append({"step": p, "tokens": tokens_at[p], "mean": mean, "low": low, "high": high})
            curves[m] = curve
        variants_out[v] = {"metrics": curves, "compute": compute[v], "pipeline": plan["variants"][v]}
        if v in stopped:
            variants_out[v]["stopped_at"] = {"step": stopped[v], "tokens": tokens_at[stopped[v]],
                                             "fraction_of_budget": tokens_at[stopped[v]] / budget}
    comparisons: dict[str, Any] = {}
    for v in config.names[1:]:
        comparisons[v] = {}
        for m in metrics:
            curve = []
            for p in reached[v]:
                diff, low, high = stats.bootstrap_difference(_runs(scores[v][p], m), _runs(scores[base][p], m),
                                                             config.bootstrap, config.confidence, [v, base, m, p])
                curve.append({"step": p, "tokens": tokens_at[p], "difference": diff, "low": low, "high": high,
                              "verdict": stats.verdict(low, high, lower_is_better(m))})
            for c in curve:
                c["agrees_with_final"] = c["verdict"] == curve[-1]["verdict"]
            held = stats.held_from([c["verdict"] for c in curve])
            comparisons[v][m] = {"points": curve, "verdict": curve[-1]["verdict"],
                                 "held_from": {"step": reached[v][held], "tokens": tokens_at[reached[v][held]],
                                               "fraction_of_budget": tokens_at[reached[v][held]] / budget}}
    out = {
        "base": base,
        "early_signal": _early_signal(config, metrics, comparisons, stopped, tokens_at),
        "proxy": {"model": config.proxy.model, "seq_len": config.proxy.seq_len, "steps": config.proxy.steps,
                  "tokens_per_run": budget, "eval_steps": points},
        "metrics": {m: {"lower_is_better": lower_is_better(m)} for m in metrics},
        "variants": variants_out,
        "comparisons": comparisons,
    }
    if config.early_stop is not None:
        out["early_stop"] = _early_part(config, scores, variants_out, stopped, tokens_at, fpt)
    return out


def _early_signal(config: AblateConfig, metrics: list[str], comparisons: dict[str, Any], stopped: dict[str, int],
                  tokens_at: dict[int, int]) -> dict[str, Any]:
    """How often the verdict at an earlier point was the final one, over the pairs (variant against the base, per
    metric) trained to the end (`stats.agreement`): at 25% and 50% of the budget, and over every earlier point;
    per metric and over all. A variant stopped early has no final verdict at the end and is left out."""
    points = config.proxy.eval_steps()
    budget = tokens_at[points[-1]]
    full = [v for v in config.names[1:] if v not in stopped]
    verdicts = {m: {v: [c["verdict"] for c in comparisons[v][m]["points"]] for v in full} for m in metrics}
    out = stats.agreement([tokens_at[p] / budget for p in points], verdicts)

    def steps(part: dict[str, Any]) -> dict[str, Any]:
        at = [{**{k: v for k, v in row.items() if k != "point"},
               "step": None if row["point"] is None else points[row["point"]],
               "tokens": None if row["point"] is None else tokens_at[points[row["point"]]]} for row in part["at"]]
        return {"at": at, "every_point": part["every_point"]}

    return {**steps(out), "by_metric": {m: steps(part) for m, part in out["by_metric"].items()},
            "variants": full, "left_out_stopped": sorted(stopped)}


def _early_part(config: AblateConfig, scores, variants_out, stopped: dict[str, int], tokens_at: dict[int, int],
                fpt: dict[str, float]) -> dict[str, Any]:
    """Where each variant was stopped (or, with `apply: false`, would have been), the compute that saved, and the
    rule checked afterwards on the runs trained to the end, at every patience up to the configured one."""
    from tokenmill.ablate import early

    es = config.early_stop
    points = config.proxy.eval_steps()
    metric = early_stop_metric(config)
    lower = lower_is_better(metric)
    budget = tokens_at[points[-1]]
    n = len(config.seeds)
    curves = {v: [(c["mean"], c["low"], c["high"]) for c in variants_out[v]["metrics"][metric]]
              for v in config.names}
    finished = [v for v in config.names if v not in stopped]
    last = points[-1]
    sign = 1.0 if lower else -1.0
    best = min(finished, key=lambda v: sign * curves[v][-1][0])
    final_worse = {}
    for v in finished:
        if v == best:
            final_worse[v] = False
            continue
        _, low, high = stats.bootstrap_difference(_runs(scores[v][last], metric), _runs(scores[best][last], metric),
                                                  config.bootstrap, config.confidence, ["early", v, best, metric])
        final_worse[v] = stats.verdict(low, high, lower) == stats.WORSE
    # A stop at the last point saves nothing and is no stop: the rule decides at the points before it (it is causal,
    # so cutting the curves there changes no earlier decision; the rounds' decision at the last point is moot too).
    before_last = {v: c[:len(points) - 1] for v, c in curves.items()}
    rows = early.check(before_last, lower, list(range(1, es.patience + 1)), finished, final_worse,
                       [config.base_name])
    would = {} if es.apply else early.decide(before_last, lower, es.patience, [config.base_name])
    per_variant = {}
    for v in config.names:
        at = stopped.get(v)
        if at is None and v in would:
            at = points[would[v]]
        row: dict[str, Any] = {"stopped": v in stopped, "final_verdict_against_best":
                               None if v not in finished else ("worse" if final_worse[v] else
                                                               ("best" if v == best else stats.SAME))}
        if at is not None:
            saved = (budget - tokens_at[at]) * n
            row.update({"step": at, "tokens": tokens_at[at], "fraction_of_budget": tokens_at[at] / budget,
                        "saved": {"tokens": saved, "train_flops": saved * fpt[v]}})
        per_variant[v] = row
    saved = [r["saved"] for r in per_variant.values() if "saved" in r]
    return {"metric": metric, "patience": es.patience, "apply": es.apply, "best_at_end": best,
            "variants": per_variant,
            "saved": {"tokens": sum(x["tokens"] for x in saved), "train_flops": sum(x["train_flops"] for x in saved)},
            "check": [r.to_json(points) for r in rows]}


def build_report(folder: Path) -> dict[str, Any]:
    """The report of a finished ablation folder (every proxy run done); a TokenmillError naming the runs not done."""
    config = load_config(folder)
    plan = json.loads((folder / PLAN_FILE).read_text(encoding="utf-8"))
    report: dict[str, Any] = {"seeds": config.seeds, "confidence": config.confidence, "bootstrap": config.bootstrap,
                              "heldout": plan["heldout"]}
    compute = {"tokens": 0.0, "train_flops": 0.0}
    if config.variants:
        part = _variants_part(config, plan)
        report.update(part)
        for c in part["variants"].values():
            compute = {k: compute[k] + c["compute"][k] for k in compute}
    if config.mixture is not None:
        from tokenmill.ablate.mixture import mixture_report

        report["mixture"] = mixture_report(config)
        compute = {k: compute[k] + report["mixture"]["compute"][k] for k in compute}
    report["compute"] = compute
    return _round(report)


def report_bytes(report: dict[str, Any]) -> bytes:
    """The report as JSON: sorted keys, floats rounded (`_round`), so the same ablation gives the same bytes."""
    return (json.dumps(report, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def write_report(folder: Path) -> Path:
    """`report.json` in the ablation folder, written atomically."""
    path = folder / REPORT_FILE
    write_atomic(path, report_bytes(build_report(folder)).decode("utf-8"))
    return path
