"""Early stopping in `tokenmill ablate`, measured: where the rule stops each variant, what that saves, and how often a
stop would have been wrong against the final verdicts; prints JSON.

    python benchmarks/ablate_early.py [--dir bench] [--patience 3] [--apply] [--trials 1] [--workers 1]
                                      [--clean-docs 300] [--steps 40]

The known-truth corpus of tests/ablate (300 generated clean documents, a small grammar) and five variants: the base,
`same` (identical data under another name), and `junk10`, `junk30`, `junk50` (planted junk, word-shuffled clean text
and repeated boilerplate, at 10%, 30% and 50% of the variant's corpus); opt-tiny proxies, seq_len 32, 8 sequences a
step, 40 steps, evaluation every 10, 3 seeds, as tests/ablate/test_ablation.py. Without `--apply` the rule only
measures (`early_stop.apply: false`): every run trains to the end, and the report gives, per variant, the point the
rule would have stopped it at and the compute saved, and per patience 1..P the stops that the final verdict (the
variant against the final best, paired bootstrap) contradicts. With `--apply` the runs are stopped; `seconds` then
shows the wall time saved. `--trials N`: N such ablations, each its own corpus (seed t) and training seeds (3t ..
3t+2), the check summed over them. The folder <dir>/ablate_early[_apply]/ is made afresh.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARES = {"junk10": 0.1, "junk30": 0.3, "junk50": 0.5}


def trial(root: Path, t: int, args) -> dict:
    """One ablation: the corpus drawn with seed t, training seeds 3t .. 3t+2; its early-stop summary."""
    import numpy as np

    from tests.ablate.corpus import junk_text, write_ablation, write_corpus
    from tokenmill.ablate.ablation import run_ablation
    from tokenmill.ablate.config import load_ablate_config

    clean = args.clean_docs
    write_corpus(root, clean_docs=clean, seed=t)
    variants = {"same": {}}
    rng = np.random.default_rng([t, 1])
    for name, share in SHARES.items():
        (root / name).mkdir()
        with open(root / name / "docs.jsonl", "w") as f:
            for i in range(round(clean * share / (1 - share))):
                f.write(json.dumps({"id": f"{name}-{i}", "text": junk_text(rng, i)}) + "\n")
        variants[name] = {"sources+": [{"name": name, "format": "jsonl", "paths": [f"{name}/*.jsonl"],
                                        "id_field": "id"}]}
    proxy = {"model": "opt-tiny", "seq_len": 32, "global_batch_size": 8, "tokens": 32 * 8 * args.steps,
             "eval_every": 10, "lr": 0.01, "warmup_steps": 2,
             "train": {"dropout": 0.0, "loader": {"num_workers": 0}}}  # tests/ablate/corpus.py's, steps aside
    path = write_ablation(root, variants, early_stop={"patience": args.patience, "apply": args.apply},
                          workers=args.workers, proxy=proxy, seeds=[3 * t, 3 * t + 1, 3 * t + 2])
    t0 = time.perf_counter()
    result = run_ablation(load_ablate_config(path))
    seconds = time.perf_counter() - t0
    report = json.loads(Path(result["report"]).read_text())
    es = report["early_stop"]
    return {
        "seconds": round(seconds, 1), "runs_trained": result["trained_now"], "metric": es["metric"],
        "tokens": report["compute"]["tokens"],
        "variants": {v: {k: r.get(k) for k in ("step", "fraction_of_budget", "final_verdict_against_best")}
                     for v, r in es["variants"].items()},
        "final_verdicts_against_base": {v: c[es["metric"]]["verdict"] for v, c in report["comparisons"].items()},
        "saved_tokens": es["saved"]["tokens"], "saved_train_flops": es["saved"]["train_flops"],
        "check": [{k: r[k] for k in ("patience", "runs_checked", "would_stop", "wrong", "stopped_at")}
                  for r in es["check"]],
        # the report's early signal on the early-stop metric: the verdict against the base at 25% / 50% of the
        # budget, and at every earlier point, against the final one (variants trained to the end)
        "early_signal": report["early_signal"]["by_metric"][es["metric"]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="bench")
    parser.add_argument("--patience", type=int, default=3)
    parser.add_argument("--apply", action="store_true")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--clean-docs", type=int, default=300)
    parser.add_argument("--steps", type=int, default=40, help="proxy steps (evaluation every 10)")
    parser.add_argument("--trials", type=int, default=1, help="ablations, each its own corpus and training seeds")
    args = parser.parse_args(argv)

    from tokenmill.pipeline.ray_cluster import start_local

    root = Path(args.dir).resolve() / ("ablate_early_apply" if args.apply else "ablate_early")
    if root.exists():
        shutil.rmtree(root)
    start_local(num_cpus=2)
    trials = [trial(root / f"trial-{t}", t, args) for t in range(args.trials)]
    runs = 5 * 3 * args.trials
    budget = runs * 32 * 8 * args.steps
    saved = sum(t["saved_tokens"] for t in trials)
    check = []
    for k in range(args.patience):
        rows = [t["check"][k] for t in trials]
        stops, wrong = sum(r["would_stop"] for r in rows), sum(r["wrong"] for r in rows)
        check.append({"patience": k + 1, "variants_checked": sum(r["runs_checked"] for r in rows),
                      "would_stop": stops, "wrong": wrong, "wrong_fraction": wrong / stops if stops else None})
    signal = {"at": [{"fraction": row["fraction"], "step": row["step"],
                      "agree": sum(t["early_signal"]["at"][i]["agree"] for t in trials),
                      "of": sum(t["early_signal"]["at"][i]["of"] for t in trials)}
                     for i, row in enumerate(trials[0]["early_signal"]["at"])],
              "every_point": {k: sum(t["early_signal"]["every_point"][k] for t in trials) for k in ("agree", "of")}}
    out = {
        "apply": args.apply, "early_signal": signal, "patience": args.patience, "trials": args.trials,
        "seconds": round(sum(t["seconds"] for t in trials), 1), "tokens_trained": sum(t["tokens"] for t in trials),
        "saved_tokens": saved, "check": check, "per_trial": trials,
        "ratios": {"saved_tokens_ratio": saved / budget,
                   **{f"wrong_stops_ratio_patience_{r['patience']}": r["wrong_fraction"] for r in check
                      if r["wrong_fraction"] is not None}},
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
