"""A run directory: where it is, which stages it holds, and reading a stage's kept or dropped shards as Arrow (or
scanning them as one polars frame).

Every helper of ``tokenmill.inspect`` takes ``run`` (a run folder, the config's ``output``); ``None`` means the
``TOKENMILL_RUN`` environment variable, else the demo run ``build/demo/run`` of the repository checkout (or of the
working directory when tokenmill is installed elsewhere). Errors a user can fix raise ``TokenmillError``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from tokenmill.errors import TokenmillError
from tokenmill.pipeline.manifest import DROPPED, MANIFEST, SHARDS, read_manifest

if TYPE_CHECKING:
    import polars as pl


def _repo_root() -> Path:
    """The checkout this package was imported from (src layout), else the working directory."""
    here = Path(__file__).resolve()
    root = here.parents[3]
    return root if (root / "pyproject.toml").is_file() and (root / "src" / "tokenmill").is_dir() else Path.cwd()


DEFAULT_RUN = _repo_root() / "build" / "demo" / "run"


def run_dir(run: str | os.PathLike | None = None) -> Path:
    """The run folder: ``run``, else ``$TOKENMILL_RUN``, else ``DEFAULT_RUN``; it must exist."""
    path = Path(run if run is not None else os.environ.get("TOKENMILL_RUN") or DEFAULT_RUN)
    if not path.is_dir():
        hint = " (`make demo` writes the demo run)" if path == DEFAULT_RUN else ""
        raise TokenmillError(f"run folder {path} does not exist{hint}")
    return path


def stages(run: str | os.PathLike | None = None) -> list[str]:
    """The stages of the run that have a folder, in pipeline order (the registered stages'; others after, by name)."""
    from tokenmill.pipeline.registry import stage_order

    root = run_dir(run)
    present = [p.name for p in root.iterdir()
               if p.is_dir() and not p.name.startswith("_") and ((p / MANIFEST).is_file() or (p / SHARDS).is_dir())]
    order = stage_order()
    return sorted(present, key=lambda s: (order.index(s) if s in order else len(order), s))


def stage_dir(run: str | os.PathLike | None, stage: str) -> Path:
    root = run_dir(run)
    path = root / stage
    if not path.is_dir():
        raise TokenmillError(f"{root} has no stage {stage!r}; it has: {', '.join(stages(root)) or 'none'}")
    return path


def manifest(run: str | os.PathLike | None, stage: str) -> dict:
    """The ``content`` part of a stage's manifest (written when the stage completed)."""
    path = stage_dir(run, stage) / MANIFEST
    if not path.is_file():
        raise TokenmillError(f"{path} does not exist: the stage {stage!r} has not completed")
    return read_manifest(pafs.LocalFileSystem(), str(path.parent), required=True)["content"]


def shard_files(run: str | os.PathLike | None, stage: str, dropped: bool = False) -> list[Path]:
    """Kept (``shards/``) or dropped (``dropped/``) Parquet files of a stage, sorted by name."""
    folder = stage_dir(run, stage) / (DROPPED if dropped else SHARDS)
    return sorted(folder.glob("*.parquet")) if folder.is_dir() else []


def _columns(path: Path, wanted: Sequence[str] | None) -> list[str] | None:
    if wanted is None:
        return None
    names = set(pq.read_schema(path).names)
    return [c for c in wanted if c in names]


def iter_tables(run: str | os.PathLike | None, stage: str, dropped: bool = False,
                columns: Sequence[str] | None = None, source: str | None = None) -> Iterator[tuple[Path, pa.Table]]:
    """(file, table) per shard file; ``columns`` missing from a file are left out; ``source`` filters rows."""
    for path in shard_files(run, stage, dropped):
        table = pq.read_table(path, columns=_columns(path, columns))
        if source is not None and "source" in table.column_names:
            table = table.filter(pc.equal(table["source"], source))
        yield path, table


def read_docs(run: str | os.PathLike | None, stage: str, dropped: bool = False,
              columns: Sequence[str] | None = None, source: str | None = None) -> pa.Table:
    """Every kept (or dropped) document of a stage as one table (small runs; large ones: ``iter_tables``)."""
    tables = [t for _, t in iter_tables(run, stage, dropped, columns, source)]
    if not tables:
        return pa.table({c: pa.array([], pa.string()) for c in (columns or ("id", "text", "source"))})
    return pa.concat_tables(tables, promote_options="permissive")


def scan_docs(run: str | os.PathLike | None, stage: str, dropped: bool = False) -> "pl.LazyFrame":
    """Every kept (or dropped) document of a stage as one polars ``LazyFrame``, for runs too large to read whole: a
    query reads only the columns and row groups it needs (``scan_docs(run, "clean").filter(pl.col("source") == "web")
    .select("id", "text").head(5).collect()``). Rows in file order; columns one shard lacks are null in its rows."""
    import polars as pl

    files = shard_files(run, stage, dropped)
    if not files:
        return pl.LazyFrame(schema={c: pl.String for c in ("id", "text", "source")})
    return pl.concat([pl.scan_parquet(path) for path in files], how="diagonal_relaxed")


def find_doc(run: str | os.PathLike | None, stage: str, doc_id: str) -> dict | None:
    """One document by id from a stage, kept first, then dropped (with ``drop_reason``); None if absent."""
    for dropped in (False, True):
        for path in shard_files(run, stage, dropped):
            table = pq.read_table(path, filters=[("id", "=", doc_id)])
            if table.num_rows:
                return {**table.slice(0, 1).to_pylist()[0], "dropped": dropped}
    return None
