"""Every problem of an ablation config, found before any work (`tokenmill ablate validate`)."""

from __future__ import annotations

from pydantic import ValidationError

from tokenmill.ablate.config import AblateConfig, proxy_train_mapping, variants
from tokenmill.ablate.tasks import read_items
from tokenmill.config_base import key_path
from tokenmill.errors import ConfigError


def problems(config: AblateConfig) -> list[str]:
    """Every problem found before any work, one line each: each variant's run config validated by the pipeline's own
    model, the proxy by the trainer's, the tasks' files read; the held-out split the same in every variant."""
    from tokenmill.pipeline.config import parse_config
    from tokenmill.train.config import TrainConfig

    out: list[str] = []
    try:
        all_variants = variants(config)
    except ConfigError as err:
        return [str(err)]
    splits = {}
    for v in all_variants:
        try:
            run = parse_config(v.data, v.base_dir)
        except ConfigError as err:
            lines = str(err).splitlines()
            out += [f"variants.{v.name}: {line.strip()}" for line in lines[1:]] or [f"variants.{v.name}: {err}"]
            continue
        tokenize = run.stages.tokenize
        if tokenize is None:
            out.append(f"variants.{v.name}: stages.tokenize is not configured; a proxy trains on its tokens")
            continue
        splits[v.name] = (run.seed, tokenize.valid_fraction)
        if config.evaluations.heldout.enabled and tokenize.valid_fraction <= 0:
            out.append(f"variants.{v.name}: stages.tokenize.valid_fraction is 0: no document is held out; set it "
                       f"above 0, or evaluations.heldout.enabled: false")
    if len(set(splits.values())) > 1:
        shown = ", ".join(f"{n}: seed {s}, valid_fraction {f}" for n, (s, f) in splits.items())
        out.append(f"variants: the held-out split (run seed and stages.tokenize.valid_fraction) differs ({shown}); "
                   f"it must be one split for all, or a variant would train on another's held-out documents")
    try:
        TrainConfig.model_validate(proxy_train_mapping(config, "unused", "unused", config.seeds[0]))
    except ValidationError as err:
        out += [f"proxy: {key_path(e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in err.errors()]
    out += _early_and_mixture(config, all_variants[0].data)
    for i, task in enumerate(config.evaluations.tasks):
        try:
            items = read_items(task, config.resolve(task.path))
        except (OSError, ValueError) as err:
            out.append(f"evaluations.tasks[{i}].path: {err}")
            continue
        if not items:
            out.append(f"evaluations.tasks[{i}].path: {task.path!r} holds no item")
    return out


def check(config: AblateConfig) -> None:
    """Raise ConfigError listing `problems(config)`, if any."""
    found = problems(config)
    if found:
        raise ConfigError("invalid ablation:\n" + "\n".join(f"  {p}" for p in found))


def _early_and_mixture(config: AblateConfig, base: dict) -> list[str]:
    """The early-stopping metric names a metric the ablation scores; the mixture's sources and target are the
    base's sources, and its runs are at least one step."""
    out = []
    sources = [s.get("name") for s in base.get("sources", []) if isinstance(s, dict)]
    es = config.early_stop
    if es is not None and es.metric is not None:
        tasks = {t.name for t in config.evaluations.tasks}
        parts = es.metric.split("/")
        held = len(parts) == 3 and parts[0] == "heldout" and parts[2] == "bpb" and (
            parts[1] in sources or parts[1] == "all")
        task = len(parts) == 2 and parts[0] in tasks and parts[1] in ("acc", "acc_norm", "p_correct")
        if not (held and config.evaluations.heldout.enabled) and not task:
            out.append(f"early_stop.metric: {es.metric!r} is not scored; use heldout/<source>/bpb (sources: "
                       f"{', '.join(sources)}, or all) or <task>/<acc|acc_norm|p_correct> (tasks: "
                       f"{', '.join(sorted(tasks)) or 'none'})")
    m = config.mixture
    if m is not None:
        if not config.evaluations.heldout.enabled:
            out.append("mixture: the search minimises held-out loss; set evaluations.heldout.enabled: true")
        for key, names in (("sources", m.sources), ("target", m.target)):
            unknown = [n for n in names or [] if n not in sources]
            if unknown:
                out.append(f"mixture.{key}: {', '.join(unknown)} is not a source of the base run config (its "
                           f"sources: {', '.join(sources)})")
        if m.sources is None and len(sources) < 2:
            out.append(f"mixture: the base run config has {len(sources)} source(s); a mixture needs at least 2")
        tokens = m.tokens or config.proxy.tokens
        if tokens < config.proxy.tokens_per_step:
            out.append(f"mixture.tokens: {tokens} is less than one step of {config.proxy.tokens_per_step} tokens")
        if m.model is not None:
            from tokenmill.train.config import TrainConfig

            train = {**proxy_train_mapping(config, "unused", "unused", config.seeds[0]), "model": m.model}
            try:
                TrainConfig.model_validate(train)
            except ValidationError as err:
                out += [f"mixture.{key_path(e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
                        for e in err.errors()]
    return out
