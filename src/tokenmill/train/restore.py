"""Back to a checkpoint: the resume as a run starts (its config and data compared first), the rollback after a spike."""

from __future__ import annotations

import json
from typing import Any

from tokenmill.loader import ResumeError, TokenLoader
from tokenmill.loader.batches import next_served
from tokenmill.loader.options import LoaderOptions
from tokenmill.train.config import TrainConfig
from tokenmill.train.errors import EveryRankError
from tokenmill.train.guard import Verdict
from tokenmill.train.run import Run

# Config keys a resumed run may change without changing what it computes.
RESUMABLE_CHANGES = {"steps", "checkpoint_every", "keep_checkpoints", "eval_every", "eval_batches",
                     "log_every", "peak_tflops", "guard", "output", "compile", "deterministic", "allow_data_change",
                     "fingerprints", "watchdog", "faults"}


def resume(run: Run) -> int:
    """Load the newest checkpoint that verifies (model, optimizer, loader, guard) and cut the logs back to it: the
    step to go on from, 0 when there is none."""
    # The config and the data are compared before any tensor is read: a changed model is named, not a shape
    # mismatch, and changed data are named by stream.
    for info in run.checkpoints.checkpoints():
        _check_config(run, info.step, info.meta.get("extra", {}).get("config", {}))
    newest = run.checkpoints.latest(verify=False)
    if newest is not None:
        _check_loader(run, newest.step, newest.meta.get("extra", {}).get("loader"))
    loaded = run.checkpoints.load(run.app_state())
    if loaded is None:
        run.tokens_seen = 0
        # An attempt stopped before its first checkpoint (a full disk, a kill) left rows that step 0 undoes.
        dropped = run.metrics.truncate_after(0)
        run.ranks.truncate_after(0)
        if dropped:
            run.say.note(f"no checkpoint in {run.out}: starting at step 0, the {dropped} metrics row(s) of an "
                         "earlier attempt dropped")
        return 0
    extra = loaded.extra
    allow = _check_loader(run, loaded.step, extra["loader"], record=True)
    run.loader.load_state_dict(extra["loader"], allow=allow)
    run.guard.load_state_dict(extra["guard"])
    run.tokens_seen = int(extra.get("tokens_seen", 0))
    dropped = run.metrics.truncate_after(loaded.step)
    run.ranks.truncate_after(loaded.step)
    run.event({"step": loaded.step, "action": "resume", "checkpoint": str(loaded.path),
               "healthy": loaded.healthy, "metrics_rows_dropped": dropped, "world_size": run.d.world_size})
    return loaded.step


def _check_loader(run: Run, step: int, state: dict[str, Any] | None, record: bool = False) -> tuple[str, ...]:
    """The checkpoint's loader state against this run's data and layout; what ``load_state_dict`` must allow.

    Changed data stop the run, naming each stream and the flag, unless ``allow_data_change`` is set: then the
    mixture follows the new data too (the configured weights were compared with the config) and, with
    ``record``, the reporter is warned and a ``data_change`` event is written."""
    try:
        changes = run.loader.data_changes(state) if isinstance(state, dict) and "data" in state else []
    except (KeyError, TypeError):
        changes = []
    if changes and not run.cfg.allow_data_change:
        raise EveryRankError(f"the data changed since the checkpoint at step {step} in {run.out}: "
                             f"{'; '.join(changes)}. To go on at the same position of the new data's order "
                             "(not what the old data would have given), rerun with --allow-data-change or set "
                             "allow_data_change: true; or restore the data, or use another output")
    allow = ("data", "weights") if changes else ()
    try:
        run.loader.check_state_dict(state, allow)
    except ResumeError as err:
        raise EveryRankError(f"{run.out} holds a checkpoint (step {step}) that this run cannot continue: "
                             f"{err}") from None
    if changes and record:
        run.say.warn(f"DATA CHANGED since the checkpoint at step {step}: {'; '.join(changes)}. Continuing at "
                     f"sample {state['consumed_samples']} of the new data's order, as allow_data_change asks; "
                     "the samples from here are not those the old data would have given")
        run.event({"step": step, "action": "data_change", "changes": changes,
                   "consumed_samples": state["consumed_samples"],
                   "data": {"before": state["data"], "after": run.loader.state_dict()["data"]},
                   "weights": {"before": state["weights"]["slots"], "after": run.loader.slots()},
                   "datasets": {"before": state.get("datasets"), "after": run.loader.paths}})
    return allow


def _check_config(run: Run, step: int, old: dict[str, Any]) -> None:
    # Data are known by content: the loader's fingerprints (``_check_loader``) compare them, so the same files
    # under another path (another working directory, a copy) resume. Only the dataset weights are compared here.
    old, new = _without_data_paths(old), _without_data_paths(json.loads(run.cfg.model_dump_json()))
    if run.cfg.allow_data_change and len(old.get("data") or []) != len(new["data"]):
        old = {**old, "data": new["data"]}  # datasets added or removed: a data change, which this run allows
    old, new = _loader_keys(old), _loader_keys(new)
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k) and k not in RESUMABLE_CHANGES)
    if changed:
        raise EveryRankError(f"{run.out} holds a checkpoint (step {step}) of a run with another "
                             f"{', '.join(changed)}: " + "; ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
                                                                  for k in changed)
                             + ". Use another output, or restore those values.")


def _loader_keys(config: dict[str, Any]) -> dict[str, Any]:
    """A resolved config with the `loader` block as one `loader.<option>` key per option that changes what a run
    computes, every option present (a config dumps the block only when it is not all defaults); a checkpoint's
    config from before the block has its `num_workers` and `reset_position_ids` taken as the block's."""
    out = {k: v for k, v in config.items() if k not in ("loader", *TrainConfig.MOVED)}
    block = dict(config.get("loader") or {})
    if "reset_position_ids" in config:
        block.setdefault("position_ids", config["reset_position_ids"])
    options = {**LoaderOptions().model_dump(mode="json"), **block}
    out.update({f"loader.{k}": v for k, v in options.items() if k not in LoaderOptions.RESUMABLE})
    return out


def _without_data_paths(config: dict[str, Any]) -> dict[str, Any]:
    """A resolved config with each dataset reduced to its weight (where the data is does not matter)."""
    data = config.get("data")
    if not isinstance(data, list):
        return config
    return {**config, "data": [d.get("weight") if isinstance(d, dict) else d for d in data]}


def rollback(run: Run, verdict: Verdict, row: dict[str, Any]) -> int:
    """After a spike at ``verdict.step``: back to the newest healthy checkpoint, with the guard's lower learning
    rate and the offending global batches skipped through the loader, written to events.jsonl with their
    documents; the step it went back to."""
    documents = _documents(run.loader, row["batch"]) if run.d.main else []
    # load() verifies on rank 0 alone and broadcasts its verdict (hashing every file once); None: no healthy
    # checkpoint is committed. Healthy ones that all fail verification raise its CheckpointError, naming each.
    loaded = run.checkpoints.load(run.app_state(), healthy_only=True)
    if loaded is None:
        raise EveryRankError(f"step {verdict.step}: {verdict.reason}; no healthy checkpoint to roll back to "
                             f"(the first is written at step {run.cfg.checkpoint_every})")
    plan = run.guard.plan_rollback(verdict, loaded.step, loaded.extra.get("guard"))
    run.checkpoints.discard_after(loaded.step)
    # The steps after the checkpoint (the spike's included) were undone: their rows say so.
    run.metrics.mark_after(loaded.step, "rolled_back")
    run.ranks.mark_after(loaded.step, "rolled_back")
    # A checkpoint from before a data change that a resume accepted (every resume checks its checkpoint, so an
    # older one on other data means the change was accepted): the same position of the current data.
    state = loaded.extra["loader"]
    run.loader.load_state_dict(state, allow=("data", "weights") if run.loader.data_changes(state) else ())
    skipped = upcoming_batches(run.loader, plan.skip_from - loaded.step - 1, plan.skip_batches)
    if skipped:
        run.loader.skip([(k, k) for k in skipped])
    run.iterator = iter(run.loader)
    run.tokens_seen = int(loaded.extra.get("tokens_seen", 0))
    run.event({"step": verdict.step, "action": "rollback", "rule": verdict.rule, "reason": verdict.reason,
               "loss": row["loss"], "grad_norm": row["grad_norm"], "batch": row["batch"],
               "resumed_from_step": loaded.step, "lr_scale": plan.lr_scale, "clip_scale": plan.clip_scale,
               "skipped_batches": skipped, "rollbacks": plan.rollbacks, "documents": documents,
               **({"classification": row["classification"]} if "classification" in row else {})})
    # Saved again at once, so a crash from here on resumes with the skips and the lower learning rate.
    run.save(loaded.step, healthy=True)
    return loaded.step


def upcoming_batches(loader: TokenLoader, offset: int, count: int) -> list[int]:
    """Global batch indices ``loader`` serves ``offset`` .. ``offset + count - 1`` steps from its state."""
    k = next_served(loader.consumed_samples // loader.global_batch_size, loader.skips)
    out = []
    for i in range(offset + count):
        if i >= offset:
            out.append(k)
        k = next_served(k + 1, loader.skips)
    return out


def _documents(loader: TokenLoader, batch: int, limit: int = 64) -> list[dict[str, Any]]:
    """The documents of global batch ``batch`` (the first ``limit`` samples), for the rollback event."""
    from tokenmill.loader.explain import explain_batch

    try:
        rows = explain_batch(loader, batch)
    except Exception as err:  # noqa: BLE001 - attribution must never stop a rollback
        return [{"error": f"explain failed: {err}"}]
    keep = ("sample_in_batch", "rank", "source", "subset", "id", "tokens", "document_tokens", "preview")
    return [{k: r[k] for k in keep} for r in rows[:limit]]
