"""Mixture search, as RegMix (https://github.com/sail-sg/regmix) does it: random mixtures of the base's sources
around their natural proportions, one small proxy run each, a LightGBM regression from the weights to the target
loss, the mean of the best-predicted candidates as the predicted mixture, then that mixture trained against natural
proportions to check it.

Files, under `<ablation>/mixture/`: `plan.json` (sources, natural proportions, the mixtures drawn: fixed once),
`runs/mix-<i>/` (one proxy per mixture), `predicted.json` (the fit and the predicted weights), `train_predicted.yaml`
(a `tokenmill train` config with the predicted `weights`), `check/<predicted|natural>/seed-<s>/` (the check runs).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tokenmill.ablate.config import AblateConfig, proxy_train_mapping
from tokenmill.ablate.layout import HELDOUT_FILE
from tokenmill.errors import TokenmillError
from tokenmill.train.atomic import write_atomic

log = logging.getLogger(__name__)

FOLDER = "mixture"
LGBM_PARAMS: dict[str, Any] = {
    # RegMix's (regression_fitting/regression.ipynb): gradient-boosted trees, L2 regression, 1000 rounds at 0.01.
    "boosting_type": "gbdt", "objective": "regression", "n_estimators": 1000, "learning_rate": 1e-2,
    # A few dozen runs, not RegMix's 512: LightGBM's default leaf of 20 samples would make no split at all.
    "min_child_samples": 2, "min_child_weight": 0.0, "min_data_in_bin": 1,
    # The same fit on every machine and every run: one thread, a fixed histogram layout, seeded.
    "deterministic": True, "force_col_wise": True, "n_jobs": 1, "verbosity": -1,
}
STRENGTHS = 15
"""Concentrations per draw: one of this many values log-spaced over `strength` (RegMix's `np.logspace(..., 15)`)."""


def natural_proportions(tokens_json: Path, sources: Sequence[str], seq_len: int) -> np.ndarray:
    """Each source's share of the training samples (seq_len + 1 tokens) of the `train` split: the loader's own
    proportions when no weights are given (`loader.weights._by_samples`)."""
    from tokenmill.loader.streams import load_streams

    streams, _ = load_streams([str(tokens_json)], "train")
    samples = {s: 0 for s in sources}
    for stream in streams:
        if stream.source in samples:
            samples[stream.source] += stream.samples(seq_len)
    empty = [s for s, n in samples.items() if n == 0]
    if empty:
        raise TokenmillError(f"mixture.sources: {', '.join(empty)} has no training sample of seq_len + 1 tokens in "
                             f"{tokens_json}; the sources there are {sorted({s.source for s in streams})}")
    counts = np.array([samples[s] for s in sources], dtype=np.float64)
    return counts / counts.sum()


def draw(natural: np.ndarray, n: int, strength: tuple[float, float], min_weight: float,
         rng: np.random.Generator) -> np.ndarray:
    """(n, sources) mixtures: each from Dirichlet(natural x s), s one of `STRENGTHS` log-spaced values drawn at
    random; weights below `min_weight` set to 0, the rest renormalised."""
    levels = np.logspace(math.log10(strength[0]), math.log10(strength[1]), STRENGTHS)
    level = rng.integers(0, STRENGTHS, size=n)  # (n,)
    out = np.empty((n, len(natural)))
    for i, s in enumerate(levels):  # one call per strength, not per mixture: 100,000 candidates in a blink
        rows = level == i
        out[rows] = rng.dirichlet(natural * s, size=int(rows.sum()))
    out = np.where(out < min_weight, 0.0, out)
    zero = out.sum(axis=1) == 0  # every weight under the floor: keep the largest alone
    out[zero, np.argmax(natural)] = 1.0
    return out / out.sum(axis=1, keepdims=True)


def fit(weights: np.ndarray, losses: np.ndarray, params: dict[str, Any], seed: int):
    """A LightGBM regressor from mixture weights (n, k) to losses (n,)."""
    try:
        import lightgbm
    except ImportError:
        raise TokenmillError("mixture: the search fits a LightGBM regression; install it: pip install "
                             "'tokenmill[ablate]' (lightgbm)") from None
    model = lightgbm.LGBMRegressor(**{**LGBM_PARAMS, "random_state": seed, **params})
    model.fit(weights, losses)
    return model


def cross_validated_rank_correlation(weights: np.ndarray, losses: np.ndarray, params: dict[str, Any], seed: int,
                                     folds: int = 4) -> float:
    """Spearman's correlation between each run's measured loss and its prediction by a fit on the other folds (run
    i in fold i mod `folds`): how well the regression ranks mixtures it did not see (RegMix reports it on held-out
    runs)."""
    predicted = np.empty_like(losses)
    index = np.arange(len(losses))
    for f in range(folds):
        test = index % folds == f
        predicted[test] = fit(weights[~test], losses[~test], params, seed).predict(weights[test])
    return spearman(predicted, losses)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties): scipy's, which lightgbm brings; NaN when either side is
    constant."""
    from scipy.stats import rankdata

    ra, rb = rankdata(np.asarray(a, dtype=np.float64)), rankdata(np.asarray(b, dtype=np.float64))
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])


def search(model, natural: np.ndarray, candidates: int, top_k: int, strength: tuple[float, float],
           min_weight: float, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """The predicted best mixture: the mean of the `top_k` of `candidates` random mixtures (drawn as the runs' were)
    of lowest predicted loss (RegMix), and the mean of their predictions."""
    pool = draw(natural, candidates, strength, min_weight, rng)
    predicted = model.predict(pool)
    best = np.argsort(predicted, kind="stable")[:top_k]
    return pool[best].mean(axis=0), float(predicted[best].mean())


# The ablation's part: runs, fit, check.

def folder(config: AblateConfig) -> Path:
    return config.output_dir / FOLDER


def sources_of(config: AblateConfig) -> list[str]:
    """The sources mixed: `mixture.sources`, or every source of the base run config."""
    from tokenmill.ablate.config import base_mapping

    if config.mixture.sources is not None:
        return list(config.mixture.sources)
    return [s["name"] for s in base_mapping(config).get("sources", [])]


def _tokens_json(config: AblateConfig) -> Path:
    return config.output_dir / "runs" / config.base_name / "tokenize" / "tokens.json"


def _steps(config: AblateConfig) -> int:
    tokens = config.mixture.tokens or config.proxy.tokens
    return max(1, tokens // config.proxy.tokens_per_step)


def _dump(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(value, sort_keys=True, indent=1) + "\n")


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def plan(config: AblateConfig) -> dict[str, Any]:
    """Sources, natural proportions and the mixtures drawn (seeded by `mixture.seed`): saved once, read back."""
    path = folder(config) / "plan.json"
    settings = {**json.loads(config.mixture.model_dump_json()), "sources": sources_of(config),
                "proxy": json.loads(config.proxy.model_dump_json()), "seeds": config.seeds}
    if path.is_file():
        saved = _read(path)
        if saved.get("settings") != settings:
            changed = sorted(k for k in settings if saved.get("settings", {}).get(k) != settings[k])
            raise TokenmillError(f"{folder(config)}: made with other mixture settings ({', '.join(changed)} changed); "
                                 f"delete that folder to search again, or restore the settings")
        return saved
    m = config.mixture
    sources = settings["sources"]
    natural = natural_proportions(_tokens_json(config), sources, config.proxy.seq_len)
    mixtures = draw(natural, m.runs, m.strength, m.min_weight, np.random.default_rng([m.seed, 0]))
    value = {"sources": sources, "natural": [float(f"{x:.6g}") for x in natural],
             "mixtures": [[float(f"{x:.6g}") for x in row] for row in mixtures], "settings": settings}
    _dump(path, value)
    return value


def _weights(sources: Sequence[str], row: Sequence[float]) -> dict[str, float]:
    return {s: float(w) for s, w in zip(sources, row)}


def _job(config: AblateConfig, name: str, output: Path, seed: int, steps: int, weights: dict[str, float],
         docs: dict[str, list[tuple[str, str]]], model: str | dict | None = None):
    from tokenmill.ablate.proxy import ProxyJob

    train = proxy_train_mapping(config, str(_tokens_json(config)), str(output), seed, steps)
    train.update({"weights": weights, "eval_every": 0})
    if model is not None:
        train["model"] = model
    return ProxyJob(name, seed, train, (steps,), docs, {}, 0)


def target_sources(config: AblateConfig, docs: dict[str, list]) -> list[str]:
    target = config.mixture.target or sorted(docs)
    missing = [s for s in target if s not in docs]
    if missing:
        raise TokenmillError(f"mixture.target: {', '.join(missing)} has no held-out document; the held-out sources "
                             f"are {sorted(docs)}")
    return list(target)


def target_loss(scores: dict[str, Any], target: Sequence[str]) -> float:
    """Bits per byte pooled over the target sources' held-out documents."""
    nll = sum(sum(scores["heldout"][s]["nll"]) for s in target)
    nbytes = sum(sum(scores["heldout"][s]["bytes"]) for s in target)
    return nll / (math.log(2) * nbytes)


def check_seeds(config: AblateConfig) -> list[int]:
    return list(config.mixture.check_seeds or config.seeds)


def run_mixture(config: AblateConfig, docs: dict[str, list[tuple[str, str]]], say: Callable[[str], None]
                ) -> dict[str, int]:
    """The mixture search, resumable (every run an ordinary proxy run, never trained again once done): the mixtures'
    runs, the fit and search, the predicted mixture's train config, the check runs. Returns {trained_now,
    found_finished}."""
    from tokenmill.ablate.proxy import eval_path, run_proxies

    m = config.mixture
    p = plan(config)
    sources = p["sources"]
    target = target_sources(config, docs)
    steps = _steps(config)
    target_docs = {s: docs[s] for s in target}
    runs = [_job(config, f"mix-{i:03d}", folder(config) / "runs" / f"mix-{i:03d}", config.seeds[0], steps,
                 _weights(sources, row), target_docs, m.model) for i, row in enumerate(p["mixtures"])]
    say(f"mixture search: {len(runs)} mixtures of {', '.join(sources)}, {steps} steps each")
    results = run_proxies(config, runs, say)
    losses = np.array([target_loss(_read(eval_path(j.output, steps)), target) for j in runs])
    weights = np.array(p["mixtures"], dtype=np.float64)
    predicted_path = folder(config) / "predicted.json"
    if predicted_path.is_file():
        predicted = _read(predicted_path)
    else:
        model = fit(weights, losses, m.lightgbm, m.seed)
        best, expected = search(model, np.array(p["natural"]), m.candidates, m.top_k, m.strength, m.min_weight,
                                np.random.default_rng([m.seed, 1]))
        predicted = {"weights": {s: round(float(w), 4) for s, w in zip(sources, best)},
                     "predicted_loss": float(f"{expected:.6g}"),
                     "predicted_natural_loss": float(f"{float(model.predict(np.array([p['natural']]))[0]):.6g}"),
                     "cv_rank_correlation": float(f"{cross_validated_rank_correlation(weights, losses, m.lightgbm, m.seed):.6g}"),
                     "lightgbm": {**LGBM_PARAMS, "random_state": m.seed, **m.lightgbm}}
        _dump(predicted_path, predicted)
    write_train_config(config, predicted["weights"])
    say("predicted mixture: " + ", ".join(f"{s} {w:.3f}" for s, w in predicted["weights"].items()))
    checks = []
    for arm, w in (("predicted", predicted["weights"]), ("natural", _weights(sources, p["natural"]))):
        for s in check_seeds(config):
            checks.append(_job(config, arm, folder(config) / "check" / arm / f"seed-{s}", s, config.proxy.steps, w,
                               docs))
    results += run_proxies(config, checks, say)
    return {"trained_now": sum(r["trained_now"] for r in results),
            "found_finished": sum(not r["trained_now"] for r in results)}


def write_train_config(config: AblateConfig, weights: dict[str, float]) -> Path:
    """`train_predicted.yaml`: the proxy's `tokenmill train` config on the base's tokens with the predicted
    mixture as loader `weights` (change model, steps and output for the real run)."""
    import yaml

    train = proxy_train_mapping(config, str(_tokens_json(config)), str(folder(config) / "predicted-run"),
                                config.seeds[0])
    train.pop("log_every", None)
    train["weights"] = dict(weights)
    path = folder(config) / "train_predicted.yaml"
    write_atomic(path, "# The mixture search's predicted best mixture as loader weights (tokenmill ablate).\n"
                 + yaml.safe_dump(train, sort_keys=False))
    return path


def mixture_report(config: AblateConfig) -> dict[str, Any]:
    """The mixture part of the report: the runs' weights and target losses, the fit, the predicted weights, and the
    check (per arm the target loss over seeds with its interval; predicted - natural with a bootstrap interval over
    seeds and items, and its verdict)."""
    from tokenmill.ablate import stats
    from tokenmill.ablate.proxy import DONE, eval_path

    base = folder(config)
    p = plan(config)
    sources = p["sources"]
    steps = _steps(config)
    heldout = _read(config.output_dir / HELDOUT_FILE)["docs"]
    target = target_sources(config, heldout)
    predicted_path = base / "predicted.json"
    not_done = [f"mix-{i:03d}" for i in range(len(p["mixtures"]))
                if not (base / "runs" / f"mix-{i:03d}" / DONE).is_file()]
    if not predicted_path.is_file() or not_done:
        raise TokenmillError(f"{base}: the mixture search is not finished ({len(not_done)} mixture run(s) to train"
                             f"{'' if predicted_path.is_file() else ', no fit yet'}); run `tokenmill ablate CONFIG`")
    predicted = _read(predicted_path)
    runs = []
    tokens = flops = 0.0
    for i, row in enumerate(p["mixtures"]):
        out = base / "runs" / f"mix-{i:03d}"
        done = _read(out / DONE)
        tokens += done["tokens"]
        flops += done["tokens"] * done["flops_per_token"]
        runs.append({"weights": _weights(sources, row),
                     "loss": target_loss(_read(eval_path(out, steps)), target)})
    seeds = check_seeds(config)
    last = config.proxy.steps
    arms: dict[str, Any] = {}
    arm_runs = {}
    for arm in ("predicted", "natural"):
        evals = {}
        for i, s in enumerate(seeds):
            out = base / "check" / arm / f"seed-{s}"
            if not (out / DONE).is_file():
                raise TokenmillError(f"{out}: the mixture check run is not finished; run `tokenmill ablate CONFIG`")
            done = _read(out / DONE)
            tokens += done["tokens"]
            flops += done["tokens"] * done["flops_per_token"]
            evals[i] = _read(eval_path(out, last))
        arm_runs[arm] = _target_runs(evals, target)
        mean, low, high = stats.mean_interval(arm_runs[arm].per_seed(), config.confidence)
        per_source = {s: float(np.mean([sum(e["heldout"][s]["nll"]) / (math.log(2) * sum(e["heldout"][s]["bytes"]))
                                        for e in evals.values()])) for s in sorted(heldout)}
        arms[arm] = {"loss": {"mean": mean, "low": low, "high": high}, "per_seed": list(arm_runs[arm].per_seed()),
                     "per_source_bpb": per_source}
    diff, low, high = stats.bootstrap_difference(arm_runs["predicted"], arm_runs["natural"], config.bootstrap,
                                                 config.confidence, ["mixture", "predicted", "natural"])
    return {"sources": sources, "natural": _weights(sources, p["natural"]), "target": target,
            "steps_per_run": steps, "runs": runs, "fit": {k: v for k, v in predicted.items() if k != "weights"},
            "predicted": predicted["weights"], "train_config": f"{FOLDER}/train_predicted.yaml",
            "check": {"seeds": seeds, "steps": last, "arms": arms,
                      "difference": {"predicted_minus_natural": diff, "low": low, "high": high,
                                     "verdict": stats.verdict(low, high, True)}},
            "compute": {"tokens": tokens, "train_flops": flops}}


def _target_runs(evals: dict[int, dict], target: Sequence[str]):
    """The check arm's target metric as `stats.Runs` (per seed, per held-out document of the target sources)."""
    from tokenmill.ablate.stats import Runs

    nums, dens = [], []
    for k in sorted(evals):
        nll = np.concatenate([np.asarray(evals[k]["heldout"][s]["nll"], dtype=np.float64) for s in target])
        nbytes = np.concatenate([np.asarray(evals[k]["heldout"][s]["bytes"], dtype=np.float64) for s in target])
        nums.append(nll / math.log(2))
        dens.append(nbytes)
    return Runs(np.stack(nums), np.stack(dens))
