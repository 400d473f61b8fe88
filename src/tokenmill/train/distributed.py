"""Process group, device and mesh: ranks started by torchrun or by `tokenmill train --nproc` (a file store), else one
process on its own, with no process group at all (so no port: gloo would listen even for a group of one)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from tokenmill.train.launch import STORE_ENV
from tokenmill.train.watchdog import Progress


@dataclass
class Distributed:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    mesh: DeviceMesh | None
    progress: Progress = field(default_factory=Progress)
    """Where this rank is (step, phase, last completed collective): the hang watchdog's heartbeat reads it."""

    @property
    def main(self) -> bool:
        return self.rank == 0

    def all_mean(self, values: list[float], name: str = "all-reduce") -> list[float]:
        """The mean over ranks of each value (one collective; ``name`` is the phase the watchdog reports)."""
        if self.world_size == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        with _reported(self.progress, name):
            dist.all_reduce(t)
        return (t / self.world_size).tolist()

    def close(self) -> None:
        if dist.is_initialized():
            # gloo may tear down a peer still in a collective otherwise (and the store with it).
            barrier(self.progress, "final barrier")
            dist.destroy_process_group()


def group_active() -> bool:
    """Whether this process is in a process group (a single process has none)."""
    return dist.is_available() and dist.is_initialized()


def group_rank() -> int:
    return dist.get_rank() if group_active() else 0


def group_size() -> int:
    return dist.get_world_size() if group_active() else 1


@contextmanager
def _reported(progress: Progress | None, name: str) -> Iterator[None]:
    """A collective as a progress point for the hang watchdog: entered (a rank that never arrives has fewer points),
    then done."""
    if progress is not None:
        progress.enter(name)
    yield
    if progress is not None:
        progress.collective_done(name)


def barrier(progress: Progress | None = None, name: str = "barrier") -> None:
    """Wait for every rank (a no-op without a process group); `progress`: the phase the hang watchdog reports."""
    if not group_active():
        return
    with _reported(progress, name):
        dist.barrier()


def from_rank0(obj: Any, progress: Progress | None = None, name: str = "broadcast") -> Any:
    """``obj`` as rank 0 has it (a no-op without a process group); `progress`: as for :func:`barrier`."""
    if not group_active():
        return obj
    box = [obj]
    with _reported(progress, name):
        dist.broadcast_object_list(box, src=0)
    return box[0]


def setup() -> Distributed:
    """Join the ranks' group (torchrun's env://, or the launcher's file store); a single process needs none: it
    trains the plain module."""
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        if backend == "gloo" and os.environ.get("MASTER_ADDR", "") in ("127.0.0.1", "localhost"):
            # Keep gloo's sockets on the loopback when the whole job is on this machine.
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        if cuda:
            torch.cuda.set_device(local)
        device_id = torch.device("cuda", local) if cuda else None
        store_file = os.environ.get(STORE_ENV)
        if store_file:  # `tokenmill train --nproc N`: the ranks meet in a file, not at a TCP port
            store = dist.FileStore(store_file, world)
            dist.init_process_group(backend, store=store, rank=rank, world_size=world, device_id=device_id)
        else:
            dist.init_process_group(backend, device_id=device_id)
    else:
        if cuda:
            torch.cuda.set_device(0)
        device = torch.device("cuda", 0) if cuda else torch.device("cpu")
        return Distributed(0, 1, 0, device, None)
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    mesh = init_device_mesh(device.type, (world,))
    return Distributed(rank, world, local, device, mesh)
