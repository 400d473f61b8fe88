"""Checkpoints: round trip, commit marker, verification with fallback, pruning, resharding under FSDP2."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import tempfile
from pathlib import Path

import pytest
import torch
from torch import nn

from tokenmill.train.checkpoint import (
    MARKER,
    META,
    CheckpointError,
    CheckpointManager,
    ModelOptimizerState,
    UntrustedCheckpointError,
    rng_state,
    set_rng_state,
)


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3))


def _trained(seed: int = 0, steps: int = 2):
    """A model and an AdamW that took ``steps`` steps, so the optimizer has state."""
    model = _model(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=10)
    g = torch.Generator().manual_seed(seed + 100)
    for _ in range(steps):
        model(torch.randn(4, 6, generator=g)).pow(2).mean().backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    return model, opt, sched


def _app(model, opt, sched=None) -> dict:
    app = {"train": ModelOptimizerState(model, opt)}
    if sched is not None:
        app["sched"] = sched
    return app


def _save(mgr: CheckpointManager, step: int, seed: int | None = None, healthy: bool = False, **extra) -> nn.Module:
    model, opt, _ = _trained(seed if seed is not None else step)
    mgr.save(step, _app(model, opt), healthy=healthy, extra={"step_seen": step, **extra})
    return model


def _same_params(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_round_trip_restores_model_optimizer_scheduler_and_extra(tmp_path):
    model, opt, sched = _trained(seed=1, steps=3)
    mgr = CheckpointManager(tmp_path)
    extra = {"loader": {"consumed_samples": 96, "epoch": 0}, "config": {"lr": 0.01}, "rng": rng_state()}
    path = mgr.save(3, _app(model, opt, sched), healthy=True, extra=extra)
    assert path == tmp_path / "step-000000003"
    assert sorted(p.name for p in path.iterdir()) == [".metadata", MARKER, "__0_0.distcp", META]
    meta = json.loads((path / META).read_text())
    assert meta["step"] == 3 and meta["healthy"] is True and meta["world_size"] == 1

    model2, opt2, sched2 = _trained(seed=2, steps=1)
    assert not _same_params(model, model2)
    loaded = mgr.load(_app(model2, opt2, sched2))
    assert loaded is not None and loaded.step == 3 and loaded.healthy
    assert loaded.extra == extra
    assert _same_params(model, model2)
    for p1, p2 in zip(model.parameters(), model2.parameters()):
        s1, s2 = opt.state[p1], opt2.state[p2]
        assert s1.keys() == s2.keys()
        for k in s1:
            assert torch.equal(torch.as_tensor(s1[k]), torch.as_tensor(s2[k])), k
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    assert sched2.state_dict() == sched.state_dict()

    # Training continues identically from the restored state.
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(7))
    for m, o in ((model, opt), (model2, opt2)):
        m(x).pow(2).mean().backward()
        o.step()
    assert _same_params(model, model2)


def test_rng_state_round_trip_through_json():
    state = json.loads(json.dumps(rng_state()))
    a = torch.rand(5)
    set_rng_state(state)
    assert torch.equal(torch.rand(5), a)


def test_no_checkpoint_gives_none(tmp_path):
    model, opt, _ = _trained()
    assert CheckpointManager(tmp_path / "absent").load(_app(model, opt)) is None
    assert CheckpointManager(tmp_path).latest() is None


def test_extra_must_be_json(tmp_path):
    model, opt, _ = _trained()
    with pytest.raises(CheckpointError, match="JSON"):
        CheckpointManager(tmp_path).save(1, _app(model, opt), healthy=True, extra={"t": torch.zeros(2)})
    assert not list(tmp_path.iterdir())


def test_prune_keeps_last_k_and_newest_healthy(tmp_path):
    mgr = CheckpointManager(tmp_path, keep=2)
    _save(mgr, 10, healthy=True)
    _save(mgr, 20, healthy=True)
    for step in (30, 40, 50):
        _save(mgr, step, healthy=False)
    assert [c.step for c in mgr.checkpoints()] == [20, 40, 50]
    assert mgr.latest().step == 50
    assert mgr.latest(healthy_only=True).step == 20
    mgr.mark(40, True)
    _save(mgr, 60)
    assert [c.step for c in mgr.checkpoints()] == [40, 50, 60]


def test_mark_rewrites_healthy_flag(tmp_path):
    mgr = CheckpointManager(tmp_path)
    _save(mgr, 5, healthy=False, note="x")
    assert mgr.latest(healthy_only=True) is None
    mgr.mark(5, True)
    info = mgr.latest(healthy_only=True)
    assert info.step == 5 and info.healthy and info.meta["extra"]["note"] == "x"
    assert mgr.verify(info.path) is None  # meta.json is not hashed, so marking keeps it valid
    mgr.mark(5, False)
    assert mgr.latest(healthy_only=True) is None
    with pytest.raises(CheckpointError, match="step 6"):
        mgr.mark(6, True)


@pytest.mark.parametrize("damage", ["truncate", "delete", "flip", "metadata", "marker"])
def test_damaged_latest_falls_back_to_previous(tmp_path, caplog, damage):
    mgr = CheckpointManager(tmp_path)
    good = _save(mgr, 1, healthy=True)
    _save(mgr, 2, healthy=True)
    bad = tmp_path / "step-000000002"
    shard = bad / "__0_0.distcp"
    if damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:100])
    elif damage == "delete":
        shard.unlink()
    elif damage == "flip":
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    elif damage == "metadata":
        (bad / ".metadata").write_bytes(b"garbage")
    elif damage == "marker":
        (bad / MARKER).write_text("{not json")

    model, opt, _ = _trained(seed=9)
    with caplog.at_level(logging.WARNING, logger="tokenmill.train.checkpoint"):
        loaded = mgr.load(_app(model, opt))
    assert loaded.step == 1 and loaded.extra["step_seen"] == 1
    assert _same_params(model, good)
    assert any("step-000000002" in r.getMessage() and "falling back" in r.getMessage() for r in caplog.records)


def test_damage_that_verification_cannot_see_still_falls_back(tmp_path, caplog):
    """Files consistent with the marker but wrong for the model (here: hashing off and a shard
    truncated) make the DCP load raise; that is caught and the previous checkpoint loaded."""
    mgr = CheckpointManager(tmp_path, hash_files=False)
    good = _save(mgr, 1)
    _save(mgr, 2)
    shard = tmp_path / "step-000000002" / "__0_0.distcp"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    marker = json.loads((shard.parent / MARKER).read_text())
    marker["files"]["__0_0.distcp"]["bytes"] = len(data) // 2
    (shard.parent / MARKER).write_text(json.dumps(marker))
    model, opt, _ = _trained(seed=9)
    with caplog.at_level(logging.WARNING, logger="tokenmill.train.checkpoint"):
        loaded = mgr.load(_app(model, opt))
    assert loaded.step == 1 and _same_params(model, good)
    assert any("load failed" in r.getMessage() for r in caplog.records)


def test_all_damaged_raises_instead_of_restarting_from_scratch(tmp_path):
    mgr = CheckpointManager(tmp_path)
    _save(mgr, 1)
    (tmp_path / "step-000000001" / "__0_0.distcp").unlink()
    model, opt, _ = _trained()
    with pytest.raises(CheckpointError, match="step-000000001.*missing"):
        mgr.load(_app(model, opt))


def test_missing_marker_is_an_unfinished_save(tmp_path):
    mgr = CheckpointManager(tmp_path)
    good = _save(mgr, 1)
    _save(mgr, 2)
    (tmp_path / "step-000000002" / MARKER).unlink()  # as if the job died before the commit
    assert [c.step for c in mgr.checkpoints()] == [1]
    model, opt, _ = _trained(seed=9)
    assert mgr.load(_app(model, opt)).step == 1 and _same_params(model, good)
    _save(mgr, 3)  # the next save clears the unfinished directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000001", "step-000000003"]


def test_tmp_leftover_is_ignored_then_cleaned(tmp_path):
    mgr = CheckpointManager(tmp_path)
    _save(mgr, 1)
    leftover = tmp_path / ".tmp-step-000000002-deadbeef"
    leftover.mkdir()
    (leftover / "__0_0.distcp").write_bytes(b"half")
    (leftover / MARKER).write_text("{}")  # even with a marker, a .tmp- directory is never a checkpoint
    assert [c.step for c in mgr.checkpoints()] == [1]
    model, opt, _ = _trained(seed=9)
    assert mgr.load(_app(model, opt)).step == 1
    _save(mgr, 2)
    assert not leftover.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000001", "step-000000002"]


def test_rollback_loads_healthy_and_discards_newer(tmp_path):
    mgr = CheckpointManager(tmp_path, keep=5)
    healthy = _save(mgr, 100, healthy=True)
    _save(mgr, 200)
    _save(mgr, 300)
    model, opt, _ = _trained(seed=9)
    loaded = mgr.load(_app(model, opt), healthy_only=True)
    assert loaded.step == 100 and _same_params(model, healthy)
    assert mgr.load(_app(model, opt), max_step=250).step == 200
    assert mgr.discard_after(100) == [200, 300]
    assert [c.step for c in mgr.checkpoints()] == [100]
    # Saving a step again (the replayed run reaching it) replaces it.
    _save(mgr, 100, seed=5, healthy=True)
    model, opt, _ = _trained(seed=9)
    mgr.load(_app(model, opt))
    assert _same_params(model, _trained(seed=5)[0])


def test_metadata_is_not_unpickled_freely(tmp_path):
    """A ``.metadata`` that would call an arbitrary global is refused, even if the marker matches, and the load stops
    there (an altered checkpoint, not a damaged one) instead of falling back to an older one of the same hand."""
    mgr = CheckpointManager(tmp_path)
    _save(mgr, 1)
    _save(mgr, 2)
    bad = tmp_path / "step-000000002"
    ran = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {ran}",))

    data = pickle.dumps(Evil())
    (bad / ".metadata").write_bytes(data)

    marker = json.loads((bad / MARKER).read_text())
    marker["files"][".metadata"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (bad / MARKER).write_text(json.dumps(marker))
    with pytest.raises(UntrustedCheckpointError, match=r"step-000000002/\.metadata names the Python global "
                                                        r"\('posix', 'system'\)"):
        mgr.verify(bad)
    model, opt, _ = _trained(seed=9)
    with pytest.raises(UntrustedCheckpointError, match="nothing in the file was run"):
        mgr.load(_app(model, opt))
    assert not ran.exists()


# ---- multi-process: FSDP2 on CPU with gloo, save on 2 ranks, load on 1 and 3


def _fsdp_worker(rank: int, world_size: int, store_path: str, root: str, mode: str) -> None:
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(
        "gloo", store=dist.FileStore(store_path, world_size), rank=rank, world_size=world_size
    )
    try:
        mesh = init_device_mesh("cpu", (world_size,))
        model = _model(seed=0)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        mgr = CheckpointManager(root)
        if mode == "save":
            g = torch.Generator().manual_seed(rank)  # different data per rank
            for _ in range(2):
                model(torch.randn(4, 6, generator=g)).pow(2).mean().backward()
                opt.step()
                opt.zero_grad()
            mgr.save(2, _app(model, opt), healthy=True, extra={"world": world_size})
        else:
            loaded = mgr.load(_app(model, opt))
            if loaded is None or loaded.step != 2 or loaded.extra != {"world": 2}:
                raise AssertionError(f"rank {rank}: loaded {loaded}")
        full = StateDictOptions(full_state_dict=True, cpu_offload=True)
        msd = get_model_state_dict(model, options=full)
        osd = get_optimizer_state_dict(model, opt, options=full)
        if rank == 0:
            torch.save({"model": msd, "optim": osd["state"]}, Path(root) / f"full-{mode}-{world_size}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_fsdp2_save_on_2_ranks_loads_on_1_and_3(tmp_path):
    import torch.multiprocessing as mp

    root = tmp_path / "ckpt"
    for world_size, mode in ((2, "save"), (1, "load"), (3, "load")):
        store = tempfile.mktemp(dir=tmp_path, prefix="store-")
        mp.spawn(_fsdp_worker, args=(world_size, store, str(root), mode), nprocs=world_size, join=True)

    saved = torch.load(root / "full-save-2.pt", weights_only=True)
    for name in ("full-load-1.pt", "full-load-3.pt"):
        got = torch.load(root / name, weights_only=True)
        assert got["model"].keys() == saved["model"].keys()
        for k in saved["model"]:
            assert torch.equal(got["model"][k], saved["model"][k]), (name, k)
        for k, st in saved["optim"].items():
            for s, v in st.items():
                assert torch.equal(torch.as_tensor(got["optim"][k][s]), torch.as_tensor(v)), (name, k, s)

    # And without any process group, into a plain unsharded model.
    model, opt = _model(seed=3), None
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loaded = CheckpointManager(root).load(_app(model, opt))
    assert loaded.step == 2
    for k, v in model.state_dict().items():
        assert torch.equal(v, saved["model"][k]), k


def test_a_marker_naming_a_file_outside_its_checkpoint_is_refused(tmp_path, caplog):
    import json as _json
    import logging as _logging

    model = torch.nn.Linear(2, 2)
    mgr = CheckpointManager(tmp_path, keep=3)
    mgr.save(1, {"m": model.state_dict()}, healthy=True)
    last = mgr.save(2, {"m": model.state_dict()}, healthy=True)
    marker = last / "COMMITTED"
    data = _json.loads(marker.read_text())
    data["files"]["../../outside"] = {"bytes": 1, "sha256": None}
    marker.write_text(_json.dumps(data))
    with caplog.at_level(_logging.WARNING):
        assert mgr.latest(verify=True).step == 1  # the edited checkpoint is not trusted
    assert "bad file name '../../outside'" in mgr.verify(last)
