"""The whole ablation: every variant's pipeline (shared stages linked), the held-out set, every proxy run, the report."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Callable

from tokenmill.ablate import share
from tokenmill.ablate.config import AblateConfig, proxy_train_mapping, variants
from tokenmill.ablate.layout import CONFIG_FILE, HELDOUT_FILE, PLAN_FILE, proxy_dir
from tokenmill.ablate.proxy import ProxyJob, is_done, pool_of, run_proxies, train_proxy
from tokenmill.ablate.validate import check
from tokenmill.train.atomic import write_atomic

log = logging.getLogger(__name__)



def _dump(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False) + "\n")


def run_pipelines(config: AblateConfig, say: Callable[[str], None], reporter=None, ray_address: str | None = None
                  ) -> dict[str, dict]:
    """Every variant's `tokenmill run` into `<output>/runs/<name>`, the base first; the stages a variant shares
    with an earlier one (equal signatures, `share.plan`) are linked from it first, so the runner finds them up to
    date. Returns per variant the plan and what the runner reported per stage."""
    from tokenmill.pipeline.config import parse_config
    from tokenmill.pipeline.ray_cluster import ray_session
    from tokenmill.pipeline.runner import run_pipeline

    runs = {v.name: parse_config(v.data, v.base_dir) for v in variants(config)}
    plans = share.plan({name: share.signatures(run) for name, run in runs.items()})
    out: dict[str, dict] = {}
    with ray_session(ray_address):
        for name, run in runs.items():
            p = plans[name]
            for stage in p.shared:
                how = share.link_stage(runs[p.partner].output_dir / stage, run.output_dir / stage)
                log.info("%s/%s: %s from %s", name, stage, how, p.partner)
            say(f"{name}: pipeline" + (f" (sharing {', '.join(p.shared)} with {p.partner})" if p.shared else ""))
            reports = run_pipeline(run, reporter=reporter)
            status = {r.stage: r.status for r in reports}
            bad = [s for s in p.shared if status.get(s) not in ("up to date", "restored")]
            if bad:
                log.warning("%s: stages %s were to be shared but the runner recomputed them", name, bad)
            out[name] = {**p.to_json(), "runner": status}
    return out


def prepare_heldout(config: AblateConfig) -> tuple[dict[str, list[tuple[str, str]]], int]:
    """The held-out documents (`heldout.choose` from the base's ingest output, then `heldout.decontaminate` against
    every variant's training input), saved in the ablation folder; read back from there once chosen."""
    from tokenmill.ablate import heldout
    from tokenmill.pipeline.config import parse_config

    path = config.output_dir / HELDOUT_FILE
    if path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        return {s: [tuple(d) for d in docs] for s, docs in saved["docs"].items()}, saved["removed_as_trained"]
    if not config.evaluations.heldout.enabled:
        return {}, 0
    vs = variants(config)
    base = parse_config(vs[0].data, vs[0].base_dir)
    seed, fraction = base.seed, base.stages.tokenize.valid_fraction
    docs = heldout.choose(base.output_dir, seed, fraction, config.evaluations.heldout.max_docs_per_source)
    docs, removed = heldout.decontaminate(docs, [v.run_dir for v in vs], seed, fraction)
    _dump(path, {"docs": docs, "removed_as_trained": removed})
    return docs, removed


def jobs(config: AblateConfig, docs: dict[str, list[tuple[str, str]]]) -> list[ProxyJob]:
    """Every (variant, seed) proxy run, in config order."""
    from tokenmill.ablate.tasks import read_items

    tasks = {t.name: read_items(t, config.resolve(t.path)) for t in config.evaluations.tasks}
    points = tuple(config.proxy.eval_steps())
    threads = max(1, (os.cpu_count() or 1) // config.workers) if config.workers > 1 else 0
    out = []
    for name in config.names:
        data = str(config.output_dir / "runs" / name / "tokenize" / "tokens.json")
        for seed in config.seeds:
            train = proxy_train_mapping(config, data, str(proxy_dir(config, name, seed)),
                                        seed + config.seed_offsets.get(name, 0))
            train["eval_every"] = 0  # the ablation's own evaluations replace the variant's valid loss
            out.append(ProxyJob(name, seed, train, points, docs, tasks, threads))
    return out


def run_proxies_in_rounds(config: AblateConfig, all_jobs: list[ProxyJob], say: Callable[[str], None]
                          ) -> dict[str, int]:
    """Every proxy run, in rounds of one evaluation interval, with the early-stopping rule between rounds.

    Why rounds: the rule compares every variant's interval at a point, so no variant may run ahead of a decision
    it could be stopped by; training all runs to one point, deciding, then the next point is the simplest order
    that stops a run where the rule says and never later. A round ends at a checkpoint (checkpoint_every is
    eval_every) and the next resumes from it, exactly (the same weights as one go, `proxy._trainer_class`); the cost
    is a process start per run per round. Decisions are recomputed from the scores on disk at every round (and on
    a rerun), so a killed ablation decides the same again; a stopped run's `done.json` says where and why, and is
    never trained again. Returns {trained_now, found_finished} counted in runs."""
    from dataclasses import replace

    from tokenmill.ablate import early
    from tokenmill.ablate.proxy import stop_proxy
    from tokenmill.ablate.report import early_stop_metric, interval_curves, lower_is_better

    es = config.early_stop
    points = config.proxy.eval_steps()
    base = config.base_name
    found = {j.output for j in all_jobs if is_done(j.output)}
    say(f"proxy runs: {len(all_jobs)}, {len(found)} finished earlier; early stopping after {es.patience} "
        f"point(s) behind the best")
    trained: set[Path] = set()
    stopped: dict[str, int] = {}
    pool = pool_of(config) if config.workers > 1 else None
    metric = None
    try:
        for i, p in enumerate(points):
            # The last round trains every running run to its end: no decision follows it (a stop there saves nothing).
            todo = [replace(j, until=p) for j in all_jobs if j.variant not in stopped and not is_done(j.output)]
            if todo:
                say(f"round to step {p}: {len(todo)} run(s)")
            results = list(pool.map(train_proxy, todo)) if pool is not None and len(todo) > 1 else \
                [train_proxy(j) for j in todo]
            trained |= {j.output for j, r in zip(todo, results) if r["trained_now"]}
            if i == len(points) - 1:
                break
            upto = {v: min(i, stopped.get(v, i)) + 1 for v in config.names}
            metric = metric or early_stop_metric(config)
            curves = interval_curves(config, metric, upto)
            for v, k in sorted(early.decide(curves, lower_is_better(metric), es.patience, [base]).items()):
                if v in stopped:
                    continue
                stopped[v] = k
                say(f"{v}: stopped at step {points[k]} ({metric} behind the best for {es.patience} point(s))")
                for j in all_jobs:
                    if j.variant == v:
                        stop_proxy(j, points[k], {"metric": metric, "patience": es.patience})
    finally:
        if pool is not None:
            pool.shutdown()
    return {"trained_now": len(trained - found), "found_finished": len(found)}


def run_ablation(config: AblateConfig, say: Callable[[str], None] = log.info, reporter=None,
                 ray_address: str | None = None) -> dict[str, Any]:
    """The ablation, resumable: checked before any work, pipelines, held-out set, proxy runs, then the report
    (`report.json`). Returns {report, trained_now, found_finished}."""
    from tokenmill.ablate.report import write_report

    check(config)
    out = config.output_dir
    out.mkdir(parents=True, exist_ok=True)
    _dump(out / CONFIG_FILE, {**json.loads(config.model_dump_json()), "base_dir": config.base_dir})
    pipelines = run_pipelines(config, say, reporter, ray_address)
    docs, removed = prepare_heldout(config)
    plan = {"variants": {n: {k: v for k, v in p.items() if k != "runner"} for n, p in pipelines.items()},
            "heldout": {"documents": {s: len(d) for s, d in docs.items()}, "removed_as_trained": removed}}
    _dump(out / PLAN_FILE, plan)
    counts = {"trained_now": 0, "found_finished": 0}
    if config.variants:
        if config.early_stop is not None and config.early_stop.apply:
            counts = run_proxies_in_rounds(config, jobs(config, docs), say)
        else:
            results = run_proxies(config, jobs(config, docs), say)
            counts = {"trained_now": sum(r["trained_now"] for r in results),
                      "found_finished": sum(not r["trained_now"] for r in results)}
    if config.mixture is not None:
        from tokenmill.ablate.mixture import run_mixture

        more = run_mixture(config, docs, say)
        counts = {k: counts[k] + more[k] for k in counts}
    report_path = write_report(out)
    return {"report": str(report_path), **counts}
