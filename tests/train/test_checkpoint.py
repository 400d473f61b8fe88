"""Checkpoints: round trip, commit marker, verification with fallback, pruning, resharding under FSDP2."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import pathlib
import pickle
import re
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException

from tokenmill.train.checkpoint import (
    MARKER,
    META,
    CheckpointError,
    CheckpointManager,
    DiskFullError,
    ModelOptimizerState,
    UntrustedCheckpointError,
    rng_state,
    set_rng_state,
)
from tokenmill.train.errors import full_errno


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


def test_a_rollback_load_without_a_usable_healthy_checkpoint(tmp_path):
    """What ``restore.rollback`` relies on, having no ``latest()`` of its own (every rank hashed every file there):
    None when no healthy checkpoint is committed, the damage named when the healthy ones all fail verification, never
    a newer one that is not marked healthy."""
    mgr = CheckpointManager(tmp_path, keep=5)
    _save(mgr, 1)
    model, opt, _ = _trained(seed=9)
    assert mgr.load(_app(model, opt), healthy_only=True) is None
    _save(mgr, 2, healthy=True)
    _save(mgr, 3)
    (tmp_path / "step-000000002" / "__0_0.distcp").unlink()
    with pytest.raises(CheckpointError, match=r"could be loaded:\n  step-000000002: __0_0.distcp is missing\nfix"):
        mgr.load(_app(model, opt), healthy_only=True)


def test_a_save_in_a_process_group_tells_the_watchdog_where_it_waits(tmp_path, monkeypatch):
    """Each wait of a save, a load and a discard for the other ranks is a progress point of the hang watchdog (a rank
    stuck in a save has fewer, and is named behind); a group of one runs the same collectives."""
    import torch.distributed as dist

    from tokenmill.train.watchdog import Progress

    class Recorded(Progress):
        def __init__(self) -> None:
            super().__init__()
            self.phases: list[str] = []

        def enter(self, phase: str) -> None:
            super().enter(phase)
            self.phases.append(phase)

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        progress = Recorded()
        mgr = CheckpointManager(tmp_path / "ckpt", progress=progress)
        model, opt, _ = _trained()
        mgr.save(4, _app(model, opt), healthy=True)
        saved = ["checkpoint: folder made", "checkpoint: shards written", "checkpoint: committed", "checkpoint: pruned"]
        assert progress.phases == saved and progress.ticks == 2 * len(saved)
        assert progress.collective["name"] == "checkpoint: pruned"
        assert mgr.load(_app(model, opt)).step == 4
        assert mgr.discard_after(4) == []
        assert progress.phases[len(saved):] == ["checkpoint step 4 verified", "checkpoints after step 4 discarded"]
    finally:
        dist.destroy_process_group()

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


# ---- crafted files stop the load; damaged ones fall back


def _recommit(checkpoint: Path, name: str, data: bytes) -> Path:
    """``name`` in ``checkpoint`` replaced by ``data`` and ``COMMITTED`` updated, as whoever hands one over can."""
    (checkpoint / name).write_bytes(data)
    marker = json.loads((checkpoint / MARKER).read_text())
    marker["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (checkpoint / MARKER).write_text(json.dumps(marker))
    return checkpoint / name


@contextlib.contextmanager
def paths_put_back() -> Iterator[None]:
    """PosixPath's own attributes as they were, at once (code without the fix lets the BUILD payload below change
    them for the whole process, pytest's own paths too)."""
    before = dict(vars(pathlib.PosixPath))
    try:
        yield
    finally:
        for key in set(vars(pathlib.PosixPath)) - set(before):
            delattr(pathlib.PosixPath, key)


def _build_on_posixpath(real: bytes) -> bytes:
    """The reviewer's payload (BUILD on the class PosixPath, then POP) before the checkpoint's own metadata."""
    hijack = b"\x80\x02cpathlib\nPosixPath\nN}X\x04\x00\x00\x00_strX\x10\x00\x00\x00/tmp/rv31/HIJACKs\x86b0"
    return hijack + real[11:]  # the real stream after its PROTO and FRAME


def _shards_elsewhere(real: bytes, where: str = "../step-000000001/") -> bytes:
    """The checkpoint's own metadata with every shard it names moved to ``where`` (another folder)."""
    import dataclasses

    metadata = pickle.loads(real)  # noqa: S301 - written by this test's own save a moment ago
    metadata.storage_data = {index: dataclasses.replace(info, relative_path=where + info.relative_path)
                             for index, info in metadata.storage_data.items()}
    return pickle.dumps(metadata)


CRAFTED = {
    "persistent id": (lambda real: b"\x80\x02X\x01\x00\x00\x00xQ.", "uses pickle's BINPERSID opcode (a persistent id)"),
    "not a Metadata": (lambda real: pickle.dumps({"state_dict_metadata": {}}),
                       "has a dict as its top object, not a Metadata"),
    "BUILD on PosixPath": (_build_on_posixpath, "sets the state of the class pathlib.PosixPath (pickle's BUILD)"),
    "a shard outside its folder": (_shards_elsewhere, "names the shard file '../step-000000001/__0_0.distcp', which is "
                                                      "not a file of its folder"),
}


def _crafted_newest(tmp_path: Path, crafted: str) -> tuple[CheckpointManager, Path, Path, str]:
    """Checkpoints 1 and 2, the newest's ``.metadata`` replaced by ``CRAFTED[crafted]`` (and recommitted): the manager,
    that checkpoint, its ``.metadata`` and what the refusal says it holds."""
    mgr = CheckpointManager(tmp_path)
    _save(mgr, 1)
    _save(mgr, 2)
    bad = tmp_path / "step-000000002"
    make, what = CRAFTED[crafted]
    return mgr, bad, _recommit(bad, ".metadata", make((bad / ".metadata").read_bytes())), what


def _refused_load(mgr: CheckpointManager, model: nn.Module, opt: torch.optim.Optimizer) -> UntrustedCheckpointError:
    """The error of a load that must be refused, once checked that no path of the process was hijacked on the way."""
    with paths_put_back(), pytest.raises(CheckpointError) as raised:
        try:
            mgr.load(_app(model, opt))
        finally:
            hijacked = str(pathlib.Path("x"))
    assert hijacked == "x" and type(raised.value) is UntrustedCheckpointError
    return raised.value


@pytest.mark.parametrize("crafted", CRAFTED)
def test_a_crafted_metadata_stops_the_load_naming_the_file_and_never_falls_back(tmp_path, crafted):
    """What DCP never writes, though no global outside the allow-list is named: refused like a global (the run
    stops, naming the file and what it holds), never taken for damage, which would load the older checkpoint of the
    same hand."""
    mgr, bad, target, what = _crafted_newest(tmp_path, crafted)
    model, opt, _ = _trained(seed=9)
    untouched = {k: v.clone() for k, v in model.state_dict().items()}
    refused = _refused_load(mgr, model, opt)
    assert str(refused).startswith(f"checkpoint {bad} is not safe to load: {target} {what}, which DCP never "
                                   "writes; it was refused and nothing in the file was run. ")
    assert all(torch.equal(v, untouched[k]) for k, v in model.state_dict().items())  # step 1 was not loaded
    with pytest.raises(UntrustedCheckpointError):  # latest() stops there too, as its docstring says
        mgr.latest()


@pytest.mark.parametrize("record", [
    {"__0_0.distcp": "abc"}, {"__0_0.distcp": {"bytes": "12", "sha256": None}},
    {"__0_0.distcp": {"bytes": None, "sha256": 5}}, {"__0_\x00.distcp": {"bytes": 1, "sha256": None}},
    {"": {"bytes": 1, "sha256": None}},
])
def test_a_marker_whose_records_are_malformed_is_damage_not_a_traceback(tmp_path, caplog, record):
    """COMMITTED is JSON, so a malformed record runs nothing: the checkpoint is unusable, named in the log, and the
    previous one loads (verify() once raised AttributeError, TypeError or ValueError on rank 0 alone)."""
    mgr = CheckpointManager(tmp_path)
    good = _save(mgr, 1)
    _save(mgr, 2)
    marker_path = tmp_path / "step-000000002" / MARKER
    marker = json.loads(marker_path.read_text())
    size = (marker_path.parent / "__0_0.distcp").stat().st_size
    marker["files"].update({name: {**rec, "bytes": size} if isinstance(rec, dict) and rec["bytes"] is None else rec
                            for name, rec in record.items()})  # None: the true size, so the sha256 is compared
    marker_path.write_text(json.dumps(marker))
    assert MARKER in mgr.verify(marker_path.parent)
    model, opt, _ = _trained(seed=9)
    with caplog.at_level(logging.WARNING, logger="tokenmill.train.checkpoint"):
        assert mgr.load(_app(model, opt)).step == 1 and _same_params(model, good)
    assert any("step-000000002" in r.getMessage() and "falling back" in r.getMessage() for r in caplog.records)


# ---- errors: one walker of an error's chain, a cause kept, a failure logged


def _failures(*errors: BaseException) -> CheckpointException:
    """What DCP raises on every rank after a collective step: each rank's error, pickled across as torch sends it."""
    moved = [pickle.loads(pickle.dumps(e)) for e in errors]  # noqa: S301 - our own exceptions
    return CheckpointException("load", {rank: (e, traceback.StackSummary()) for rank, e in enumerate(moved, 1)})


def test_a_full_disk_or_a_refusal_met_by_another_rank_is_found_in_dcps_failures():
    """full_errno (the watchdog's, the trainer's, a save's) and the refusal check walk the same chain, DCP's
    per-rank failures included: another rank that met ENOSPC, or refused a file."""
    from tokenmill.train import checkpoint

    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/ckpt/__1_0.distcp")
    assert full_errno(_failures(ValueError("other"), full)) == errno.ENOSPC
    assert full_errno(RuntimeError("x")) is None
    from tokenmill.train.safe_unpickle import RefusedPickle
    refused = RefusedPickle("/ckpt/.metadata", "uses pickle's BINPERSID opcode (a persistent id)")
    value = checkpoint._RefusedValue("__1_0.distcp", "optim.param_groups.0.lr", "Unsupported global: GLOBAL os.system")
    for err in (refused, value):
        found = checkpoint._refusal(_failures(ValueError("other"), err))
        assert type(found) is type(err) and str(found) == str(err)
    assert checkpoint._refusal(_failures(ValueError("other"))) is None


def test_marking_on_a_full_disk_says_so_and_other_failures_reach_every_rank_as_one_error(tmp_path, monkeypatch):
    """mark(): ENOSPC (as itself, or as the cause of another error) is DiskFullError (exit 74) naming meta.json's
    folder, meta.json as it was, the OSError kept as its cause; a meta.json that is not an object is a
    CheckpointError naming the file, not a TypeError raised by rank 0 alone while the others wait."""
    from tokenmill.train import checkpoint

    mgr = CheckpointManager(tmp_path)
    _save(mgr, 1, healthy=True)
    meta = mgr.path_for(1) / META
    before = meta.read_bytes()
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(meta))
    wrapped = RuntimeError("write failed")
    wrapped.__cause__ = full
    for raised in (full, wrapped):
        def no_space(path, text, *, fsync=False, raised=raised):
            raise raised

        monkeypatch.setattr(checkpoint, "write_atomic", no_space)
        with pytest.raises(DiskFullError, match=rf"^meta\.json of checkpoint step 1 not written: the disk holding "
                                                rf"{re.escape(str(meta.parent))} is full \(no space left") as caught:
            mgr.mark(1, False)
        assert caught.value.exit_code == 74 and caught.value.__cause__ is raised and meta.read_bytes() == before
    monkeypatch.undo()
    meta.write_text("[1]")
    with pytest.raises(CheckpointError, match=rf"^cannot mark step 1: {re.escape(str(meta))}: TypeError: ") as caught:
        mgr.mark(1, False)
    assert isinstance(caught.value.__cause__, TypeError) and not isinstance(caught.value, DiskFullError)


def test_a_commit_that_fails_keeps_its_cause_and_is_logged_with_its_traceback(tmp_path, monkeypatch, caplog):
    """Not a full disk: the CheckpointError keeps the original error as its cause; an unexpected one (not an
    OSError, whose one line says it all) is logged at ERROR with its traceback, as before the disk-full change."""
    from tokenmill.train import checkpoint

    mgr = CheckpointManager(tmp_path)
    real = checkpoint.write_atomic
    for error in (RuntimeError("a bug"), PermissionError(errno.EACCES, "Permission denied", "meta.json")):
        def failing(path, text, *, fsync=False, error=error):
            if path.name == META:
                raise error
            real(path, text, fsync=fsync)

        monkeypatch.setattr(checkpoint, "write_atomic", failing)
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="tokenmill.train.checkpoint"):
            with pytest.raises(CheckpointError, match=f"^checkpoint step 1 not committed: {type(error).__name__}: ") \
                    as caught:
                _save(mgr, 1)
        assert caught.value.__cause__ is error and not isinstance(caught.value, DiskFullError)
        logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
        if isinstance(error, OSError):
            assert not logged
        else:
            assert [(r.getMessage(), r.exc_info[1]) for r in logged] == [("checkpoint step 1 not committed", error)]
        assert not list(tmp_path.iterdir())  # nothing of the save is left


def _refusing_worker(rank: int, world_size: int, store_path: str, root: str) -> None:
    import torch.distributed as dist

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world_size), rank=rank, world_size=world_size)
    try:
        state = {"m": {"w": torch.zeros(4), "lr": 0.0}}
        try:
            loaded = CheckpointManager(root).load(state)
            said = f"loaded step {loaded.step}"
        except CheckpointError as e:
            said = f"{type(e).__name__}: {e}"
        Path(root, f"rank{rank}.txt").write_text(said)
        dist.barrier()
    finally:
        dist.destroy_process_group()


class _System:
    """Pickles as a call of os.system with ``command``."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _plant_value(checkpoint: Path, fqn: str, value: object) -> Path:
    """The non-tensor value ``fqn`` of ``checkpoint`` replaced by ``value`` pickled by torch.save (appended to its
    .distcp, the .metadata pointing at it, COMMITTED updated): the .distcp file."""
    import dataclasses
    import io as _io

    from torch.distributed.checkpoint import FileSystemReader

    metadata = FileSystemReader(checkpoint).read_metadata()  # DCP's own reader: the test just wrote it
    index = next(i for i in metadata.storage_data if i.fqn == fqn)
    info = metadata.storage_data[index]
    blob = _io.BytesIO()
    torch.save(value, blob)
    shard = checkpoint / info.relative_path
    with open(shard, "ab") as f:
        offset = f.tell()
        f.write(blob.getvalue())
    metadata.storage_data[index] = dataclasses.replace(info, offset=offset, length=len(blob.getvalue()))
    _recommit(checkpoint, ".metadata", pickle.dumps(metadata))
    _recommit(checkpoint, info.relative_path, shard.read_bytes())
    return shard


def _two_value_checkpoints(root: Path, ran: Path) -> tuple[Path, Path]:
    """Steps 1 and 2 of {"m": {"w": a tensor, "lr": a float}}, step 2's lr an os.system gadget: (step 2, its shard)."""
    mgr = CheckpointManager(root)
    for step in (1, 2):
        mgr.save(step, {"m": {"w": torch.full((4,), float(step)), "lr": 0.1 * step}}, healthy=True)
    return mgr.path_for(2), _plant_value(mgr.path_for(2), "m.lr", _System(f"id > {ran}"))


def _refused_value(checkpoint: Path, shard: Path) -> str:
    return (f"checkpoint {checkpoint} is not safe to load: {shard} holds a value for 'm.lr' that "
            "torch.load(weights_only=True) refuses (Trying to load unsupported GLOBAL posix.system whose module posix "
            "is blocked); nothing in it was run. ")


def test_a_refused_non_tensor_value_says_what_torch_refused_without_its_advice_to_load_unsafely(tmp_path):
    """torch's weights-only loader names os.system's module as blocked, inside a message that advises loading with
    weights_only=False: the refusal names the value and what was refused, and leaves that advice out."""
    ran = tmp_path / "ran"
    newest, shard = _two_value_checkpoints(tmp_path / "ckpt", ran)
    state = {"m": {"w": torch.zeros(4), "lr": 0.0}}
    with pytest.raises(UntrustedCheckpointError) as raised:
        CheckpointManager(tmp_path / "ckpt").load(state)
    assert str(raised.value).startswith(_refused_value(newest, shard)), str(raised.value)
    assert "weights_only` set to `False`" not in str(raised.value)
    assert not ran.exists() and state["m"]["lr"] == 0.0  # nor was step 1's


@pytest.mark.slow  # two processes: about 15 s on two busy cores
def test_two_ranks_that_refuse_a_non_tensor_value_both_stop(tmp_path):
    """The refused value is met by every rank inside DCP's load, each rank's refusal crossing to the others pickled in
    DCP's CheckpointException: both ranks stop with the refusal, neither falls back to step 1, nothing runs."""
    import torch.multiprocessing as mp

    root, ran = tmp_path / "ckpt", tmp_path / "ran"
    newest, shard = _two_value_checkpoints(root, ran)
    context = mp.spawn(_refusing_worker, args=(2, str(tmp_path / "store"), str(root)), nprocs=2, join=False)
    deadline = time.monotonic() + 120
    while not context.join(timeout=5):
        assert time.monotonic() < deadline, "the ranks did not agree and one waits for the other"
    for rank in (0, 1):
        said = (root / f"rank{rank}.txt").read_text()
        assert said.startswith(f"UntrustedCheckpointError: {_refused_value(newest, shard)}"), said
    assert not ran.exists()


def test_the_public_reader_never_reads_a_shard_outside_its_folder(tmp_path):
    """docs/loader.md's recipe (dcp.load with SafeReader and SafeLoadPlanner, no CheckpointManager, so no COMMITTED):
    a .metadata naming ``../other/__0_0.distcp`` is refused; DCP's own reader loads that file's tensors."""
    import torch.distributed.checkpoint as dcp

    from tokenmill.train.checkpoint import SafeLoadPlanner, SafeReader, _quiet_no_dist

    with _quiet_no_dist():
        dcp.save({"w": torch.zeros(4)}, checkpoint_id=tmp_path / "mine", no_dist=True)
        dcp.save({"w": torch.full((4,), 7.0)}, checkpoint_id=tmp_path / "other", no_dist=True)
    crafted = _shards_elsewhere((tmp_path / "mine" / ".metadata").read_bytes(), "../other/")
    (tmp_path / "mine" / ".metadata").write_bytes(crafted)
    state, reader = {"w": torch.ones(4)}, SafeReader(tmp_path / "mine")
    with _quiet_no_dist(), pytest.raises(CheckpointException) as raised:
        dcp.load(state, storage_reader=reader, planner=SafeLoadPlanner(), no_dist=True)
    assert torch.equal(state["w"], torch.ones(4))
    said = "names the shard file '../other/__0_0.distcp', which is not a file of its folder"
    assert said in str(raised.value) and said in str(reader.refused)  # DCP keeps only the text: the reader keeps it


@pytest.mark.parametrize("crafted", ["persistent id", "BUILD on PosixPath"])
def test_a_metadata_crafted_after_its_verification_still_stops_the_load(tmp_path, monkeypatch, crafted):
    """The file changes between verify() and DCP's load (verification passed, as it did before the change): DCP
    turns the reader's refusal into an AssertionError holding its text; the manager asks the reader, and stops."""
    mgr, _, target, what = _crafted_newest(tmp_path, crafted)
    monkeypatch.setattr(CheckpointManager, "verify", lambda self, path: None)
    model, opt, _ = _trained(seed=9)
    assert f"{target} {what}, which DCP never writes" in str(_refused_load(mgr, model, opt))
