"""The stage contract: what a stage declares, its phases and tasks, what they see and return; no runner, no I/O."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Mapping

import pyarrow as pa

from tokenmill.config_base import StageConfig, resolve

if TYPE_CHECKING:
    import pyarrow.fs as pafs


@dataclass(frozen=True)
class RunContext:
    """What a stage may know about the run besides its own config."""

    seed: int
    sources: Mapping[str, Any]
    """Source configs (`tokenmill.sources.config.SourceConfig`) by name."""
    base_dir: str = "."
    """The config file's folder, for files a stage config names (never part of a stage's identity)."""

    def resolve(self, path: str) -> str:
        """A path from a stage's config as the file to open (see `resolve`)."""
        return str(resolve(path, self.base_dir))


@dataclass(frozen=True)
class Resources:
    """What one task of a phase takes from a worker; the executor asks Ray for it."""

    cpus: float = 1.0
    memory_mb: int | None = None
    """Memory to reserve per task; None: no reservation (Ray's default)."""

    def ray_options(self) -> dict[str, Any]:
        return {"num_cpus": self.cpus, **({"memory": self.memory_mb * 2**20} if self.memory_mb else {})}


@dataclass(frozen=True)
class Processed:
    """A stage's verdict on one table: the rows (with added columns) and a drop reason per row (null = kept)."""

    table: pa.Table
    drop_reason: pa.Array
    stats: Mapping[str, Any] | None = None
    """Stage-specific counts for this shard (nested dicts of numbers, lists of examples): summed over shards
    with `merge_stats`, then shaped by `Stage.report` into the manifest's `report`."""

    def __post_init__(self) -> None:
        if len(self.drop_reason) != self.table.num_rows:
            raise ValueError(f"{len(self.drop_reason)} drop reasons for {self.table.num_rows} rows")


@dataclass(frozen=True)
class Task:
    """One unit of work of a phase; `key` is unique in the phase and names its completion record."""

    key: str
    inputs: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ShardsResult:
    """What a shard-writing task returns: the manifest entries of the shards it wrote (kept and dropped files,
    counts per source and subset, the stage's per-shard `stats`). Its completion record holds `to_json()`."""

    shards: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"shards": self.shards}

    @classmethod
    def from_json(cls, data: Any) -> "ShardsResult":
        if not isinstance(data, dict) or not isinstance(data.get("shards"), list):
            raise ValueError(f"not a shards result: {data!r:.200}")
        return cls(data["shards"])


@dataclass(frozen=True)
class PlanContext:
    """Driver-side view of a stage run: where its input and output are, and what earlier phases produced."""

    stage_dir: str
    input_dir: str | None
    input_shards: list[dict[str, Any]]
    shared: Mapping[str, Any] = field(default_factory=dict)
    """What each earlier phase's `reduce` (or `DriverPhase.build`) returned, by phase name."""
    fs: Any = None
    """The run folder's filesystem (`pyarrow.fs`)."""


@dataclass
class TaskContext:
    """Worker-side view of one task attempt."""

    stage_dir: str
    input_dir: str | None
    shared: Mapping[str, Any]
    writer: Any
    """The task's `commit.TaskWriter` (`fs`, `write`): files are published only when the task commits."""

    @property
    def fs(self) -> "pafs.FileSystem":
        return self.writer.fs

    def write(self, relpath: str, data: bytes) -> None:
        """Write an output file (relative to the stage folder); it is published only when the task commits."""
        self.writer.write(relpath, data)

    def link(self, relpath: str, source: str) -> bool:
        """Publish the existing file `source` (a path in `fs`) as an output file, without rewriting it; False when
        the filesystem cannot, and the caller writes the bytes instead."""
        return self.writer.link(relpath, source)


class Phase(ABC):
    """A set of independent tasks; a stage's phases run in order, each task committed on its own.

    A phase's tasks return a small JSON-able `result` (a `ShardsResult` for a phase that `writes_shards`); after
    the whole phase, `reduce` turns the results into one object that every task of the later phases receives
    through the object store (`ctx.shared[phase.name]`: a cluster table, a trained tokenizer), and that
    `Stage.report` receives in `reduced`. The stage's shards and their manifest entries come from its last phase
    that `writes_shards`; a phase after it may only gather side files (join per-shard hit files into one).
    """

    name: ClassVar[str]
    """Names the phase's completion-record folder (`_work/commits/<name>/`): renaming it recomputes its tasks."""
    resources: ClassVar[Resources] = Resources()
    writes_shards: ClassVar[bool] = False

    @abstractmethod
    def plan(self, stage: "Stage", ctx: PlanContext) -> list[Task]:
        """The tasks of this phase, in a stable order (driver side, no I/O beyond listing)."""

    @abstractmethod
    def run(self, stage: "Stage", task: Task, ctx: TaskContext) -> Any:
        """Do one task in a worker; write files through `ctx.write`; return a small JSON-able result."""

    def reduce(self, stage: "Stage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        """Combine the task results (by task key) into what later phases and the report need; default: nothing.

        Runs on the driver; `ctx.fs` and `ctx.stage_dir` reach files the tasks wrote (a large index, say)."""
        return None

    def again(self, stage: "Stage", ctx: PlanContext) -> bool:
        """After `reduce`: whether the phase runs one more round (an iterative algorithm whose number of rounds
        depends on the data, such as dedup's connected components). The next round's `plan` finds this round's
        reduced result in `ctx.shared[self.name]`; its task keys must differ from every earlier round's (name them
        by round), since a key names a completion record. Runs on the driver; default: one round."""
        return False


class DriverPhase(ABC):
    """Work done once on the driver, with no tasks (building an index from small files the config names): what
    `build` returns reaches later phases and the report as a phase's `reduce` result does."""

    name: ClassVar[str]

    @abstractmethod
    def build(self, stage: "Stage", ctx: PlanContext) -> Any: ...


_REGISTRY: dict[str, type["Stage"]] = {}


class Stage(ABC):
    """A pipeline stage: declared columns, drop reasons, config, paths and phases.

    Subclasses declare what they need and add, so that the runner checks the whole chain of stages before any
    task is submitted, and the drop reasons they may emit, so that a manifest can be checked against them.
    A class that sets `order` registers itself under its `name`: the config key `stages.<name>`, the folder
    `<output>/<name>/`, and its place in the pipeline. Ad-hoc stages (tests, embedding) leave `order` unset and
    are passed to the runner directly.
    """

    name: ClassVar[str]
    order: ClassVar[float]
    """Position in the pipeline (ingest 0, sample 10, metadata_filter 15, clean 20, dedup 30, subdoc 35, decontaminate
    40, tokenize 50)."""
    config_class: ClassVar[type[StageConfig]] = StageConfig
    """The stage's config model: `stages.<name>` in the run config."""
    paths: ClassVar[tuple[str, ...]] = ()
    """Keys of its config that name files (`blocklist`, `evalsets[].path`, `tokenizer.encoder`): `~` and `$VAR`
    expanded when the config loads, each checked to be a file before any work, opened through `resolve`."""
    needs: ClassVar[frozenset[str]] = frozenset({"id", "text", "source"})
    """Columns that an earlier stage (or ingest) must provide."""
    uses: ClassVar[frozenset[str]] = frozenset()
    """Columns used when present, else filled from a fallback (`lang` from the source's `language`)."""
    adds: tuple[pa.Field, ...] = ()
    """Annotation columns this stage adds to every row. Declared on the class; an instance may set its own in
    `__init__` when its columns depend on its config (the clean stage's classifier scores): the chain check, the
    map phase and the manifest read them through the instance."""
    drop_reasons: tuple[str, ...] = ()
    """The closed set of reasons this stage may drop a document for (declared on the class; an instance may set its
    own in `__init__` from its config, as `adds`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "order" not in cls.__dict__:
            return
        other = _REGISTRY.get(cls.name)
        if other is not None and (other.__module__, other.__qualname__) != (cls.__module__, cls.__qualname__):
            raise TypeError(f"stage name {cls.name!r} is taken by {other.__module__}.{other.__qualname__}")
        _REGISTRY[cls.name] = cls

    def __init__(self, config: StageConfig, run: RunContext):
        self.config = config
        self.run = run

    def identity(self) -> dict[str, Any]:
        """What determines this stage's output besides its input: hashed into the resume key."""
        return {"config": self.config.model_dump(mode="json"), "seed": self.run.seed}

    def phases(self) -> list[Phase | DriverPhase]:
        """The ordered phases (a stage with one shard-wise map subclasses `map_phase.MapStage`)."""
        raise NotImplementedError(f"stage {self.name!r} declares no phases")

    def setup(self, shared: Mapping[str, Any]) -> None:
        """Load models or indexes once per worker, before its first task."""

    def report(self, stats: Mapping[str, Any], reduced: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """Shape the summed per-shard `stats` into the manifest's `report` (e.g. keep the worst examples only).

        `reduced`, given to a stage whose phases reduced anything, holds each such phase's result by phase name
        (global facts: the cluster summary, the index); `stats` is then empty when no shard had stats.
        Default: the summed stats as they are; None (no report) when there are none."""
        return dict(stats) if stats else None

    def resolve(self, path: str) -> str:
        """A path from this stage's config as the file to open (`~`, `$VAR`, the config file's folder)."""
        return self.run.resolve(path)

    @classmethod
    def config_problems(cls, config: StageConfig, resolve_path: Any) -> list[str]:
        """What is wrong with a valid config that only opening its files shows (a tokenizer that does not load),
        one line per problem naming the full key (`stages.tokenize.tokenizer: ...`); `resolve_path(path) -> Path`.
        Runs only when every file of `paths` exists. Default: nothing."""
        return []

    def check_reasons(self, reasons: pa.Array) -> None:
        """A drop reason outside the declared set is a bug in the stage: fail the task loudly."""
        import pyarrow.compute as pc

        used = set(pc.unique(reasons.drop_null()).to_pylist()) if reasons.null_count < len(reasons) else set()
        unknown = used - set(self.drop_reasons)
        if unknown:
            raise RuntimeError(f"stage {self.name!r} emitted undeclared drop reasons {sorted(unknown)}")


class SourceStage(Stage):
    """The first stage: reads files the run config names, rather than an earlier stage's shards. Its input is a
    listing (in the manifest) and a stamp per file (in the resume key only)."""

    needs = frozenset()

    @classmethod
    @abstractmethod
    def build(cls, config: Any, run: RunContext) -> "SourceStage":
        """The stage for a run config (`tokenmill.pipeline.config.RunConfig`): lists its files."""

    @abstractmethod
    def input_listing(self) -> list[dict[str, Any]]:
        """What the stage reads, for the manifest and the input hash (no times: the content must not move)."""

    @abstractmethod
    def input_stamp(self) -> Any:
        """What says the listed files are unchanged (modification times, content hashes): in the resume key only."""

    @classmethod
    def first_shard(cls, source: str, relpath: str) -> str | None:
        """The name of the first shard the stage writes from `source`'s file `relpath` (below the source's root), if
        it can say: validation shows it as the file a source pattern reaching into the run folder would read back."""
        return None


def registered() -> Mapping[str, type[Stage]]:
    """The stage classes imported so far, by name (see `tokenmill.pipeline.registry` for discovery)."""
    return _REGISTRY


def config_paths(config: Any, key: str) -> Iterator[tuple[str, str]]:
    """(`key` with list indexes, value) of every string a declared path key (`evalsets[].path`) reaches in a
    validated config; a key that reaches something else (a `{train: ...}` tokenizer) yields nothing."""

    def walk(node: Any, steps: list[str], where: str) -> Iterator[tuple[str, str]]:
        if not steps:
            if isinstance(node, str):
                yield where, node
            return
        name, each = steps[0].removesuffix("[]"), steps[0].endswith("[]")
        child = node.get(name) if isinstance(node, dict) else getattr(node, name, None)
        here = f"{where}.{name}" if where else name
        if each and isinstance(child, (list, tuple)):
            for i, item in enumerate(child):
                yield from walk(item, steps[1:], f"{here}[{i}]")
        elif not each and child is not None:
            yield from walk(child, steps[1:], here)

    yield from walk(config, key.split("."), "")
