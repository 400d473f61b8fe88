"""The sub-document dedup stage: lines or paragraphs repeated across many documents (navigation, cookie banners,
license headers, forum signatures) removed from all but the first document holding them (docs/subdoc.md).

Three phases, none holding more than one shard or one partition of the span hashes:
(a) `spans`, per shard: each document's distinct span hashes (`tokenmill.subdoc.doc_spans`) as (hash, document
    reference) rows, written as one file per shard with a row group per hash partition (`hash % partitions`).
(b) `count`, per partition: the partition's row group of every shard's file; per hash, the distinct documents
    holding it and the first (smallest reference); for each hash held by more than `max_docs` documents, every
    (document, hash) but the first's, written as one file per partition with a row group per shard that holds
    them: each apply task reads only its own removals. The first documents' (document, hash) rows likewise, routed
    to the first document's shard.
(c) `apply`, per shard: the listed spans removed from their documents' text; a document left with less than
    `min_doc_chars` characters (stripped) dropped as `subdoc_too_short`, its text in `dropped/` as it came. For
    inspection (`tokenmill.inspect.subdoc`), beside the shard: `removed/<shard>.parquet` (id, source, hash, docs,
    chars, span: each span a document lost) and `kept/<shard>.parquet` (the same for each span a document of the
    shard kept for the others, and whether that document was dropped itself); the span cut to `SPAN_CHARS`.

Document references are (shard index << 32 | row), the shard index counting the input shards sorted by (source,
shard name): the first document of a span, and so every output byte, is the same whatever the worker count.
Code documents (`escapes.content_kind`, the detector clean's escape checks and code handling use) give no spans
with `code: keep` (the default), so none of their lines is ever removed.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import replace
from typing import Any, Literal, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field, field_validator

from tokenmill.config_base import StageConfig
from tokenmill.documents import parquet_bytes, replace_rows
from tokenmill.pipeline import storage
from tokenmill.pipeline.contract import Phase, PlanContext, Stage, Task, TaskContext
from tokenmill.pipeline.map_phase import ShardMap, ShardOutput, shard_name, shard_tasks
from tokenmill.pipeline.stats import text_bytes
from tokenmill.subdoc import count_spans, doc_spans, remove_spans_batch, span_texts
from tokenmill.text.escapes import content_kind

log = logging.getLogger(__name__)

TOO_SHORT = "subdoc_too_short"
TOP = 20
"""Spans named in the report (the most widely held removed spans, with examples of their text)."""
SPAN_CHARS = 1000
"""Characters of a span written to `removed/` and `kept/` (its length is in `chars`): a 5 MB line repeated across
a thousand pages would otherwise be written a thousand times whole."""


MIN_PARTITIONS = 16
"""`auto`'s least: the count every run used before `auto`, so that runs under 8 GiB of text keep their bytes."""
MAX_PARTITIONS = 4096
TEXT_BYTES_PER_PARTITION = 1 << 29
"""`auto`'s most text (512 MiB) per count task. A count task holds its partition's (hash, document) rows, about
one per line of text: 16 partitions over the 10 GB scale corpus (640 MB of text each) took a worker to 942 MB
(docs/scale.md); every task of the count phase reads its row group of every shard's file, so more partitions than
needed cost reads."""


def partition_count(setting: int | str, input_shards: list[dict[str, Any]]) -> int:
    """The config's `partitions`, or for `auto` 16 doubled until no partition holds more than
    `TEXT_BYTES_PER_PARTITION` of the input's text (as its manifest lists it per shard, so a rerun over the same
    input plans the same tasks and writes the same bytes)."""
    if setting != "auto":
        return int(setting)
    total = sum(int(s.get("bytes_out", 0)) for s in input_shards)
    count = MIN_PARTITIONS
    while count < MAX_PARTITIONS and total > count * TEXT_BYTES_PER_PARTITION:
        count *= 2
    return count


class SubdocConfig(StageConfig):
    """Spans repeated across more than `max_docs` documents, removed from all but the first."""

    unit: Literal["lines", "paragraphs"] = "lines"
    """What a span is: a line (split on newlines: Dolma's "paragraphs", FineWeb's lines) or a paragraph (split
    on blank lines)."""
    min_chars: int = Field(default=20, ge=1)
    """Spans shorter than this many characters (normalised: stripped, whitespace runs one space) are ignored:
    never counted, never removed. Characters, not words: a Chinese line counts as any other."""
    max_docs: int = Field(default=3, ge=1)
    """A span held by more than this many distinct documents is removed from all of them but the first
    (1: every second occurrence goes, as Dolma's paragraph dedup)."""
    min_doc_chars: int = Field(default=50, ge=0)
    """A document that lost spans and is left with fewer characters than this (stripped) is dropped as
    `subdoc_too_short`; a document that lost nothing is never dropped here."""
    code: Literal["keep", "dedup"] = "keep"
    """Code documents (by content, `escapes.content_kind`): `keep` every line; `dedup` as any other document."""
    partitions: int | Literal["auto"] = "auto"
    """Hash partitions: one count task each; more partitions, less memory per task. `auto` (default): 16, doubled
    until each holds at most `TEXT_BYTES_PER_PARTITION` of the input's text (`partition_count`), so that a count
    task's memory stays flat as the corpus grows."""

    @field_validator("partitions")
    @classmethod
    def _bounded(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= MAX_PARTITIONS:
            raise ValueError(f"partitions must be `auto` or 1 to {MAX_PARTITIONS}, got {value}")
        return value


_W = r"[0-9A-Za-z_\x{80}-\x{10FFFF}]"  # Python's Unicode `\w`, or more: every character past ASCII
_LINE = r"(?:^|\n)[ \t]*"  # `content_kind` matches its line signals in the text with a line break put first
_END = r"[ \t]*\r?(?:\n|$)"  # `\r?$` under re.M
CODE_SIGNAL_RE2 = "|".join([
    # _CODE_STRONG's alternatives, in order
    _LINE + r"(?:def|class|fn|func|function|sub)[ \t]+" + _W + r"+[ \t]*[(:<{]",
    r"import[ \t]",
    _LINE + r"using[ \t]+[0-9A-Za-z_.:\x{80}-\x{10FFFF}]+[ \t]*;",
    _LINE + r"package[ \t]+[0-9A-Za-z_.\x{80}-\x{10FFFF}]+[ \t]*;",
    r">>>[ \t]",
    r"#[ \t]*(?:include|define|ifn?def|endif|pragma|undef)",
    r'"""',
    r"\)[ \t]*;" + _END,
    r"(?:printf|println|console\.log|System\.out\.print|re\.(?:compile|match|fullmatch|search|subn?|findall"
    r"|finditer|split)|preg_(?:match|replace|split))\(",
    # _CODE_WEAK's
    r"(?:^|\n)[ \t]{2,}(?:return|if|for|while|elif|else|try|except|finally|with|raise|yield|assert|break|continue)",
    _LINE + r"(?:public|private|protected|static)[ \t]+" + _W,
    _LINE + r"\}[ \t]*;?" + _END,
    _LINE + r"[A-Za-z_][0-9A-Za-z_.\x{80}-\x{10FFFF}]*(?:\[[^\]\n]*\])?[ \t]*[+\-*/|&]?=",
    r"\{" + _END,
    r"\.(?:join|split|replace|strip|rstrip|lstrip|startswith|endswith|append|format|encode|decode)\(",
    r"(?:len|range|enumerate|isinstance|sorted|strlen|strcmp|strcpy|malloc|free)\(",
    r"\\[dswbDSWB]",
    # _CODE_OPERATOR's
    r"==|!=|&&|\|\||\+=|-=|\*=|->|=>|::|\+\+",
])
"""Where any code signal of `escapes.content_kind` (its `_CODE_STRONG`, `_CODE_WEAK`, `_CODE_OPERATOR`) may be, in
RE2: each alternative is one of theirs with the lookarounds and `\\b` left out, `\\w` widened to every non-ASCII
character and the rest of a match after its first sure part cut, so it matches wherever theirs does, and more. A
document without a signal is prose to `content_kind` (code needs 4), so only the others are asked."""


def code_documents(column: pa.ChunkedArray) -> list[bool]:
    """`content_kind(text) == "code"` for each text, asked only of the texts where RE2 finds a code signal."""
    if not len(column):
        return []
    maybe = pc.match_substring_regex(column, CODE_SIGNAL_RE2).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(maybe)
    out = [False] * len(column)
    for row, text in zip(rows.tolist(), column.take(pa.array(rows)).to_pylist()):
        out[row] = content_kind(text) == "code"
    return out


def _stable_order(shards: list[dict[str, Any]]) -> list[int]:
    """Indices of the input shards sorted by (source, shard name): the order that decides a span's first document."""
    return sorted(range(len(shards)), key=lambda i: (shards[i]["source"], shard_name(shards[i]["path"])))


def _grouped_bytes(table: pa.Table, group: np.ndarray) -> tuple[bytes, list[int]]:
    """`table` as Parquet with one row group per distinct `group` value (ascending), and those values in order."""
    order = np.argsort(group, kind="stable")
    table, group = table.take(pa.array(order)), group[order]
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if group.size else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], group.size].astype(np.int64)
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, compression="zstd") as writer:
        for a, b in zip(starts.tolist(), ends.tolist()):
            writer.write_table(table.slice(a, b - a), row_group_size=max(b - a, 1))
    return sink.getvalue().to_pybytes(), [int(group[a]) for a in starts.tolist()]


def _read_groups(ctx: TaskContext, refs: list[list[Any]], folder: str, columns: list[str]) -> pa.Table | None:
    """The row groups `refs` ([file key, row group index], ...) of the files in `folder`, concatenated."""
    parts = []
    for key, index in refs:
        with ctx.fs.open_input_file(storage.join(ctx.stage_dir, f"{folder}/{key}.parquet")) as f:
            parts.append(pq.ParquetFile(f).read_row_group(int(index), columns=columns))
    return pa.concat_tables(parts) if parts else None


def _where(results: Mapping[str, Any], field: str = "groups") -> dict[str, list[list[Any]]]:
    """Which (file key, row group) hold each group, from the tasks' `field` lists (task keys sorted)."""
    found: dict[str, list[list[Any]]] = {}
    for key in sorted(results):
        for index, group in enumerate(results[key][field]):
            found.setdefault(str(group), []).append([key, index])
    return found


def _sum(results: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, int]:
    return {n: int(sum(results[k].get(n, 0) for k in results)) for n in names}


def _by_row(rows: pa.Table | None) -> dict[int, dict[int, int]]:
    """{row in its shard: {hash: documents holding it}} from `_work` (doc, hash, docs) rows."""
    out: dict[int, dict[int, int]] = {}
    if rows is not None:
        for doc, h, n in zip(*(rows.column(c).to_pylist() for c in ("doc", "hash", "docs"))):
            out.setdefault(doc & 0xFFFFFFFF, {})[h] = n
    return out


def _one_chunk(column: pa.ChunkedArray) -> pa.Array:
    """The column as one array (an empty one when it has no chunks)."""
    return column.combine_chunks() if column.num_chunks else pa.array([], column.type)


class _SpanRows:
    """Rows of a `removed/` or `kept/` file: id, source, hash, docs (documents holding the span), chars (its
    normalised length), span (cut to `SPAN_CHARS`), and for `kept/` whether the document was dropped itself."""

    def __init__(self, kept: bool = False) -> None:
        names = ("id", "source", "hash", "docs", "chars", "span") + (("dropped",) if kept else ())
        self.columns: dict[str, list] = {c: [] for c in names}

    def add(self, doc_id: str, source: str, h: int, docs: int, span: str, dropped: bool | None = None) -> None:
        for name, value in zip(self.columns, (doc_id, source, h, docs, len(span), span[:SPAN_CHARS], dropped)):
            self.columns[name].append(value)

    def parquet(self) -> bytes:
        types = {"id": pa.string(), "source": pa.string(), "hash": pa.uint64(), "docs": pa.int64(),
                 "chars": pa.int64(), "span": pa.string(), "dropped": pa.bool_()}
        return parquet_bytes(pa.table({c: pa.array(v, types[c]) for c, v in self.columns.items()}))


class Spans(Phase):
    """Per shard: (hash, doc) of every distinct span of every document, a row group per hash partition."""

    name = "spans"

    def plan(self, stage: "SubdocStage", ctx: PlanContext) -> list[Task]:
        order = _stable_order(ctx.input_shards)
        partitions = partition_count(stage.config.partitions, ctx.input_shards)
        return [Task(key=shard_name(ctx.input_shards[i]["path"]), inputs=(ctx.input_shards[i]["path"],),
                     params={"index": rank, "partitions": partitions}) for rank, i in enumerate(order)]

    def run(self, stage: "SubdocStage", task: Task, ctx: TaskContext) -> Any:
        path = storage.join(ctx.input_dir, task.inputs[0])
        texts = pq.read_table(path, columns=["text"], filesystem=ctx.fs).column("text")
        skip = code_documents(texts) if stage.config.code == "keep" else None
        found = doc_spans(texts, stage.config.unit, stage.config.min_chars, skip)
        docs = (np.uint64(task.params["index"]) << np.uint64(32)) | found.row.astype(np.uint64)
        table = pa.table({"hash": pa.array(found.hash, pa.uint64()), "doc": pa.array(docs, pa.uint64())})
        data, groups = _grouped_bytes(table, (found.hash % np.uint64(task.params["partitions"])).astype(np.int64))
        ctx.write(f"_work/spans/{task.key}.parquet", data)
        return {"docs": len(texts), "span_rows": int(found.hash.size), "code_docs": int(sum(skip or [])),
                "groups": groups}

    def reduce(self, stage: "SubdocStage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        return {"partitions": _where(results), **_sum(results, ("docs", "span_rows", "code_docs"))}


class Count(Phase):
    """Per hash partition: documents per span hash, the first of them; the removals routed to their shard."""

    name = "count"

    def plan(self, stage: "SubdocStage", ctx: PlanContext) -> list[Task]:
        where = ctx.shared["spans"]["partitions"]
        return [Task(key=f"p{p:04d}", params={"refs": where.get(str(p), [])})
                for p in range(partition_count(stage.config.partitions, ctx.input_shards))]

    def run(self, stage: "SubdocStage", task: Task, ctx: TaskContext) -> Any:
        rows = _read_groups(ctx, task.params["refs"], "_work/spans", ["hash", "doc"])
        hashes = rows.column("hash").to_numpy() if rows is not None else np.zeros(0, np.uint64)
        docs = rows.column("doc").to_numpy() if rows is not None else np.zeros(0, np.uint64)
        counted = count_spans(hashes, docs)
        repeated = counted.repeated(stage.config.max_docs)
        # Every (doc, hash) row of a repeated hash but its first document's; the first documents' rows apart.
        hit = np.zeros(hashes.size, bool)
        held = np.zeros(hashes.size, np.int64)
        first = np.zeros(hashes.size, bool)
        if repeated.hash.size:
            pos = np.minimum(np.searchsorted(repeated.hash, hashes), repeated.hash.size - 1)
            repeat = repeated.hash[pos] == hashes
            first = repeat & (docs == repeated.first[pos])
            hit = repeat & ~first
            held = repeated.count[pos]
        out, groups = self._routed(ctx, "remove", task.key, docs[hit], hashes[hit], held[hit])
        _, kept_groups = self._routed(ctx, "kept", task.key, docs[first], hashes[first], held[first])
        # The top spans, each with the shard of its second document (the first it is removed from): that shard's
        # apply task alone gives its text to the report, so the manifest holds one example per top span.
        top = []
        for i in np.argsort(-repeated.count, kind="stable")[:TOP].tolist():
            second = int(docs[hit & (hashes == repeated.hash[i])].min())
            top.append([f"{int(repeated.hash[i]):016x}", int(repeated.count[i]), second >> 32])
        return {"distinct_spans": int(counted.hash.size), "repeated_spans": int(repeated.hash.size),
                "removals": int(out.num_rows), "groups": groups, "kept_groups": kept_groups, "top": top}

    @staticmethod
    def _routed(ctx: TaskContext, folder: str, key: str, docs: np.ndarray, hashes: np.ndarray,
                held: np.ndarray) -> tuple[pa.Table, list[int]]:
        """(doc, hash, docs holding the hash) rows sorted, written to `_work/<folder>/<key>.parquet` with a row
        group per shard of `doc`; the table and the shards in file order."""
        out = pa.table({"doc": pa.array(docs, pa.uint64()), "hash": pa.array(hashes, pa.uint64()),
                        "docs": pa.array(held, pa.int64())})
        out = out.take(pc.sort_indices(out, sort_keys=[("doc", "ascending"), ("hash", "ascending")]))
        data, groups = _grouped_bytes(out, (out.column("doc").to_numpy() >> np.uint64(32)).astype(np.int64))
        ctx.write(f"_work/{folder}/{key}.parquet", data)
        return out, groups

    def reduce(self, stage: "SubdocStage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        top = sorted((t for k in sorted(results) for t in results[k]["top"]), key=lambda t: (-t[1], t[0]))[:TOP]
        return {"shards": _where(results), "kept": _where(results, "kept_groups"), "top": top,
                **_sum(results, ("distinct_spans", "repeated_spans", "removals"))}


class Apply(ShardMap):
    """Per shard: the spans the count tasks listed for its documents removed; too-short documents dropped."""

    name = "apply"

    def plan(self, stage: "SubdocStage", ctx: PlanContext) -> list[Task]:
        rank = {i: r for r, i in enumerate(_stable_order(ctx.input_shards))}
        where, kept = ctx.shared["count"]["shards"], ctx.shared["count"]["kept"]
        return [replace(t, params={**t.params, "rank": rank[i], "refs": where.get(str(rank[i]), []),
                                   "kept": kept.get(str(rank[i]), [])})
                for i, t in enumerate(shard_tasks(ctx))]

    def map_shard(self, stage: "SubdocStage", task: Task, ctx: TaskContext, table: pa.Table) -> ShardOutput:
        cfg: SubdocConfig = stage.config
        received = text_bytes(table)
        source = task.params["source"]
        remove = _by_row(_read_groups(ctx, task.params["refs"], "_work/remove", ["doc", "hash", "docs"]))
        keep = _by_row(_read_groups(ctx, task.params.get("kept", []), "_work/kept", ["doc", "hash", "docs"]))
        # Only the documents that lose or keep a span become Python strings (a fifth of a web shard); the others'
        # text stays in Arrow, and the new column is the old one with the changed rows replaced.
        column = _one_chunk(table.column("text").cast(pa.string()))
        rows, first_rows = sorted(remove), sorted(keep)
        taken = column.take(pa.array(rows, pa.int64()))
        texts = taken.to_pylist()
        original = dict(zip(rows, texts))
        original.update(zip(first_rows, column.take(pa.array(first_rows, pa.int64())).to_pylist()))
        id_rows = sorted(original)
        ids = dict(zip(id_rows, table.column("id").take(pa.array(id_rows, pa.int64())).cast(pa.string()).to_pylist()))
        reasons: list[str | None] = [None] * table.num_rows
        changed: dict[int, str] = {}  # row -> its new text, rows ascending (filled in `rows`' order)
        top = {h for h, _, shard in ctx.shared["count"]["top"] if shard == task.params["rank"]}
        counts: Counter = Counter()
        examples: dict[str, str] = {}
        removed = _SpanRows()
        results = remove_spans_batch(texts, cfg.unit, cfg.min_chars, [set(remove[row]) for row in rows], taken)
        for row, result in zip(rows, results):
            if not result.spans_removed:
                continue
            counts["docs_changed"] += 1
            counts["spans_removed"] += result.spans_removed
            counts["chars_removed"] += result.chars_removed
            if len(result.text.strip()) < cfg.min_doc_chars:
                reasons[row] = TOO_SHORT  # written whole to dropped/, as it came: what the corpus lost
            else:
                changed[row] = result.text
            for h, span in sorted(result.removed.items()):
                removed.add(ids[row], source, h, remove[row][h], span)
                if f"{h:016x}" in top:
                    examples.setdefault(f"{h:016x}", span[:SPAN_CHARS])
        kept = _SpanRows(kept=True)
        for row in first_rows:  # the first documents: the text they kept for every other holder
            for h, span in sorted(span_texts(original[row], cfg.unit, cfg.min_chars, set(keep[row])).items()):
                kept.add(ids[row], source, h, keep[row][h], span, dropped=reasons[row] is not None)
        if counts:
            text = replace_rows(column, list(changed), list(changed.values()))
            table = table.set_column(table.schema.get_field_index("text"), "text", text)
            ctx.write(f"removed/{task.key}.parquet", removed.parquet())
        if keep:
            ctx.write(f"kept/{task.key}.parquet", kept.parquet())
        stats = {"by_source": {source: dict(sorted(counts.items()))}} if counts else None
        if stats is not None and examples:
            stats["examples"] = [[h, s] for h, s in sorted(examples.items())]
        return ShardOutput(table, pa.array(reasons, pa.string()), stats, bytes_in=received)


class SubdocStage(Stage):
    """Repeated lines or paragraphs removed from all but their first document (docs/subdoc.md)."""

    name = "subdoc"
    order = 35
    """After dedup (whole duplicates gone first, so a page copied whole does not make its every line repeated),
    before decontaminate and tokenize."""
    config_class = SubdocConfig
    needs = frozenset({"id", "text", "source"})
    drop_reasons = (TOO_SHORT,)

    config: SubdocConfig

    def phases(self) -> list[Phase]:
        return [Spans(), Count(), Apply()]

    def report(self, stats: Mapping[str, Any], reduced: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Spans counted and repeated, removals per source (documents changed, spans and characters removed), and
        the most widely held removed spans with their text."""
        reduced = reduced or {}
        spans = {k: v for k, v in (reduced.get("spans") or {}).items() if k != "partitions"}
        count = {k: v for k, v in (reduced.get("count") or {}).items() if k not in ("shards", "top")}
        text = {h: s for h, s in stats.get("examples", [])}
        top = [{"hash": h, "docs": n, "span": text.get(h)} for h, n, _ in (reduced.get("count") or {}).get("top", [])]
        by_source = stats.get("by_source", {})
        total = Counter()
        for c in by_source.values():
            total.update(c)
        summary = [f"{count.get('distinct_spans', 0):,} distinct spans, {count.get('repeated_spans', 0):,} in more "
                   f"than {self.config.max_docs} documents; {total['spans_removed']:,} spans "
                   f"({total['chars_removed']:,} characters) removed from {total['docs_changed']:,} documents; "
                   f"{spans.get('code_docs', 0):,} code documents kept whole"]
        return {"spans": spans, "count": count, "by_source": by_source, "top": top, "summary": summary}
