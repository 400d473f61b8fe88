"""What a run folder is and who may write it: one driver at a time (a lock), only folders tokenmill made (markers).

- The lock: `<output>/_lock/<generation>.json`, one file per driver that held the folder, the highest generation
  the current one. A driver takes generation n+1 when generation n is released or stale; creating it is exclusive
  (`link(2)` of a complete temporary file on a local or shared POSIX filesystem: it fails when the name exists, also
  over NFS), so of two drivers racing for n+1 exactly one gets it, and a driver that finds a higher generation than
  its own afterwards has lost and stops. The file holds {host, pid, process start, boot id, pid namespace, start
  time, token}; the holder refreshes its modification time every `HEARTBEAT_S` seconds. A lock is stale when its
  holder ran on this machine (same host, boot and pid namespace) and that process is gone (or the pid now belongs
  to a process with another start time), or when it ran elsewhere and its heartbeat is older than `STALE_AFTER_S`
  by the filesystem's own clock (a file written now), so clocks of different machines never compare.
  On an object store (`s3://`, `gs://`) pyarrow offers no create-if-absent: the driver writes generation n+1,
  waits `SETTLE_S`, and reads it back; a second driver that starts while one runs is refused, but two started
  within about a second of each other may both pass (docs/pipeline.md says so).
- Markers: `.tokenmill-run` at the run folder's root and `.tokenmill-stage` in each stage folder, written when
  tokenmill creates the folder. Only a marked stage folder is ever moved aside or cleaned; an unmarked folder with
  a stage's name is refused (configured stage) or left alone (another name). An existing, non-empty output folder
  that is not a tokenmill run is refused. Folders of runs made before the markers (a stage folder holding
  `_work/key.json`) count as tokenmill's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

import pyarrow.fs as pafs

from tokenmill.errors import TokenmillError
from tokenmill.pipeline import storage
from tokenmill.sources import uris

log = logging.getLogger(__name__)


class RunView(Protocol):
    """What the output checks read of a run's config (`pipeline.config.RunConfig`, which validates itself with them
    and so cannot be imported here)."""

    sources: Sequence[Any]
    stages: Any

    @property
    def output_location(self) -> str: ...

    def resolve(self, path: str) -> Path: ...


ROOT_MARKER = ".tokenmill-run"
STAGE_MARKER = ".tokenmill-stage"
LOCK_DIR = "_lock"
KEY_FILE = "_work/key.json"
"""A stage folder's key record (`resume.stage_key`), written before its first task."""
SUPERSEDED = "_superseded"
"""Where `resume.supersede` moves replaced stage output, one generation folder per move."""
LOGS_DIR = "_logs"
"""One JSON record per stage run (`runner._log_record`)."""
OWN_ROOT_ENTRIES = {ROOT_MARKER, LOCK_DIR, LOGS_DIR, SUPERSEDED}
"""Names at the root that only tokenmill writes (besides a folder per stage)."""

HEARTBEAT_S = 5.0
"""How often the holder refreshes its lock file."""
STALE_AFTER_S = 60.0
"""A lock of another machine without a heartbeat for this long is stale."""
SETTLE_S = 1.0
"""On an object store: how long a new lock is left before it is read back to see who won."""


class RunFolderError(TokenmillError):
    """The output folder cannot be used as a run folder (a file, another program's folder, a folder not ours)."""


class RunFolderLocked(TokenmillError):
    """Another driver holds the run folder, or took it over from this one."""


# ---------------------------------------------------------------- who this process is


def _proc_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat); None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None  # a zombie holds nothing
    return int(fields[19])


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _identity() -> dict[str, Any]:
    return {"host": socket.gethostname(), "boot_id": _boot_id(), "pid_ns": _pid_namespace()}


def _same_machine(info: dict[str, Any]) -> bool:
    me = _identity()
    return all(info.get(k) == me[k] for k in me)


def describe_holder(info: dict[str, Any]) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(info.get("started", 0)))
    return f"host {info.get('host')}, pid {info.get('pid')}, started {started}"


# ---------------------------------------------------------------- the lock


class RunLock:
    """One driver's hold on a run folder; `check()` raises once another driver has taken it over."""

    def __init__(self, fs: pafs.FileSystem, root: str):
        self.fs = fs
        self.root = root
        self.dir = storage.join(root, LOCK_DIR)
        self.local = isinstance(fs, pafs.LocalFileSystem)
        self.path: str | None = None
        self.generation = 0
        self.info: dict[str, Any] = {}
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- files

    def _generations(self) -> list[int]:
        out = []
        for path in storage.list_files(self.fs, self.dir, ".json"):
            name = path.rsplit("/", 1)[-1][: -len(".json")]
            if name.isdigit():
                out.append(int(name))
        return sorted(out)

    def _gen_path(self, n: int) -> str:
        return storage.join(self.dir, f"{n:08d}.json")

    def _read(self, n: int) -> tuple[dict[str, Any] | None, float | None]:
        """A generation's content and modification time (None, None when it is gone)."""
        path = self._gen_path(n)
        info = self.fs.get_file_info(path)
        if info.type != pafs.FileType.File:
            return None, None
        mtime = info.mtime.timestamp() if info.mtime is not None else None
        value = storage.read_json(self.fs, path)
        return (value if isinstance(value, dict) else {}), mtime

    def _fs_now(self) -> float:
        """The current time by the filesystem's clock: the modification time of a file written now."""
        probe = storage.join(self.dir, f"clock-{uuid.uuid4().hex}.probe")
        storage.write_bytes(self.fs, probe, b"")
        try:
            mtime = self.fs.get_file_info(probe).mtime
        finally:
            with contextlib.suppress(OSError):
                self.fs.delete_file(probe)
        return mtime.timestamp() if mtime is not None else time.time()

    def _stale(self, info: dict[str, Any], mtime: float | None) -> str | None:
        """Why a lock no longer holds (its holder is gone), or None while it holds."""
        if info.get("released"):
            return "released"
        if _same_machine(info) and isinstance(info.get("pid"), int):
            if not os.path.exists("/proc/self/stat"):  # no /proc (macOS): whether the pid runs, not what it is
                try:
                    os.kill(info["pid"], 0)
                except ProcessLookupError:
                    return f"pid {info['pid']} is not running on this machine"
                except PermissionError:
                    pass
                return None
            start = _proc_start(info["pid"])
            if start is None:
                return f"pid {info['pid']} is not running on this machine"
            if start != info.get("proc_start"):
                return f"pid {info['pid']} now belongs to another process (start time {start}, not {info.get('proc_start')})"
            return None
        age = self._fs_now() - (mtime or 0.0)
        if age > STALE_AFTER_S:
            return f"no heartbeat for {age:.0f} s (more than {STALE_AFTER_S:.0f} s)"
        return None

    def _create(self, n: int, data: bytes) -> bool:
        """Create generation n with `data` unless it exists; True when this driver made it."""
        target = self._gen_path(n)
        if self.local:
            os.makedirs(self.dir, exist_ok=True)
            tmp = f"{target}.{uuid.uuid4().hex}.tmp"
            try:  # the temporary file goes whatever fails, the write itself included (a full disk)
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.link(tmp, target)  # atomic and exclusive, also on NFS; the file appears complete
                return True
            except FileExistsError:
                return False
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        # Object store: no create-if-absent in pyarrow.fs; write, let a racing writer land, read back.
        if storage.exists(self.fs, target):
            return False
        storage.write_bytes(self.fs, target, data)
        time.sleep(SETTLE_S)
        return (storage.read_json(self.fs, target) or {}).get("token") == json.loads(data)["token"]

    # -- acquire, heartbeat, release

    def acquire(self) -> None:
        """Take the folder, or raise RunFolderLocked naming the driver that holds it."""
        me = {**_identity(), "pid": os.getpid(), "proc_start": _proc_start(os.getpid()), "started": time.time(),
              "token": uuid.uuid4().hex}
        for _ in range(5):
            generations = self._generations()
            top = generations[-1] if generations else 0
            if top:
                info, mtime = self._read(top)
                if info is None:
                    continue  # removed while we looked: look again
                why = self._stale(info, mtime)
                if why is None:
                    raise self._held_error(info, mtime)
                if why != "released":
                    log.warning("run folder %s: taking over the lock of %s: %s", self.root, describe_holder(info), why)
            data = (json.dumps({**me, "generation": top + 1}, sort_keys=True) + "\n").encode()
            if not self._create(top + 1, data):
                continue  # another driver took top + 1 first: see whether it holds
            if self._generations()[-1] != top + 1:
                self._delete(top + 1)  # a later generation exists: it won
                continue
            self.generation, self.path, self.info = top + 1, self._gen_path(top + 1), {**me, "generation": top + 1}
            for old in generations:
                self._delete(old)  # earlier holders are gone; the highest generation always stays
            self._thread = threading.Thread(target=self._beat, name="tokenmill-run-lock", daemon=True)
            self._thread.start()
            log.info("run folder %s: lock generation %d taken", self.root, self.generation)
            return
        generations = self._generations()
        info, mtime = self._read(generations[-1]) if generations else ({}, None)
        raise self._held_error(info or {}, mtime)

    def _held_error(self, info: dict[str, Any], mtime: float | None) -> RunFolderLocked:
        beat = f", last heartbeat {max(0.0, time.time() - mtime):.0f} s ago" if mtime else ""
        return RunFolderLocked(
            f"run folder {self.root} is in use by another tokenmill run ({describe_holder(info)}{beat}); one driver "
            f"writes a run folder at a time. Wait for it to end or stop it, or choose another `output`. A lock left by "
            f"a killed driver is taken over by the next run: at once on the same machine, after {STALE_AFTER_S:.0f} s "
            f"without a heartbeat from another machine ({self.dir})")

    def _delete(self, n: int) -> None:
        with contextlib.suppress(OSError):
            self.fs.delete_file(self._gen_path(n))

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                if self.local:
                    os.utime(self.path)
                else:
                    storage.write_bytes(self.fs, self.path, (json.dumps(self.info, sort_keys=True) + "\n").encode())
                self._verify()
            except FileNotFoundError:
                self._lost = f"its lock file {self.path} was removed"
            except OSError as err:
                log.warning("run folder %s: lock heartbeat failed: %s", self.root, err)
            if self._lost:
                log.error("run folder %s: %s", self.root, self._lost)
                return

    def _verify(self) -> None:
        generations = self._generations()
        if not generations or generations[-1] != self.generation:
            newer = generations[-1] if generations else None
            info = self._read(newer)[0] if newer else None
            self._lost = (f"another driver ({describe_holder(info)}) took the run folder over, judging this one stale"
                          if info else f"its lock file {self.path} was removed")

    def check(self) -> None:
        """Raise RunFolderLocked when this driver no longer holds the folder; called before every change."""
        if self._lost is None:
            self._verify()
        if self._lost is not None:
            raise RunFolderLocked(f"run folder {self.root}: this driver no longer holds it: {self._lost}; stopping "
                                  f"before writing more. Rerun once the other driver has ended")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.path is None or self._lost is not None:
            return
        with contextlib.suppress(OSError):
            if self._generations()[-1] == self.generation:
                done = {**self.info, "released": True, "ended": time.time()}
                storage.write_json_atomic(self.fs, self.path, done, uuid.uuid4().hex)
        self.path = None


# ---------------------------------------------------------------- markers and the output folder


def is_link(fs: pafs.FileSystem, path: str) -> bool:
    """A symlink on local disk (an object store has none)."""
    return isinstance(fs, pafs.LocalFileSystem) and os.path.islink(path)


def link_below(fs: pafs.FileSystem, folder: str) -> str | None:
    """The first symlink (by path) at or below `folder`, found without following any; None when there is none.

    Below a stage folder everything is tokenmill's own (it makes no symlinks; unchanged shards are hard links), so
    a link there was put by someone else, and would lead the run's reads, writes and deletions to another folder."""
    if not isinstance(fs, pafs.LocalFileSystem):
        return None
    if os.path.islink(folder):
        return folder
    # The kind of each entry comes with the folder read (no stat per file: a stage folder holds a file per shard).
    return min((e.path for e in storage.local_entries(folder, recursive=True) if e.is_symlink()), default=None)


def stage_is_ours(fs: pafs.FileSystem, stage_dir: str) -> bool:
    """A stage folder tokenmill made: its marker, or `_work/key.json` (runs from before the markers); never a symlink,
    which leads to a folder elsewhere (another run's, written then without its lock)."""
    if is_link(fs, stage_dir):
        return False
    return storage.exists(fs, storage.join(stage_dir, STAGE_MARKER)) or storage.exists(fs, storage.join(stage_dir, KEY_FILE))


def foreign_stage(fs: pafs.FileSystem, stage_dir: str) -> bool:
    """A folder with a stage's name that tokenmill did not make and that holds something, or a symlink: never
    written or moved."""
    if is_link(fs, stage_dir):
        return True
    if stage_is_ours(fs, stage_dir):
        return False
    return bool(storage.list_tree(fs, stage_dir))


def stage_problem(fs: pafs.FileSystem, stage_dir: str) -> str | None:
    """Why the run may not use this stage folder (a folder tokenmill did not make, or a symlink at or below it,
    named), or None: checked before the run reads, writes, moves or deletes anything in it."""
    if foreign_stage(fs, stage_dir):
        return not_ours_message(stage_dir)
    link = link_below(fs, stage_dir)
    return link_message(link) if link else None


def claim_stage(fs: pafs.FileSystem, stage_dir: str) -> None:
    """Create the stage folder with its marker (an empty one is adopted), or check that the existing one is ours
    and holds no symlink."""
    problem = stage_problem(fs, stage_dir)
    if problem:
        raise RunFolderError(problem)
    if not storage.exists(fs, storage.join(stage_dir, STAGE_MARKER)):
        storage.write_bytes(fs, storage.join(stage_dir, STAGE_MARKER), b"made by tokenmill; the runner may move or "
                            b"clean this folder\n")


def not_ours_message(folder: str) -> str:
    if os.path.islink(folder):
        return link_message(folder)
    return (f"{folder} exists but tokenmill did not make it (no {STAGE_MARKER} marker and no {KEY_FILE}): tokenmill "
            f"never moves or deletes a folder it did not make. Move it out of the run folder, or choose another "
            f"`output`")


def link_message(path: str) -> str:
    """The refusal of a symlink found where tokenmill keeps its own files, naming it and where it leads."""
    return (f"{path} is a symlink to {os.readlink(path)}: tokenmill reads, writes, moves and deletes only folders "
            f"inside the run folder, never through a link (it would read or change another folder, without its "
            f"run's lock). Replace the link with a copy of what it leads to, or remove it")


def _root_problem(fs: pafs.FileSystem, root: str) -> str | None:
    """Why `root` cannot be a run folder, or None: a file, a non-empty folder that is not a tokenmill run, or a run
    folder whose own folders (`_lock`, `_logs`, `_superseded`) are symlinks."""
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        return None
    if info.type != pafs.FileType.Directory:
        return f"{root} exists and is not a folder; `output` names the run folder tokenmill writes: choose a new path"
    entries = storage.list_tree(fs, root)
    linked = [e.path for e in entries if e.base_name in (LOCK_DIR, LOGS_DIR, SUPERSEDED) and is_link(fs, e.path)]
    if linked:
        return link_message(linked[0])
    if not entries or storage.exists(fs, storage.join(root, ROOT_MARKER)):
        return None
    if all(e.base_name in OWN_ROOT_ENTRIES for e in entries):
        return None
    if any(e.type == pafs.FileType.Directory and stage_is_ours(fs, e.path) for e in entries):
        return None  # a run made before the root marker, or stage folders copied from one
    shown = ", ".join(sorted(e.base_name for e in entries)[:5])
    return (f"{root} is not empty ({shown}{', ...' if len(entries) > 5 else ''}) and is not a tokenmill run folder "
            f"(no {ROOT_MARKER}); tokenmill writes only into a new or empty folder or a run folder it made, so it "
            f"never moves or overwrites what is yours: choose another `output`, e.g. a subfolder")


@contextlib.contextmanager
def hold(fs: pafs.FileSystem, root: str) -> Iterator[RunLock]:
    """Check the output folder, create it, take its lock and mark it; release the lock on the way out."""
    problem = _root_problem(fs, root)
    if problem:
        raise RunFolderError(problem)
    fs.create_dir(root, recursive=True)
    lock = RunLock(fs, root)
    lock.acquire()
    try:
        problem = _root_problem(fs, root)  # another program may have written there before the lock was taken
        if problem:
            raise RunFolderError(problem)
        if not storage.exists(fs, storage.join(root, ROOT_MARKER)):
            storage.write_json_atomic(fs, storage.join(root, ROOT_MARKER), {"made_by": "tokenmill"}, uuid.uuid4().hex)
        yield lock
    finally:
        lock.release()


# ---------------------------------------------------------------- checks at validation


def root_entries() -> dict[str, bool]:
    """Every name a run folder's root may hold, True for a folder: tokenmill's own entries, a folder per registered
    stage (any of them may be configured later), and `tokenizer.json`, where `tokenmill tokenizer train` saves by
    default. Below a folder any name may come, so a source pattern that reaches into one reads what the run writes."""
    from tokenmill.pipeline.registry import stage_order
    from tokenmill.tokenize.tokens_json import TOKENIZER_FILE

    return {**{name: True for name in (LOCK_DIR, LOGS_DIR, SUPERSEDED, *stage_order())},
            ROOT_MARKER: False, TOKENIZER_FILE: False}


def _broken_link(path: Path) -> str | None:
    """Why `path` cannot be created: it, or a folder above it, is a symlink that leads to nothing (else None)."""
    for p in [path, *path.parents]:
        if p.is_symlink() and not p.exists():
            what = str(p) if p == path else f"{p}, a folder above it,"
            return (f"{what} is a symlink to {os.readlink(p)}, which does not exist (or is a symlink loop): create "
                    f"the folder it points to, or point `output` at a folder")
    return None


def _examples(config: RunView, out: str, shard: str | None) -> list[str]:
    """Paths (below `out`) of files a run of this config writes, for the message naming a pattern that reaches
    them: a shard as the run names it (from a file the pattern matches now), then the files of every stage."""
    from tokenmill.pipeline.manifest import MANIFEST
    from tokenmill.pipeline.map_phase import dropped_path, shard_path
    from tokenmill.pipeline.registry import source_stage

    stages = [source_stage().name, *(name for name, _ in config.stages.configured())]
    names = [shard] if shard else []
    files = [f"{stage}/{p(n)}" for stage in stages for n in names for p in (shard_path, dropped_path)]
    files += [f"{stage}/{name}" for stage in stages for name in (MANIFEST, KEY_FILE, STAGE_MARKER)]
    files += [f"{SUPERSEDED}/20260101T000000000000Z/{f}" for f in files]
    files += [f"{LOGS_DIR}/20260101T000000-{stages[0]}-0a1b2c.json", ROOT_MARKER, f"{LOCK_DIR}/00000001.json"]
    return [f"{out.rstrip('/')}/{f}" for f in files]


def _reach_problem(key: str, pattern: str, out: str, examples: list[str], matches) -> str:
    """The validation line for a source pattern that reaches into the output folder (or prefix, on a store)."""
    example = next((e for e in examples if matches(e)), None)
    where = f"its output {out}" if uris.is_remote(out) else f"its output folder {out}"
    kind = "prefixes" if uris.is_remote(out) else "folders"
    return (f"  {key}: {uris.display_uri(pattern)!r} would match files the run writes under {uris.display_uri(where)}"
            f"{f' (e.g. {example})' if example else ''}: each run would read its own output again. Put `output` "
            f"outside the sources' {kind}, or narrow the pattern")


def _remote_output_problems(config: RunView, location: str) -> list[str]:
    """A source URI pattern of the output's store that can reach into the run folder (validation lines)."""
    scheme, out = uris.components(location)
    entries = root_entries()
    problems = []
    for i, source in enumerate(config.sources):
        for j, pattern in enumerate(source.paths):
            if not uris.is_remote(pattern) or uris.uri_problem(pattern):
                continue  # a local pattern reaches no object; a bad URI has its own error
            pattern_scheme, parts = uris.components(pattern)
            if pattern_scheme == scheme and uris.glob_reaches(parts, out, entries):
                examples = _examples(config, location, None)
                problems.append(_reach_problem(f"sources[{i}].paths[{j}]", pattern, location, examples,
                                               lambda e: uris.glob_match(parts, uris.components(e)[1])))
    return problems


def _real_pattern(full: str) -> list[str]:
    """A local pattern's components with the folders before its first wildcard resolved to their real path
    (symlinks followed), as glob follows them."""
    from tokenmill.sources.patterns import pattern_base

    base = pattern_base(full)
    if str(base) == "." or not uris.is_glob(full):
        return list(Path(os.path.realpath(full)).parts)
    rest = Path(full).parts[len(base.parts):]
    return [*Path(os.path.realpath(base)).parts, *rest]


def output_problems(config: RunView, listed: "dict[str, Any] | None" = None) -> list[str]:
    """Problems of `output` that stop a run before any work (validation lines, key first).

    The output must not be an existing file, a symlink to nothing, nor a non-empty folder that is not a tokenmill
    run; no source pattern may match a file under it, now or once the run has written there (the run would ingest
    its own output). Paths are compared as real paths: an output reached through a symlink is the folder it leads
    to. `listed`: each pattern's matches as `config.check_paths` listed them (else listed here).
    """
    location = config.output_location
    if uris.is_remote(location):
        # An object store: its folder is checked when the run opens it; here, only the URI and whether a source
        # URI pattern can reach into it (listing the output too would cost a request per thousand objects).
        problem = uris.uri_problem(location)
        return [f"  output: {problem}"] if problem else _remote_output_problems(config, location)
    given = Path(os.path.abspath(uris.local_part(location)))
    broken = _broken_link(given)
    if broken:
        return [f"  output: {broken}"]
    out = Path(os.path.realpath(given))
    shown = f"{out}" + (f" (where {given} leads)" if out != given else "")
    problems = []
    problem = _root_problem(pafs.LocalFileSystem(), str(out))
    if problem:
        problems.append(f"  output: {problem}" + (f" ({given} leads there)" if out != given else ""))
    entries = root_entries()
    for i, source in enumerate(config.sources):
        for j, pattern in enumerate(source.paths):
            if uris.is_remote(pattern):
                continue  # an object-store pattern reaches no local folder
            key = f"sources[{i}].paths[{j}]"
            parts = _real_pattern(str(config.resolve(uris.local_part(pattern))))
            matched = _matches(config, pattern, listed)
            # A file matched now that lies in the output folder, however the pattern reached it (a symlinked folder
            # on its way): the run would read it back.
            inside = next((f for f in matched if Path(f).is_relative_to(out)), None)  # matches are real paths
            if inside is not None:
                problems.append(f"  {key}: {pattern!r} matches files under its output folder {shown} (e.g. {inside}): "
                                f"each run would read its own output again. Put `output` outside the sources' "
                                f"folders, or narrow the pattern")
            elif uris.glob_reaches(parts, list(out.parts), entries):
                shard = _first_shard(config, source, listed, matched)
                problems.append(_reach_problem(key, pattern, shown, _examples(config, str(out), shard),
                                               lambda e: uris.glob_match(parts, list(Path(e).parts))))
    return problems


def _matches(config: RunView, pattern: str, listed: "dict[str, Any] | None") -> list:
    """The files a local pattern matches (as listed by validation, or listed now); none when it is unsafe to list."""
    if listed is not None and pattern in listed:
        return list(listed[pattern])
    from tokenmill.sources.patterns import expand_pattern

    return expand_pattern(config, pattern)


def _first_shard(config: RunView, source, listed: "dict[str, Any] | None", matched: list) -> str | None:
    """The name the run gives the first shard of the first file a pattern of `source` matches now (`matched`, else
    the source's first file), by `SourceStage.first_shard`; None for objects or when nothing is listed."""
    from tokenmill.sources.patterns import source_files
    from tokenmill.pipeline.registry import source_stage

    if any(uris.is_remote(p) for p in source.paths):
        return None
    try:
        root, files = source_files(config, source, listed)
    except (OSError, ValueError):
        return None
    first = Path(matched[0]).resolve() if matched else (Path(files[0]) if files else None)
    if first is None or not isinstance(root, Path) or not first.is_relative_to(root):
        return None
    return source_stage().first_shard(source.name, first.relative_to(root).as_posix())
