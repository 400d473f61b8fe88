"""The false-positive rate of `tokenmill ablate`, measured on real proxy runs: how often two arms trained on the very
same data, with independent seeds, are called "no detectable difference"; prints JSON.

    python benchmarks/ablate_false_positives.py [--dir bench] [--trials 20] [--clean-docs 300] [--steps 40]
                                                [--workers 1] [--fresh]

The known-truth corpus of tests/ablate (300 generated clean documents, a small grammar) and the known-truth test's
proxies (opt-tiny, seq_len 32, 8 sequences a step, 40 steps, evaluation every 10, 3 seeds, 30 held-out
documents). One ablation holds 2 x trials groups of identical data: the base and `same01` .. `sameNN`, each with
its own `seed_offsets` (1000 x its index), so every group's 3 runs are independent of every other's; the pipeline
runs once and every other variant links all of its stages. Trial k compares group 2k with group 2k+1, disjoint
groups, so the trials are independent: the verdict is the report's own (`stats.bootstrap_difference` over seeds
and items, t interval at S-1 degrees of freedom, `stats.verdict`) on held-out bits per byte, at the last point and
at every point. Also given: the report's own verdicts of every group against the base (2 x trials - 1 of them,
not independent: they share the base's runs). The rate comes with its Wilson score interval.

The ablation folder <dir>/ablate_false_positives/ is resumed (finished runs are not trained again), so a larger
--trials after a smaller one trains only the new groups; --fresh removes it first.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

METRIC = "heldout/clean/bpb"


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95% at the default z)."""
    if n == 0:
        return math.nan, math.nan
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def group_names(trials: int) -> list[str]:
    return ["base"] + [f"same{i:02d}" for i in range(1, 2 * trials)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="bench")
    parser.add_argument("--trials", type=int, default=20, help="independent pairs of identical-data groups")
    parser.add_argument("--clean-docs", type=int, default=300)
    parser.add_argument("--steps", type=int, default=40, help="proxy steps (evaluation every 10)")
    parser.add_argument("--workers", type=int, default=1, help="proxy runs trained at once (processes)")
    parser.add_argument("--fresh", action="store_true", help="remove the ablation folder first")
    args = parser.parse_args(argv)

    from tests.ablate.corpus import write_ablation, write_corpus
    from tokenmill.ablate import stats
    from tokenmill.ablate.ablation import run_ablation
    from tokenmill.ablate.config import load_ablate_config
    from tokenmill.ablate.report import _runs, _scores
    from tokenmill.pipeline.ray_cluster import start_local

    root = Path(args.dir).resolve() / "ablate_false_positives"
    if args.fresh and root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    names = group_names(args.trials)
    if not (root / "base.yaml").is_file():  # written once: a rewrite would change the ingest stamp on a resume
        write_corpus(root, clean_docs=args.clean_docs, seed=0)
    proxy = {"model": "opt-tiny", "seq_len": 32, "global_batch_size": 8, "tokens": 32 * 8 * args.steps,
             "eval_every": 10, "lr": 0.01, "warmup_steps": 2,
             "train": {"dropout": 0.0, "loader": {"num_workers": 0}}}  # tests/ablate/corpus.py's, steps aside
    path = write_ablation(root, {n: {} for n in names[1:]}, proxy=proxy,
                          seed_offsets={n: 1000 * i for i, n in enumerate(names) if i}, workers=args.workers)
    start_local(num_cpus=2)
    t0 = time.perf_counter()
    config = load_ablate_config(path)
    result = run_ablation(config)
    seconds = time.perf_counter() - t0
    report = json.loads(Path(result["report"]).read_text())

    points = config.proxy.eval_steps()
    scores = {n: _scores(config, n, points) for n in names}
    trials = []
    for k in range(args.trials):
        a, b = names[2 * k], names[2 * k + 1]
        per_point = []
        for p in points:
            diff, low, high = stats.bootstrap_difference(_runs(scores[b][p], METRIC), _runs(scores[a][p], METRIC),
                                                         config.bootstrap, config.confidence, [b, a, METRIC, p])
            per_point.append({"step": p, "difference": round(diff, 6), "low": round(low, 6), "high": round(high, 6),
                              "verdict": stats.verdict(low, high, True)})
        trials.append({"arms": [a, b], "final": per_point[-1], "points": per_point})
    same_final = sum(t["final"]["verdict"] == stats.SAME for t in trials)
    same_points = sum(q["verdict"] == stats.SAME for t in trials for q in t["points"])
    n_points = len(trials) * len(points)
    against_base = {v: c[METRIC]["verdict"] for v, c in report["comparisons"].items()}
    base_same = sum(v == stats.SAME for v in against_base.values())
    out = {
        "trials": args.trials, "groups": len(names), "runs": 3 * len(names), "metric": METRIC,
        "proxy": {"model": "opt-tiny", "seq_len": 32, "global_batch_size": 8, "steps": args.steps,
                  "eval_steps": points},
        "seconds": round(seconds, 1), "runs_trained_now": result["trained_now"],
        "found_finished": result["found_finished"], "tokens_trained": report["compute"]["tokens"],
        "independent_pairs": {
            "no_difference_at_the_end": same_final, "of": len(trials),
            "rate": same_final / len(trials), "wilson_95": wilson(same_final, len(trials)),
            "no_difference_at_every_point": same_points, "of_points": n_points,
            "rate_over_points": same_points / n_points, "wilson_95_over_points": wilson(same_points, n_points),
            "called": [{"arms": t["arms"], **t["final"]} for t in trials if t["final"]["verdict"] != stats.SAME],
        },
        "report_against_the_base": {
            "no_difference_at_the_end": base_same, "of": len(against_base), "rate": base_same / len(against_base),
            "called": {v: x for v, x in against_base.items() if x != stats.SAME},
        },
        "ratios": {"false_positive_rate": 1 - same_final / len(trials)},
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
