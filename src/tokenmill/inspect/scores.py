"""Documents of a stage ranked by a score column (a classifier's `<name>_score`, or any numeric annotation): the best
and the worst, kept and dropped together, and a classifier's audit from the clean manifest with the documents just
above and just below its threshold (docs/classifier.md, "Auditing a classifier").

Ranking reads only light columns (id, source, subset, drop_reason, the score) of every shard through polars, then the
texts of the chosen rows alone. Order is the score, then the id, so the same run gives the same rows. Documents
without a score (NaN or null: an override's list without that classifier) are left out.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pyarrow.types as pat

from tokenmill.errors import TokenmillError
from tokenmill.inspect.runs import manifest, shard_files

LIGHT = ("id", "source", "subset", "drop_reason")


def _shards(run, stage: str) -> list[tuple[bool, Path, pa.Schema]]:
    """(dropped, path, schema) of every kept then dropped shard of a stage: each footer read once per call."""
    return [(dropped, path, pq.read_schema(path))
            for dropped in (False, True) for path in shard_files(run, stage, dropped)]


def _numeric(shards: list[tuple[bool, Path, pa.Schema]]) -> list[str]:
    numeric: dict[str, None] = {}
    for _, _, schema in shards:
        for field in schema:
            if pat.is_floating(field.type) or pat.is_integer(field.type):
                numeric.setdefault(field.name)
    return sorted(numeric, key=lambda c: (not c.endswith("_score"), c))


def score_columns(run: str | os.PathLike | None, stage: str = "clean") -> list[str]:
    """The numeric columns of a stage's kept and dropped shards (what `ranked` sorts by), `*_score` ones first."""
    return _numeric(_shards(run, stage))


def _light(shards: list[tuple[bool, Path, pa.Schema]], column: str):
    """Light columns of every kept and dropped row as one polars LazyFrame, with `status`, `file` and `row`."""
    import polars as pl

    frames = []
    for dropped, path, schema in shards:
        names = set(schema.names)
        frame = pl.scan_parquet(path).with_row_index("row").select(
            "row", *[pl.col(c) if c in names else pl.lit(None, pl.String).alias(c) for c in LIGHT],
            pl.col(column).cast(pl.Float64) if column in names else pl.lit(None, pl.Float64).alias(column))
        frames.append(frame.with_columns(status=pl.lit("dropped" if dropped else "kept"), file=pl.lit(str(path))))
    return pl.concat(frames, how="vertical_relaxed")


def _check_column(shards: list[tuple[bool, Path, pa.Schema]], stage: str, column: str) -> None:
    columns = _numeric(shards)
    if column not in columns:
        raise TokenmillError(f"stage {stage!r} has no score column {column!r}; its numeric columns: "
                             f"{', '.join(columns) or 'none'}")


def _with_texts(rows: list[dict], chars: int | None) -> list[dict]:
    """`rows` (each with `file` and `row`) with their `text`, read for those rows only, in the same order."""
    by_file: dict[str, list[int]] = {}
    for r in rows:
        by_file.setdefault(r["file"], []).append(r["row"])
    texts: dict[tuple[str, int], str] = {}
    for path, idx in by_file.items():
        idx = sorted(set(idx))
        table = pq.read_table(Path(path), columns=["text"]).take(idx)
        texts.update(zip(((path, i) for i in idx), table.column("text").to_pylist()))
    out = []
    for r in rows:
        text = texts[(r["file"], r["row"])] or ""
        out.append({**{k: v for k, v in r.items() if k not in ("file", "row")},
                    "text": text if chars is None else text[:chars]})
    return out


def _rows(frame, column: str, descending: bool, n: int) -> list[dict]:
    return (frame.sort([column, "id"], descending=[descending, False], nulls_last=True)
            .head(n).select("id", "source", "subset", "status", "drop_reason", column, "file", "row")
            .collect().to_dicts()) if n > 0 else []


def _scored(frame, column: str, source: str | None):
    import polars as pl

    frame = frame.filter(pl.col(column).is_not_null() & pl.col(column).is_not_nan())
    return frame if source is None else frame.filter(pl.col("source") == source)


def ranked(run: str | os.PathLike | None = None, stage: str = "clean", column: str = "", n: int = 5,
           source: str | None = None, chars: int | None = None) -> dict[str, list[dict]]:
    """The ``n`` best (highest ``column``) and ``n`` worst documents of ``stage``, kept and dropped together:
    ``{"best": rows, "worst": rows}``, each row id, source, subset, status (kept or dropped), drop_reason, the score
    and the text (cut to ``chars``). Ties go by id. An unknown column raises naming the numeric columns there are."""
    shards = _shards(run, stage)
    _check_column(shards, stage, column)
    frame = _scored(_light(shards, column), column, source)
    if source is not None and frame.select("id").head(1).collect().height == 0:
        raise TokenmillError(f"stage {stage!r} has no document of source {source!r} with a {column}")
    return {"best": _with_texts(_rows(frame, column, True, n), chars),
            "worst": _with_texts(_rows(frame, column, False, n), chars)}


def classifier_report(run: str | os.PathLike | None = None, stage: str = "clean") -> dict[str, dict[str, Any]]:
    """The clean manifest's audit per classifier: name -> source -> scored, below_threshold, dropped,
    percent_dropped, thresholds (threshold -> documents judged by it), quantiles, histogram ([low, high,
    documents] per bin). Empty when no classifier ran."""
    report = manifest(run, stage).get("report", {}).get("classifiers", {})
    return {name: entry.get("by_source", {}) for name, entry in report.items() if isinstance(entry, dict)}


def classifier_summary(run: str | os.PathLike | None = None, stage: str = "clean") -> list[dict]:
    """One row per classifier and source: scored, dropped, percent dropped, thresholds, and the 10th, 50th and 90th
    percentile scores."""
    rows = []
    for name, by_source in classifier_report(run, stage).items():
        for source, e in by_source.items():
            q = e.get("quantiles", {})
            rows.append({"classifier": name, "source": source, "scored": e["scored"], "dropped": e["dropped"],
                         "percent_dropped": e["percent_dropped"], "thresholds": ", ".join(e["thresholds"]),
                         "p10": q.get("p10"), "p50": q.get("p50"), "p90": q.get("p90")})
    return rows


def around_threshold(run: str | os.PathLike | None = None, name: str = "", n: int = 3, stage: str = "clean",
                     chars: int | None = 400) -> list[dict]:
    """For each source and each threshold classifier ``name`` applied to it (several where subset overrides set
    their own): the ``n`` documents scoring just above it (at or above: kept by it) and the ``n`` just below (dropped
    by it, unless an earlier filter had dropped them), closest first. Each row adds ``threshold`` and ``side``."""
    import polars as pl

    report = classifier_report(run, stage)
    if name not in report:
        raise TokenmillError(f"stage {stage!r} ran no classifier {name!r}; classifiers: {', '.join(report) or 'none'}")
    column = f"{name}_score"
    frame = _scored(_light(_shards(run, stage), column), column, None)
    out = []
    for source, entry in sorted(report[name].items()):
        mine = frame.filter(pl.col("source") == source)
        for threshold in sorted(entry["thresholds"], key=float):
            t = float(threshold)
            above = _rows(mine.filter(pl.col(column) >= t), column, False, n)
            below = _rows(mine.filter(pl.col(column) < t), column, True, n)
            out += [{"threshold": t, "side": side, **r} for side, rows in (("above", above), ("below", below))
                    for r in _with_texts(rows, chars)]
    return out
