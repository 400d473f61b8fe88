"""Checkpoints that a crash, a full disk or a bad file cannot turn into a lost run.

OPT-175B's logbook lost days twice to checkpoints: one was half written when the job died, another
could not be read back on restart. This module writes every checkpoint so that it either exists
whole and verified, or is ignored:

Layout under ``root``::

    root/step-000000123/          one checkpoint
        __0_0.distcp ...          DCP shards (one file per rank by default)
        .metadata                 DCP's index of the shards
        meta.json                 step, healthy flag, created time, world size, the trainer's ``extra``
        COMMITTED                 JSON: byte size and sha256 of every file above except meta.json;
                                  written last, so a directory without it is an unfinished save
    root/.tmp-step-000000123-<uuid>/   a save in progress; ignored, removed by the next save

Save: every rank writes its shards with ``torch.distributed.checkpoint`` (DCP) into the ``.tmp-``
directory; after a barrier rank 0 writes ``meta.json``, hashes the files, renames the directory into
place (``os.replace``), writes ``COMMITTED`` (temp name, fsync, ``os.replace``), fsyncs the root,
and only then prunes to the newest ``keep`` committed checkpoints, never deleting the newest one
marked healthy (a rollback needs it). A final barrier keeps any rank from running ahead of the commit.

Load: candidates newest first; each is verified (marker parses, ``meta.json`` parses and names the
same step, every file in the marker is there with its size and sha256, ``.metadata`` is there and every
shard file it names is in the marker) and then loaded; a checkpoint that fails either is logged
with a warning naming it and the reason, and the next older one is tried. In a process group rank 0
verifies and broadcasts its verdict, so all ranks fall back together.

Model and optimizer go through ``get_state_dict``/``set_state_dict``
(:class:`ModelOptimizerState`), which yields DTensor shards under FSDP2 (``fully_shard``), so a
checkpoint saved on N ranks loads on M ranks, or in one process without a process group.

Unpickling. ``meta.json`` and ``COMMITTED`` are JSON. DCP itself (torch 2.13) unpickles in two
places: ``FileSystemReader.read_metadata`` runs a plain ``pickle.load`` on ``.metadata``, and
``DefaultLoadPlanner.load_bytes`` runs ``torch.load(weights_only=False)`` on every non-tensor value
(optimizer ``param_groups`` entries, scheduler fields); only tensors are read with
``weights_only=True``. This module replaces both: ``.metadata`` is read by ``safe_unpickle`` (exact
(module, name) globals only: DCP's metadata classes, ``torch.Size``, dtypes, layouts, paths; and only the
operations DCP's pickle makes on them), and non-tensor values with ``torch.load(weights_only=True)``
(primitives, lists, tuples, dicts and tensors only). ``COMMITTED``'s checksums do not make a checkpoint
trusted: whoever hands one over writes them too. A ``.metadata`` holding anything else (another global, an
opcode or operation DCP never uses, a top object that is not a ``Metadata``: ``RefusedPickle``) or a value
``weights_only`` refuses was not written by DCP: the load stops with :class:`UntrustedCheckpointError` naming
the file and what it holds, rather than falling back to an older checkpoint of the same hand. A cut or garbled
file is damage, and falls back. Keep values in ``app_state`` to such types.

A full disk. A save that fails because its file system is full (``ENOSPC``/``EDQUOT`` in the error's
chain, or, as torch's zip writer loses the errno and says "unexpected pos", less than
:data:`LOW_SPACE_BYTES` left there) removes what it wrote (the ``.tmp-`` folder, a temp file, a
checkpoint without its marker) and raises :class:`DiskFullError`, one line naming the folder; the
previous checkpoints are untouched (pruning runs only after a commit).

No process group: DCP's ``save``/``load`` run in single-process mode (``no_dist``) when
``torch.distributed`` is not initialised; this module passes ``no_dist`` explicitly and silences the
warning DCP emits about it. With a process group, every rank must call :meth:`save`,
:meth:`load`, :meth:`mark` and :meth:`discard_after` (they contain collectives); only rank 0 touches
files outside DCP. The default process group is used; ``root`` must be a file system all ranks share.

FSDP2 on CPU: ``fully_shard`` works on CPU with a gloo process group and a CPU device mesh
(``init_device_mesh("cpu", (world_size,))``); gradient averaging is correct from torch 2.9 only
(2.7/2.8 summed, pytorch#162338). Call ``dist.barrier()`` before ``destroy_process_group()``.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import pickle
import re
import shutil
import time
import uuid
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._nested_dict import set_element  # what DefaultLoadPlanner uses
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import StorageMeta
from torch.distributed.checkpoint.planner import ReadItem
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

from tokenmill.digest import file_sha256
from tokenmill.train.atomic import fsync_dir, write_atomic
from tokenmill.train.distributed import barrier, from_rank0, group_active, group_rank, group_size
from tokenmill.train.errors import DiskFullError, EveryRankError, disk_full_message, error_chain, free_bytes, full_errno
from tokenmill.train.safe_unpickle import RefusedPickle, load_metadata

if TYPE_CHECKING:
    from tokenmill.train.watchdog import Progress

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
MARKER = "COMMITTED"
META = "meta.json"
DCP_METADATA = ".metadata"
_STEP_DIR = re.compile(r"^step-(\d{9,})$")


class CheckpointError(EveryRankError):
    """A checkpoint cannot be written, or checkpoints exist and none of them loads (every rank raises it)."""


class UntrustedCheckpointError(CheckpointError):
    """A checkpoint holds what DCP never writes (a pickle naming a global outside the allow-list, or using an operation
    DCP's pickle never makes; a non-tensor value that ``torch.load(weights_only=True)`` refuses): the run stops."""


#: Less free space than this where a save failed means the disk is full, whatever error torch turned it into.
LOW_SPACE_BYTES = 1 << 20


# --------------------------------------------------------------------------------------------
# What goes into a checkpoint


class ModelOptimizerState(Stateful):
    """Model (and optimizer) state for DCP, through ``get_state_dict``/``set_state_dict``.

    Under FSDP2 the values are DTensor shards, so DCP saves each rank's shard and reshards on load.
    ``optimizer`` may be None (evaluation, or a model-only checkpoint).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        options: StateDictOptions | None = None,
    ):
        self.model = model
        self.optimizer = optimizer
        self.options = options

    def state_dict(self) -> dict[str, Any]:
        if self.optimizer is None:
            return {"model": get_model_state_dict(self.model, options=self.options)}
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=self.options)
        return {"model": model_sd, "optim": optim_sd}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.optimizer is None:
            set_model_state_dict(self.model, state_dict["model"], options=self.options)
            return
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optim"],
            options=self.options,
        )


def rng_state() -> dict[str, Any]:
    """This process's torch RNG states as JSON-able lists of byte values (CPU, and CUDA if present).

    For ``extra``, which only rank 0 writes: use it for state that is the same on every rank. State
    that differs per rank is better re-derived from (seed, step, rank) with explicit generators.
    """
    state: dict[str, Any] = {"torch_cpu": torch.get_rng_state().tolist()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch_cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    torch.set_rng_state(torch.tensor(state["torch_cpu"], dtype=torch.uint8))
    if "torch_cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["torch_cuda"]])


# --------------------------------------------------------------------------------------------
# DCP without arbitrary unpickling


class SafeReader(FileSystemReader):
    """``FileSystemReader`` whose ``.metadata`` goes through ``safe_unpickle`` (exact globals only): DCP's own runs a
    plain ``pickle.load`` on it. Every shard it names must be a file in its folder: DCP opens ``folder/name``, so
    ``../x`` would read a file outside it. Public for users who call ``dcp.load`` themselves (docs/loader.md).

    ``refused``: the :class:`RefusedPickle` it raised, if any. DCP (torch 2.13) turns a failed ``read_metadata``
    into ``AssertionError("metadata is None; ...")`` keeping only its text, so a caller asks the reader instead."""

    refused: RefusedPickle | None = None

    def read_metadata(self, *args: Any, **kwargs: Any):
        path = self._get_metadata_path(kwargs.get("rank"))
        try:
            with self.fs.create_stream(path, "rb") as f:
                metadata = load_metadata(f, str(path))
            for info in (metadata.storage_data or {}).values():
                name = getattr(info, "relative_path", None)
                if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
                    raise RefusedPickle(str(path), f"names the shard file {name!r}, which is not a file of its folder")
        except RefusedPickle as e:
            self.refused = e
            raise
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class _RefusedValue(Exception):
    """A non-tensor value in a ``.distcp`` file that ``torch.load(weights_only=True)`` refused to unpickle."""

    def __init__(self, file: str, key: str, why: str):
        self.file, self.key, self.why = file, key, why
        super().__init__(f"{file} holds a value for {key!r} that torch.load(weights_only=True) refuses ({why})")

    def __reduce__(self):  # DCP sends a rank's failure to the others pickled
        return type(self), (self.file, self.key, self.why)


def _weights_only_reason(message: str) -> str:
    """What torch's weights-only unpickler refused, from the message ``torch.load`` wraps it in: that message
    advises loading with ``weights_only=False`` or allow-listing the global, not advice for a file from others."""
    text = message.split("\n\nCheck the documentation of torch.load", 1)[0]
    said = "WeightsUnpickler error: "
    reason = text.rsplit(said, 1)[1] if said in text else text.rsplit("\n\n", 1)[-1]
    reason = reason.strip().removeprefix("Weights only load failed. ").strip()
    reason = reason.splitlines()[0] if reason else "unpickling refused"
    return re.split(r" was not an allowed global by default|\. Please use `torch\.serialization", reason)[0].rstrip(". ")


class SafeLoadPlanner(DefaultLoadPlanner):
    """``DefaultLoadPlanner`` that reads non-tensor values with ``torch.load(weights_only=True)``; a value it refuses
    (a global outside torch's allow-list) raises :class:`_RefusedValue`, naming the file and the key."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        try:
            obj = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as e:  # what weights_only raises for anything it does not admit
            storage = getattr(self.metadata, "storage_data", None) or {}
            file = getattr(storage.get(read_item.storage_index), "relative_path", "a .distcp file")
            raise _RefusedValue(str(file), read_item.dest_index.fqn, _weights_only_reason(str(e))) from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj


# --------------------------------------------------------------------------------------------
# The manager


@dataclass(frozen=True)
class CheckpointInfo:
    """One committed checkpoint as found on disk (not yet verified)."""

    step: int
    path: Path
    healthy: bool
    meta: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class LoadedCheckpoint:
    """What :meth:`CheckpointManager.load` restored: the step, the trainer's ``extra``, and where from."""

    step: int
    extra: dict[str, Any]
    healthy: bool
    path: Path


def _full_disk(e: BaseException, folder: Path) -> tuple[int | None, int] | None:
    """(free bytes, errno) on ``folder``'s file system if ``e`` came from it being full, else None.

    Full: an ``ENOSPC``/``EDQUOT`` in ``e``'s chain, or less than ``LOW_SPACE_BYTES`` left. The second test is
    needed because torch's zip writer swallows the ``OSError`` of a short write and raises ``RuntimeError:
    unexpected pos ...`` instead; asked before the partial files are removed, it sees the disk as the write left it.
    """
    free = free_bytes(folder)
    said = full_errno(e)
    if said is not None or (free is not None and free < LOW_SPACE_BYTES):
        return free, said if said is not None else errno.ENOSPC
    return None


def _metadata_problem(path: Path, files: Mapping[str, Any]) -> str | None:
    """Why DCP's index in ``path`` is unusable (unreadable, or naming a file the marker does not list), or None.
    Raises :class:`UntrustedCheckpointError` when it holds what DCP never writes."""
    try:
        metadata = SafeReader(path).read_metadata()
    except RefusedPickle as e:  # not damage: DCP never writes it, so the checkpoint is not used at all
        raise UntrustedCheckpointError(_untrusted_message(path, e)) from None
    except Exception as e:  # noqa: BLE001 - any failure to parse means the index is unusable
        return f"{DCP_METADATA} unreadable: {e}"
    for info in (metadata.storage_data or {}).values():
        rel = getattr(info, "relative_path", None)
        if rel is not None and rel not in files:
            return f"{DCP_METADATA} names {rel}, which the marker does not list"
    return None


def _untrusted_message(path: Path, refused: RefusedPickle | _RefusedValue) -> str:
    if isinstance(refused, RefusedPickle):
        what = f"{refused.source} {refused.what}, which DCP never writes; it was refused and nothing in the file was run"
    else:
        what = f"{path / refused.file} {str(refused).split(' ', 1)[1]}; nothing in it was run"
    return (f"checkpoint {path} is not safe to load: {what}. The checkpoint was altered or not written by tokenmill: "
            f"get a clean copy, or delete {path} to resume from the checkpoint before it (if you trust its source)")


def _refusal(e: BaseException) -> RefusedPickle | _RefusedValue | None:
    """The refusal of a crafted file in ``e``'s chain (DCP's per-rank failures included), if any."""
    return next((err for err in error_chain(e) if isinstance(err, (RefusedPickle, _RefusedValue))), None)


def _describe(e: BaseException) -> str:
    """One line for an error; DCP's ``CheckpointException`` carries a traceback per failed rank."""
    if isinstance(e, CheckpointException) and getattr(e, "failures", None):
        parts = []
        for rank, failure in sorted(e.failures.items()):
            exc = failure[0] if isinstance(failure, tuple) else failure
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            parts.append(f"rank {rank}: {type(exc).__name__}: {first}")
        return "; ".join(parts)
    return f"{type(e).__name__}: {e}"


@contextlib.contextmanager
def _quiet_no_dist():
    """DCP warns on every single-process save/load; that mode is intended here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


class CheckpointManager:
    """Writes, verifies, prunes and loads checkpoints under ``root`` (see the module docstring).

    Args:
        root: directory holding ``step-*`` checkpoints; created on first save.
        keep: how many committed checkpoints to keep (the newest healthy one is kept in addition
            when it is older than those).
        hash_files: record and verify a sha256 per file. Costs one read of the checkpoint on rank 0
            at save and at load; with it off, only presence and byte sizes are checked.
        progress: this rank's :class:`~tokenmill.train.watchdog.Progress`: each wait for the other ranks (the shards
            written, rank 0's commit or verification) is a phase the hang watchdog reports, so a rank stuck in a
            save is named as the one behind.
    """

    def __init__(self, root: Path | str, keep: int = 3, *, hash_files: bool = True, progress: Progress | None = None):
        if keep < 1:
            raise ValueError(f"keep={keep}: keep at least 1 checkpoint")
        self.root = Path(root)
        self.keep = keep
        self.hash_files = hash_files
        self.progress = progress

    # ---- paths and listing

    def path_for(self, step: int) -> Path:
        return self.root / f"step-{step:09d}"

    def checkpoints(self) -> list[CheckpointInfo]:
        """Committed checkpoints (marker present, ``meta.json`` readable), oldest first.

        A directory with a marker but an unreadable ``meta.json`` is left out here with a warning;
        full verification happens at load.
        """
        if not self.root.is_dir():
            return []
        found = []
        for entry in self.root.iterdir():
            m = _STEP_DIR.match(entry.name)
            if not m or not entry.is_dir() or not (entry / MARKER).is_file():
                continue
            try:
                meta = json.loads((entry / META).read_text(encoding="utf-8"))
                healthy = bool(meta["healthy"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                logger.warning("checkpoint %s: %s unreadable (%s); skipping it", entry, META, e)
                continue
            found.append(CheckpointInfo(int(m.group(1)), entry, healthy, meta))
        return sorted(found, key=lambda c: c.step)

    def latest(self, healthy_only: bool = False, *, verify: bool = True) -> CheckpointInfo | None:
        """The newest committed checkpoint (that is marked healthy, if asked) which passes verification; damaged ones
        are logged and skipped. None if there is none. Raises :class:`UntrustedCheckpointError` (from :meth:`verify`)
        at the first one that holds what DCP never writes, rather than skipping to an older one."""
        for info in reversed(self.checkpoints()):
            if healthy_only and not info.healthy:
                continue
            if not verify:
                return info
            reason = self.verify(info.path)
            if reason is None:
                return info
            logger.warning("checkpoint %s failed verification (%s); trying the previous one", info.path, reason)
        return None

    # ---- verification

    def verify(self, path: Path) -> str | None:
        """Why the checkpoint at ``path`` cannot be used (damage: a missing, cut or altered file), or None if it
        checks out. Local: no collectives. Raises :class:`UntrustedCheckpointError` when its ``.metadata`` holds what
        DCP never writes (:class:`~tokenmill.train.safe_unpickle.RefusedPickle`)."""
        try:
            marker = json.loads((path / MARKER).read_text(encoding="utf-8"))
            files = marker["files"]
            if not isinstance(files, dict):
                return f"{MARKER} has no file list"
        except FileNotFoundError:
            return f"no {MARKER} marker (save did not finish)"
        except (OSError, ValueError, KeyError, TypeError) as e:
            return f"{MARKER} unreadable: {e}"
        try:
            meta = json.loads((path / META).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            return f"{META} unreadable: {e}"
        m = _STEP_DIR.match(path.name)
        if not isinstance(meta, dict) or m is None or meta.get("step") != int(m.group(1)):
            return f"{META} does not name step {m.group(1) if m else path.name}"
        if not isinstance(meta.get("extra", {}), dict):
            return f"{META} has an extra that is not a mapping"
        if DCP_METADATA not in files:
            return f"{MARKER} does not list DCP's {DCP_METADATA}"
        for name, rec in files.items():
            problem = self._file_problem(path, name, rec)
            if problem is not None:
                return problem
        return _metadata_problem(path, files)

    def _file_problem(self, path: Path, name: str, rec: Any) -> str | None:
        """Why the marker's record ``rec`` of file ``name`` does not match the file (a bad name or record, a missing,
        cut or altered file), or None. The sha256 is read only with ``hash_files``."""
        if "/" in name or "\0" in name or name in ("", ".", ".."):
            return f"{MARKER} lists a bad file name {name!r}"
        if not isinstance(rec, dict) or type(rec.get("bytes")) is not int or \
                not isinstance(rec.get("sha256"), (str, type(None))):
            return f"{MARKER} has a bad record for {name}: {rec!r:.80}"
        f = path / name
        try:
            size = f.stat().st_size
        except OSError:
            return f"{name} is missing"
        if size != rec.get("bytes"):
            return f"{name} has {size} bytes, {rec.get('bytes')} were written"
        if rec.get("sha256") is not None and self.hash_files:
            try:
                digest = file_sha256(f)
            except OSError as e:
                return f"{name} unreadable: {e}"
            if digest != rec["sha256"]:
                return f"{name} sha256 {digest[:12]}… differs from the one written {rec['sha256'][:12]}…"
        return None

    # ---- save

    def save(
        self,
        step: int,
        app_state: Mapping[str, Any],
        *,
        healthy: bool,
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write checkpoint ``step``; every rank calls it. Returns the committed directory.

        Args:
            step: the number of optimizer steps taken; names the directory.
            app_state: what DCP saves, name -> ``Stateful`` (:class:`ModelOptimizerState`, an LR
                scheduler) or a state dict of tensors and primitives.
            healthy: whether the run is known to be fine up to this step (see :meth:`mark`).
            extra: JSON-able state of the trainer, written by rank 0 into ``meta.json``: loader
                state, resolved config, guard state, RNG (:func:`rng_state`). Must be the same on
                every rank (rank 0's copy is what is kept).
        """
        if step < 0:
            raise ValueError(f"step={step}: steps are counted from 0")
        extra = dict(extra or {})
        try:
            extra_json = json.loads(json.dumps(extra, allow_nan=True))
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"extra for step {step} is not JSON-able ({e}); convert it to lists/dicts/numbers") from e

        rank = group_rank()
        ready: OSError | None = None
        if rank == 0:
            try:  # the first save makes the folder, which a full disk can refuse: every rank must hear of it
                self.root.mkdir(parents=True, exist_ok=True)
                self._clean_leftovers()
            except OSError as e:
                ready = e
        token, unready = from_rank0((uuid.uuid4().hex, ready is not None) if rank == 0 else None, self.progress,
                                    "checkpoint: folder made")
        tmp = self.root / f".tmp-step-{step:09d}-{token}"
        final = self.path_for(step)
        if unready:
            self._fail(step, tmp, ready, f"{type(ready).__name__}: {ready}")

        try:
            with _quiet_no_dist():
                dcp.save(dict(app_state), checkpoint_id=tmp, no_dist=not group_active())
        except CheckpointException as e:  # a BaseException in DCP, raised on every rank; an ordinary error here
            self._fail(step, tmp, e, f"DCP save failed: {_describe(e)}")
        barrier(self.progress, "checkpoint: shards written")  # every rank's shards are on disk

        error: Exception | None = None
        if rank == 0:
            try:
                self._commit(step, tmp, final, healthy, extra_json)
            except Exception as e:  # noqa: BLE001 - reported to every rank below (and logged by _fail)
                error = e
        if from_rank0(error is not None, self.progress, "checkpoint: committed"):
            self._fail(step, tmp, error, f"{type(error).__name__}: {error}" if error is not None else "")
        if rank == 0:
            self._prune()
        barrier(self.progress, "checkpoint: pruned")
        return final

    def _fail(self, step: int, tmp: Path, error: BaseException | None, what: str) -> NoReturn:
        """Every rank, after a failed save: rank 0 tells a full disk from other failures (before removing anything,
        so it sees the disk as the failed write left it), removes the save's folder, and every rank raises the same
        :class:`DiskFullError` or :class:`CheckpointError`. Done before the ranks part: a launcher that stops the
        others when the first rank exits cannot cut the clean-up short."""
        verdict = None
        if group_rank() == 0:
            full = _full_disk(error, self.root) if error is not None else None
            shutil.rmtree(tmp, ignore_errors=True)
            if full is not None:
                previous = max((c.step for c in self.checkpoints()), default=None)
                verdict = (disk_full_message(f"checkpoint step {step}", self.root, full[1],
                                             "what it had written was removed", previous, full[0]), True)
            else:
                verdict = (f"checkpoint step {step} not committed: {what}", False)
                if error is not None and not isinstance(error, OSError):  # an OSError's one line says it all
                    logger.error("checkpoint step %d not committed", step, exc_info=error)
        message, full = from_rank0(verdict)
        raise (DiskFullError if full else CheckpointError)(message) from error

    def _commit(self, step: int, tmp: Path, final: Path, healthy: bool, extra: dict) -> None:
        """Rank 0: ``meta.json``, the file list, the rename into place, then the marker. On failure the new
        checkpoint is removed and a checkpoint of the same step that it was replacing is put back, marker and all."""
        meta = {
            "format": FORMAT_VERSION,
            "step": step,
            "healthy": healthy,
            "created": time.time(),
            "world_size": group_size(),
            "torch": torch.__version__,
            "extra": extra,
        }
        write_atomic(tmp / META, json.dumps(meta, indent=1, sort_keys=True), fsync=True)
        files = {}
        for f in sorted(tmp.iterdir()):
            if f.name in (META, MARKER) or not f.is_file():
                continue
            files[f.name] = {"bytes": f.stat().st_size, "sha256": file_sha256(f) if self.hash_files else None}
        if DCP_METADATA not in files:
            raise CheckpointError(f"DCP wrote no {DCP_METADATA} in {tmp}")
        old = None
        if final.exists():
            # Same step saved again (after a rollback, or over an unfinished save): the new one wins. The old one
            # waits under a `.tmp-` name (never a checkpoint; the next save removes it after a crash) until then.
            old = self.root / f".tmp-replaced-{final.name}-{uuid.uuid4().hex}"
            os.replace(final, old)
        moved = False
        try:
            os.replace(tmp, final)
            moved = True
            fsync_dir(self.root)
            marker = {"format": FORMAT_VERSION, "step": step, "files": files}
            write_atomic(final / MARKER, json.dumps(marker, indent=1, sort_keys=True), fsync=True)
        except BaseException:
            if moved:
                shutil.rmtree(final, ignore_errors=True)
            if old is not None:
                os.replace(old, final)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        logger.info("checkpoint step %d committed at %s (%d files)", step, final, len(files))

    def _clean_leftovers(self) -> None:
        """Remove ``.tmp-*`` directories and ``step-*`` directories without a marker (crashed saves)."""
        for entry in self.root.iterdir():
            stale = entry.name.startswith(".tmp-") or (
                _STEP_DIR.match(entry.name) is not None and entry.is_dir() and not (entry / MARKER).exists()
            )
            if stale:
                logger.info("removing unfinished checkpoint %s", entry)
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    def _prune(self) -> None:
        ckpts = self.checkpoints()
        keep = {c.step for c in ckpts[-self.keep :]}
        healthy = [c for c in ckpts if c.healthy]
        if healthy:
            keep.add(healthy[-1].step)
        for c in ckpts:
            if c.step not in keep:
                self._delete(c.path)

    @staticmethod
    def _delete(path: Path) -> None:
        # The marker goes first: a crash mid-delete leaves an uncommitted directory, which is ignored.
        (path / MARKER).unlink(missing_ok=True)
        shutil.rmtree(path, ignore_errors=True)
        logger.info("deleted checkpoint %s", path)

    # ---- after the fact

    def mark(self, step: int, healthy: bool) -> None:
        """Set the healthy flag of checkpoint ``step`` (atomic rewrite of its ``meta.json``).

        Every rank calls it (a collective); only rank 0 writes. Raises :class:`CheckpointError` if that step has
        no committed checkpoint or its ``meta.json`` cannot be rewritten, :class:`DiskFullError` if the disk is full.
        """
        error: tuple[str, bool] | None = None
        cause: Exception | None = None
        if group_rank() == 0:
            path = self.path_for(step)
            try:
                if not (path / MARKER).is_file():
                    raise CheckpointError(f"no committed checkpoint for step {step} under {self.root}")
                meta = json.loads((path / META).read_text(encoding="utf-8"))
                meta["healthy"] = bool(healthy)
                write_atomic(path / META, json.dumps(meta, indent=1, sort_keys=True), fsync=True)
            except Exception as e:  # noqa: BLE001 - every rank must hear of it, or the others wait here for good
                cause, code = e, full_errno(e)
                error = (disk_full_message(f"{META} of checkpoint step {step}", path, code, "the file is as it was",
                                           step), True) if code is not None else \
                    (str(e) if isinstance(e, CheckpointError) else f"{path / META}: {type(e).__name__}: {e}", False)
        error = from_rank0(error)
        if error is not None:
            message, full = error
            raise (DiskFullError(message) if full else CheckpointError(f"cannot mark step {step}: {message}")) \
                from cause

    def discard_after(self, step: int) -> list[int]:
        """Delete every checkpoint newer than ``step``; returns their steps.

        Call after rolling back to ``step``: otherwise a restart would resume from the diverged
        checkpoints, the newest on disk. Every rank calls it; rank 0 deletes.
        """
        gone = []
        if group_rank() == 0 and self.root.is_dir():
            for entry in sorted(self.root.iterdir()):
                m = _STEP_DIR.match(entry.name)
                if m and entry.is_dir() and int(m.group(1)) > step:
                    self._delete(entry)
                    gone.append(int(m.group(1)))
        gone = from_rank0(gone)
        barrier(self.progress, f"checkpoints after step {step} discarded")
        return gone

    # ---- load

    def load(
        self,
        app_state: Mapping[str, Any],
        *,
        healthy_only: bool = False,
        max_step: int | None = None,
    ) -> LoadedCheckpoint | None:
        """Load the newest usable checkpoint into ``app_state``; every rank calls it.

        Args:
            app_state: the same names as at save, with objects to load into (``Stateful`` objects
                are loaded in place; plain dicts are replaced in the mapping, so pass a dict).
            healthy_only: only checkpoints marked healthy (a rollback after a divergence).
            max_step: only checkpoints at or before this step.

        Returns the step and ``extra`` that were restored, or None when there is no committed
        checkpoint to try. A checkpoint that fails verification or whose DCP load raises is logged
        and the previous one tried; if committed candidates exist and none loads,
        :class:`CheckpointError` is raised rather than silently starting from scratch. A checkpoint whose
        ``.metadata`` names a global DCP never writes stops the load at once
        (:class:`UntrustedCheckpointError`): it was altered, and its older siblings came from the same hand.
        """
        candidates = [
            c
            for c in reversed(self.checkpoints())
            if (not healthy_only or c.healthy) and (max_step is None or c.step <= max_step)
        ]
        candidates = from_rank0(candidates)
        if not candidates:
            return None
        failures = []
        for info in candidates:
            reason = untrusted = None
            if group_rank() == 0:
                try:
                    reason = self.verify(info.path)
                except UntrustedCheckpointError as e:
                    untrusted = str(e)
            reason, untrusted = from_rank0((reason, untrusted), self.progress, f"checkpoint step {info.step} verified")
            if reason is None and untrusted is None:
                reader = SafeReader(info.path)
                try:
                    with _quiet_no_dist():
                        dcp.load(app_state, storage_reader=reader, planner=SafeLoadPlanner(), no_dist=not group_active())
                except (Exception, CheckpointException) as e:  # noqa: BLE001 - any failure: try the previous one
                    refused = _refusal(e) or reader.refused  # unless the file changed since its verification: stop
                    untrusted = _untrusted_message(info.path, refused) if refused is not None else None
                    reason = f"load failed: {_describe(e)}"
                if group_active():  # one rank failing must make every rank fall back (or stop)
                    verdicts: list[Any] = [None] * group_size()
                    dist.all_gather_object(verdicts, (reason, untrusted))
                    reason = next((r for r, _ in verdicts if r is not None), None)
                    untrusted = next((u for _, u in verdicts if u is not None), None)
            if untrusted is not None:
                raise UntrustedCheckpointError(untrusted)
            if reason is None:
                logger.info("loaded checkpoint step %d from %s", info.step, info.path)
                return LoadedCheckpoint(info.step, dict(info.meta.get("extra", {})), info.healthy, info.path)
            logger.warning("checkpoint %s unusable (%s); falling back to the previous one", info.path, reason)
            failures.append(f"{info.path.name}: {reason}")
        raise CheckpointError(
            f"no checkpoint under {self.root} could be loaded:\n  "
            + "\n  ".join(failures)
            + "\nfix or delete them (or point the run at another directory) to start over"
        )
