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
from tokenmill.ablate.proxy import ProxyJob, is_done, train_proxy
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
            train = proxy_train_mapping(config, data, str(proxy_dir(config, name, seed)), seed)
            train["eval_every"] = 0  # the ablation's own evaluations replace the variant's valid loss
            out.append(ProxyJob(name, seed, train, points, docs, tasks, threads))
    return out


def run_proxies(config: AblateConfig, all_jobs: list[ProxyJob], say: Callable[[str], None]) -> list[dict]:
    """Train every proxy run not yet finished, up to `workers` at once (processes); finished ones are skipped."""
    todo = [j for j in all_jobs if not is_done(j.output)]
    say(f"proxy runs: {len(all_jobs)}, {len(all_jobs) - len(todo)} finished earlier")
    results = [train_proxy(j) for j in all_jobs if is_done(j.output)]
    if config.workers == 1 or len(todo) < 2:
        for j in todo:
            say(f"training {j.variant} seed {j.seed}")
            results.append(train_proxy(j))
        return results
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(config.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for j, result in zip(todo, pool.map(train_proxy, todo)):
            say(f"trained {j.variant} seed {j.seed}")
            results.append(result)
    return results


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
    results = run_proxies(config, jobs(config, docs), say)
    report_path = write_report(out)
    return {"report": str(report_path), "trained_now": sum(r["trained_now"] for r in results),
            "found_finished": sum(not r["trained_now"] for r in results)}
