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
