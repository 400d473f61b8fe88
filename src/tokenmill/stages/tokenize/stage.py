"""The tokenize stage in four phases: the training sample's candidates per shard (for a trained tokenizer), the
tokenizer (loaded, or trained on that keyed sample), encoding per shard into token files, and the dataset index
`tokens.json` that the loader reads."""

from __future__ import annotations

import hashlib
import heapq
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import xxhash

from tokenmill.errors import ConfigError
from tokenmill.pipeline import storage
from tokenmill.pipeline.documents import parquet_bytes, read_rows, read_shard
from tokenmill.pipeline.stats import NO_SUBSET
from tokenmill.pipeline.contract import Phase, PlanContext, ShardsResult, Stage, Task, TaskContext
from tokenmill.pipeline.map_phase import shard_name, shard_tasks, split_and_write
from tokenmill.stages.tokenize.config import Gpt2Files, TokenizeConfig, TrainTokenizer
from tokenmill.tokenize.fast_engine import encode_flat, tiktoken_encoding
from tokenmill.tokenize import hf_files, tokens_json
from tokenmill.tokenize.indexed import IndexedWriter, dtype_for_vocab, parse_index
from tokenmill.tokenize.tokenizer import LoadedTokenizer, _loaded, load_gpt2_files, load_tokenizer, train_bpe

SPLITS = ("train", "valid")

log = logging.getLogger(__name__)


def _key_seed(seed: int) -> int:
    """The xxh3 seed of the keyed hash of ids (`_key`), from the run's seed."""
    return (seed ^ 0x70C3) & 0xFFFFFFFFFFFFFFFF


def _key(seed: int, doc_id: str) -> int:
    return xxhash.xxh3_64_intdigest(doc_id.encode("utf-8"), seed=_key_seed(seed))


def training_sample(paths: Sequence[str], fs, seed: int, n: int) -> list[str]:
    """The n documents with the smallest keyed hash of their id: the same sample whatever the sharding.

    The exact definition, one pass over every shard's ids (`paths`, Parquet on `fs`) in one process; the stage takes
    it from `sample_candidates` and `choose_sample` instead, and comes here only where those cannot decide (equal
    ids among the chosen). The heap holds where each text lies; a text is read only to break a tie of equal ids, and
    at the end for the n chosen. The heap sees the same items in the same order as it did with the texts in hand, so
    the sample and its order (a tie keeps the heap's order) are what they were."""
    heap: list[tuple[int, str, _Text]] = []
    for path in paths:
        ids = pq.read_table(path, columns=["id"], filesystem=fs).column("id").to_pylist()
        for row, doc_id in enumerate(ids):
            key = -_key(seed, doc_id)
            if len(heap) < n:
                heapq.heappush(heap, (key, doc_id, _Text(path, fs, row)))
            elif (key, doc_id) >= heap[0][:2]:
                item = (key, doc_id, _Text(path, fs, row))
                if item > heap[0]:
                    heapq.heapreplace(heap, item)
    chosen = sorted(heap, key=lambda x: (-x[0], x[1]))
    texts: dict[tuple[str, int], str] = {}
    for path in dict.fromkeys(t.path for _, _, t in chosen):
        rows = np.array(sorted(t.row for _, _, t in chosen if t.path == path))
        texts.update(((path, int(r)), text) for r, text in zip(rows, _read_texts(path, fs, rows)))
    return [texts[t.path, t.row] for _, _, t in chosen]


def sample_bound(total_docs: int, n: int) -> int:
    """A key below which, among `total_docs` keyed hashes (uniform over 64 bits), comfortably more than n fall: the
    expected n + 10% + 8 standard deviations + 64, so that each shard sends only its documents under it (about
    1.1 n in all, not every id) and `choose_sample` almost never finds fewer than n."""
    if total_docs <= n:
        return 2**64
    expected = n * 1.1 + 8 * n**0.5 + 64
    return min(2**64, int(2**64 * expected / total_docs))


def sample_candidates(ids: pa.ChunkedArray | pa.Array, seed: int, below: int) -> dict[str, list]:
    """The rows of one shard whose id's keyed hash is under `below`: their rows, keys and ids."""
    ids = ids.to_pylist()  # a Python call per id, but in every shard's task at once, not in the one-task phase
    seed64 = _key_seed(seed)  # `_key`, without a Python call per id around it
    keys = np.fromiter((xxhash.xxh3_64_intdigest(i.encode("utf-8"), seed=seed64) for i in ids), dtype=np.uint64,
                       count=len(ids))
    rows = np.flatnonzero(keys < np.uint64(below)) if below < 2**64 else np.arange(len(ids))
    return {"rows": rows.tolist(), "keys": keys[rows].tolist(), "ids": [ids[r] for r in rows]}


def choose_sample(candidates: Sequence[tuple[str, Mapping[str, list]]], n: int,
                  below: int) -> list[tuple[str, int]] | None:
    """`training_sample`'s n documents as (shard, row), in its order, from every shard's `sample_candidates`
    (shard, candidates) under the bound `below`; None where they cannot decide it, and the exact pass must run.

    When at least n candidates came (or every id, the bound being 2**64), the n smallest (key, id) are the n
    documents, and sorting by (key, id) is the exact pass's order, as long as no two of them, nor the last and the
    next, share a key and an id: there the text and the heap's history decide, so the exact pass runs."""
    items = [(k, i, path, r) for path, c in candidates for k, i, r in zip(c["keys"], c["ids"], c["rows"])]
    if len(items) < n and below < 2**64:  # fewer under the bound than asked: the exact pass decides
        return None
    items.sort(key=lambda x: (x[0], x[1]))
    head = items[: n + 1]
    if any(a[:2] == b[:2] for a, b in zip(head, head[1:])):
        return None
    return [(path, r) for _, _, path, r in items[:n]]


class _Text:
    """Where a document's text lies; compared by the text itself, read only when a comparison needs it."""

    __slots__ = ("path", "fs", "row")

    def __init__(self, path: str, fs, row: int):
        self.path, self.fs, self.row = path, fs, row

    def value(self) -> str:
        return next(iter(_read_texts(self.path, self.fs, np.array([self.row]))))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Text) and self.value() == other.value()

    def __lt__(self, other: "_Text") -> bool:
        return self.value() < other.value()

    def __gt__(self, other: "_Text") -> bool:
        return self.value() > other.value()

    __hash__ = None  # type: ignore[assignment]


def _read_texts(path: str, fs, rows: np.ndarray) -> list[str]:
    """The text of the given rows (ascending) of a Parquet shard, reading only the row groups that hold them."""
    return read_rows(path, rows, ["text"], fs).column("text").to_pylist()


class SampleIds(Phase):
    """Per shard, for a trained tokenizer: the documents that may be in its training sample (keyed hash of the id
    under a bound), their text in `_work/sample/<shard>.parquet`, so that the tokenizer phase, one task, reads
    about 1.1x the sample, not every id and the row groups of every shard that the sample touches."""

    name = "sample_ids"

    def plan(self, stage: "TokenizeStage", ctx: PlanContext) -> list[Task]:
        spec = stage.config.tokenizer
        below = _bound(ctx, spec.train.sample_docs) if isinstance(spec, TrainTokenizer) else None
        if below is None:
            return []
        return [Task(key=shard_name(s["path"]), inputs=(s["path"],), params={"below": below})
                for s in ctx.input_shards]

    def run(self, stage: "TokenizeStage", task: Task, ctx: TaskContext) -> Any:
        path = storage.join(ctx.input_dir, task.inputs[0])
        ids = pq.read_table(path, columns=["id"], filesystem=ctx.fs).column("id")
        found = sample_candidates(ids, stage.run.seed, task.params["below"])
        rows = np.array(found["rows"], dtype=np.int64)
        texts = _read_texts(path, ctx.fs, rows) if rows.size else []
        ctx.write(_sample_file(task.key), parquet_bytes(pa.table({"row": pa.array(rows, pa.int64()),
                                                                   "text": pa.array(texts, pa.string())})))
        return found

    def reduce(self, stage: "TokenizeStage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        spec = stage.config.tokenizer
        below = _bound(ctx, spec.train.sample_docs) if isinstance(spec, TrainTokenizer) else None
        if below is None:
            return None
        in_order = [(key, results[key]) for key in (shard_name(s["path"]) for s in ctx.input_shards)]
        chosen = choose_sample(in_order, spec.train.sample_docs, below)
        if chosen is None:
            log.info("tokenize: equal ids among the training sample's candidates: choosing it in one pass")
        return chosen


def _sample_file(key: str) -> str:
    return f"_work/sample/{key}.parquet"


def read_sample(chosen: Sequence[tuple[str, int]], fs, stage_dir: str) -> list[str]:
    """The texts of the chosen (shard, row) pairs, in their order, from the files `SampleIds` wrote."""
    texts: dict[tuple[str, int], str] = {}
    for key in dict.fromkeys(k for k, _ in chosen):
        table = pq.read_table(storage.join(stage_dir, _sample_file(key)), filesystem=fs)
        texts.update(((key, r), t) for r, t in zip(table.column("row").to_pylist(), table.column("text").to_pylist()))
    return [texts[c] for c in chosen]


def _bound(ctx: PlanContext, n: int) -> int | None:
    """`sample_bound` for the input's documents; None where an input shard does not count its own (the tokenizer
    phase then takes the sample in one pass, rather than have every shard send every document)."""
    counts = [s.get("docs_out") for s in ctx.input_shards]
    return sample_bound(sum(counts), n) if all(isinstance(c, int) for c in counts) else None


class PrepareTokenizer(Phase):
    """One task: the tokenizer as `tokenizer.json` beside the tokens (trained on a keyed sample when asked)."""

    name = "tokenizer"

    def plan(self, stage: "TokenizeStage", ctx: PlanContext) -> list[Task]:
        return [Task(key="tokenizer", params={"shards": [s["path"] for s in ctx.input_shards]})]

    def run(self, stage: "TokenizeStage", task: Task, ctx: TaskContext) -> Any:
        chosen = ctx.shared.get(SampleIds.name)
        tok = stage.make_tokenizer([storage.join(ctx.input_dir, path) for path in task.params["shards"]], ctx.fs,
                                   None if chosen is None else read_sample(chosen, ctx.fs, ctx.stage_dir))
        data = tok.tokenizer.to_str().encode("utf-8")
        ctx.write(tokens_json.TOKENIZER_FILE, data)
        for name, content in hf_files.transformers_files(stage.config.eos_token).items():
            ctx.write(name, content)  # so that transformers' AutoTokenizer knows the end-of-text token
        return {"sha256": hashlib.sha256(data).hexdigest(), "vocab_size": tok.vocab_size, "eos_id": tok.eos_id}

    def reduce(self, stage: "TokenizeStage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        from tokenizers import Tokenizer

        data = storage.read_bytes(ctx.fs, storage.join(ctx.stage_dir, "tokenizer.json")).decode("utf-8")
        return _loaded(Tokenizer.from_str(data), stage.config.eos_token)


class Encode(Phase):
    """Per shard: every document's ids and its end-of-text id, into train and valid `.bin`/`.idx` pairs."""

    name = "encode"
    writes_shards = True

    def plan(self, stage: "TokenizeStage", ctx: PlanContext) -> list[Task]:
        if not ctx.input_shards:
            log.warning("tokenize: the input stage has no shards: no token files are written and tokens.json lists "
                        "none; check what the earlier stages kept (`tokenmill manifest show RUN`)")
        return shard_tasks(ctx)

    def run(self, stage: "TokenizeStage", task: Task, ctx: TaskContext) -> ShardsResult:
        cfg: TokenizeConfig = stage.config
        tok: LoadedTokenizer = ctx.shared["tokenizer"]
        table = read_shard(storage.join(ctx.input_dir, task.inputs[0]), ctx.fs)
        threshold = int(cfg.valid_fraction * 2**64)
        valid = np.fromiter((_key(stage.run.seed, i) < threshold for i in table.column("id").to_pylist()),
                            dtype=bool, count=table.num_rows)
        engines: set[str] = set()
        out = {s: _SplitFiles(s, task.key, dtype_for_vocab(tok.vocab_size), cfg.max_tokens_per_file, table, engines,
                              ctx) for s in SPLITS}
        encoder = tiktoken_encoding(tok) if cfg.engine == "auto" else None  # built once per worker process
        special_docs = 0
        texts_column = table.column("text")
        # A batch's texts are Python strings only while it encodes: the shard's text stays in Arrow.
        for start in range(0, table.num_rows, cfg.batch_docs):
            texts = texts_column.slice(start, cfg.batch_docs).to_pylist()
            special_docs += tok.count_special_strings(texts)
            tokens, lengths, engine = encode_flat(tok, encoder, texts)
            del texts
            engines.add(engine)
            is_valid = valid[start:start + len(lengths)]
            for split, mask in (("train", ~is_valid), ("valid", is_valid)):
                rows = np.flatnonzero(mask)
                if rows.size:
                    out[split].add(rows + start, lengths[rows],
                                   tokens if rows.size == len(lengths) else tokens[np.repeat(mask, lengths)])
        for split in SPLITS:
            out[split].flush()
        stats = {"tokens": {s: out[s].tokens for s in SPLITS}, "documents": {s: out[s].documents for s in SPLITS},
                 "special_token_text_docs": special_docs}
        entry = split_and_write(stage, ctx, task.key, task.params["source"], table,
                                pa.nulls(table.num_rows, pa.string()), stats)
        entry["input"] = task.inputs[0]
        entry["token_files"] = {s: out[s].files for s in SPLITS}
        entry["engine"] = "+".join(sorted(engines)) or "tokenizers"
        return ShardsResult([entry])

    def reduce(self, stage: "TokenizeStage", results: Mapping[str, ShardsResult], ctx: PlanContext) -> Any:
        """Each token file's index entry by prefix, as its task computed it from the bytes it wrote (the index phase
        then reads none of them)."""
        return {f["prefix"]: f for r in results.values() for e in r.shards
                for files in e.get("token_files", {}).values() for f in files if "sha256" in f}


SIDE_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("subset", pa.string()), ("tokens", pa.int64())])
"""`.docs.parquet`: which document each sequence of a token file is, for attribution (row i is sequence i)."""


class _SplitFiles:
    """One split's token files of one shard: documents arrive a batch at a time; a file is closed (written) after
    the document that brings it to `max_tokens` tokens."""

    def __init__(self, split: str, key: str, dtype, max_tokens: int, table: pa.Table, engines: set, ctx: TaskContext):
        self.split, self.key, self.dtype, self.max_tokens = split, key, dtype, max_tokens
        self.table, self.engines, self.ctx = table, engines, ctx
        self.files: list[dict] = []
        self.tokens = self.documents = 0
        self._writer: IndexedWriter | None = None
        self._rows: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self._in_file = 0

    def add(self, rows: np.ndarray, lengths: np.ndarray, tokens: np.ndarray) -> None:
        """Documents at `rows` of the shard, `lengths` tokens each, `tokens` back to back."""
        self.tokens += int(lengths.sum())
        self.documents += len(rows)
        while len(rows):
            ends = np.cumsum(lengths)
            k = int(np.searchsorted(ends, self.max_tokens - self._in_file))  # the document that fills the file
            take = min(k + 1, len(rows))
            if self._writer is None:
                self._writer = IndexedWriter(self.dtype)
            self._writer.add_documents(tokens[:ends[take - 1]], lengths[:take])
            self._rows.append(rows[:take])
            self._lengths.append(lengths[:take])
            self._in_file += int(ends[take - 1])
            if self._in_file >= self.max_tokens:
                self.flush()
            rows, lengths, tokens = rows[take:], lengths[take:], tokens[ends[take - 1]:]

    def flush(self) -> None:
        """Write the open file, if any: `.bin`, `.idx`, `.docs.parquet` and `.engine`."""
        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        stem = f"{self.split}/{self.key}.{len(self.files):04d}"
        bin_bytes, idx_bytes = writer.finalize()
        # The index entry's digests and tallies are made here, in parallel, from the bytes in hand: the index
        # phase is one task, and reading every token file back there grew with the whole run.
        digests = {".bin": hashlib.sha256(bin_bytes).hexdigest(), ".idx": hashlib.sha256(idx_bytes).hexdigest()}
        sizes = {".bin": len(bin_bytes), ".idx": len(idx_bytes)}
        head = tokens_json.head_record(bin_bytes)
        self.ctx.write(f"{stem}.bin", bin_bytes)
        del bin_bytes
        self.ctx.write(f"{stem}.idx", idx_bytes)
        rows = pa.array(np.concatenate(self._rows))
        side = [self.table.column(c).take(rows).combine_chunks() for c in ("id", "source", "subset")]
        side.append(pa.array(np.concatenate(self._lengths), pa.int64()))
        side_table = pa.table(side, schema=SIDE_SCHEMA)
        docs_bytes = parquet_bytes(side_table)
        digests[".docs.parquet"], sizes[".docs.parquet"] = hashlib.sha256(docs_bytes).hexdigest(), len(docs_bytes)
        self.ctx.write(f"{stem}.docs.parquet", docs_bytes)
        engine = "+".join(sorted(self.engines)) or "tokenizers"
        entry = {"prefix": stem, "documents": writer.num_documents, "tokens": writer.num_tokens,
                 "by_source": by_source(side_table), "engine": engine, "sha256": digests, "bytes": sizes}
        if head is not None:
            entry["head"] = head
        self.files.append(entry)
        self.ctx.write(f"{stem}.engine", engine.encode())
        self._rows, self._lengths, self._in_file = [], [], 0


def by_source(side: pa.Table) -> dict[str, dict[str, Any]]:
    """Documents and tokens of a token file per source and subset, from its `.docs.parquet` table."""
    per_source: dict[str, dict[str, Any]] = {}
    # One row per (source, subset), not per document: a file holds up to millions of documents.
    groups = side.group_by(["source", "subset"], use_threads=False).aggregate(
        [("tokens", "count"), ("tokens", "sum")]).to_pylist()
    for row in groups:
        s = per_source.setdefault(row["source"], {"documents": 0, "tokens": 0, "subsets": {}})
        subset = row["subset"] if row["subset"] is not None else NO_SUBSET
        sub = s["subsets"].setdefault(subset, {"documents": 0, "tokens": 0})
        for tally in (s, sub):
            tally["documents"] += row["tokens_count"]
            tally["tokens"] += row["tokens_sum"]
    return per_source


class WriteIndex(Phase):
    """One task: `tokens.json`, the dataset index the loader reads (files sorted by path: the loader's stream order)."""

    name = "index"

    def plan(self, stage: "TokenizeStage", ctx: PlanContext) -> list[Task]:
        return [Task(key="tokens")]

    def run(self, stage: "TokenizeStage", task: Task, ctx: TaskContext) -> Any:
        tok: LoadedTokenizer = ctx.shared["tokenizer"]
        itemsize = dtype_for_vocab(tok.vocab_size).itemsize
        known: Mapping[str, dict] = ctx.shared.get(Encode.name) or {}
        splits: dict[str, list[dict]] = {}
        for split in SPLITS:
            entries = []
            folder = storage.join(ctx.stage_dir, split)
            sizes = {i.path: i.size for i in ctx.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
                     if i.type == pafs.FileType.File}
            for idx in sorted(p for p in sizes if p.endswith(".idx")):
                prefix = idx[: -len(".idx")]
                rel = prefix[len(ctx.stage_dir) + 1:]
                info = known.get(rel)
                # The encode task's entry, where the files on disk are the ones it wrote (their sizes agree).
                if info is not None and all(sizes.get(prefix + ext) == n for ext, n in info["bytes"].items()) \
                        and info["bytes"][".bin"] == info["tokens"] * itemsize:
                    entries.append({k: info[k] for k in ("prefix", "documents", "tokens", "by_source", "engine",
                                                         "sha256", "head") if k in info})
                    continue
                # Read through the run's filesystem (a shared disk or an object store), each file once.
                data = {ext: storage.read_bytes(ctx.fs, prefix + ext) for ext in (".bin", ".idx", ".docs.parquet")}
                index_file = parse_index(data[".idx"], prefix + ".idx")
                if len(data[".bin"]) != index_file.num_tokens * index_file.dtype.itemsize:
                    raise ValueError(f"{prefix}.bin: {len(data['.bin'])} bytes, but its .idx describes "
                                     f"{index_file.num_tokens * index_file.dtype.itemsize}")
                side = pq.read_table(pa.BufferReader(data[".docs.parquet"]), columns=["source", "subset", "tokens"])
                entries.append({
                    "prefix": rel, "documents": len(index_file.sequence_lengths), "tokens": index_file.num_tokens,
                    "by_source": by_source(side),
                    "engine": storage.read_bytes(ctx.fs, prefix + ".engine").decode(),
                    "sha256": {ext: hashlib.sha256(raw).hexdigest() for ext, raw in data.items()},
                    **({"head": head} if (head := tokens_json.head_record(data[".bin"])) is not None else {}),
                })
            splits[split] = entries
        index = tokens_json.build(
            {"file": tokens_json.TOKENIZER_FILE, "sha256": tok.sha256, "vocab_size": tok.vocab_size,
             "eos_id": tok.eos_id, "eos_token": stage.config.eos_token},
            str(dtype_for_vocab(tok.vocab_size)), splits)
        ctx.write(tokens_json.FILE, tokens_json.dumps(index))
        return {"tokens": {s: v["tokens"] for s, v in index["splits"].items()}}


class TokenizeStage(Stage):
    """Byte-level BPE into Megatron `.bin`/`.idx` token files, train and valid splits, and `tokens.json`."""

    name = "tokenize"
    order = 50
    config_class = TokenizeConfig
    paths = ("tokenizer", "tokenizer.encoder", "tokenizer.merges")
    needs = frozenset({"id", "text", "source", "subset"})

    config: TokenizeConfig

    def make_tokenizer(self, shards: Sequence[str], fs=None, sample: Sequence[str] | None = None) -> LoadedTokenizer:
        """The configured tokenizer; a trained one sees only `shards` (the input shards' paths on `fs`): their
        `training_sample`, or `sample` where it was already read (`SampleIds`)."""
        spec, eos = self.config.tokenizer, self.config.eos_token
        if isinstance(spec, TrainTokenizer):
            texts = sample if sample is not None else training_sample(shards, fs, self.run.seed, spec.train.sample_docs)
            return train_bpe(texts, spec.train.vocab_size, eos)
        if isinstance(spec, Gpt2Files):
            return load_gpt2_files(self.resolve(spec.encoder), self.resolve(spec.merges), eos)
        return load_tokenizer(self.resolve(spec), eos)

    def identity(self) -> dict[str, Any]:
        identity = super().identity()
        spec = self.config.tokenizer
        files = [spec] if isinstance(spec, str) else [spec.encoder, spec.merges] if isinstance(spec, Gpt2Files) else []
        # The tokenizer files' content, not where they lie.
        identity["tokenizer_files"] = [hashlib.sha256(Path(self.resolve(f)).read_bytes()).hexdigest() for f in files]
        return identity

    def phases(self) -> list[Phase]:
        return [SampleIds(), PrepareTokenizer(), Encode(), WriteIndex()]

    @classmethod
    def config_problems(cls, config: TokenizeConfig, resolve_path) -> list[str]:
        """A configured tokenizer must load, so a bad one stops the run before ingest, not after it."""
        spec = config.tokenizer
        try:
            if isinstance(spec, str):
                load_tokenizer(str(resolve_path(spec)), config.eos_token)
            elif isinstance(spec, Gpt2Files):
                load_gpt2_files(str(resolve_path(spec.encoder)), str(resolve_path(spec.merges)), config.eos_token)
        except ConfigError as err:
            return [str(err)]
        except Exception as err:  # noqa: BLE001 - tokenizers raises bare Exceptions for files not what they claim
            return [f"stages.tokenize.tokenizer: {spec.encoder!r} and {spec.merges!r} are not GPT-2 encoder.json "
                    f"and vocab.bpe files: {err}"]
        return []

    def warnings(self, stats: Mapping[str, Any], vocab: int | None = None) -> list[str]:
        """What a person must hear about this run although it succeeded: a trained vocabulary (`vocab`, the
        tokenizer phase's) smaller than asked, no documents at all."""
        out = []
        spec = self.config.tokenizer
        if isinstance(spec, TrainTokenizer) and vocab is not None and vocab < spec.train.vocab_size:
            out.append(f"the trained tokenizer has {vocab:,} tokens of the {spec.train.vocab_size:,} "
                       f"asked (tokenizer.train.vocab_size): its training sample (at most {spec.train.sample_docs:,} "
                       f"documents) holds too little distinct text for more merges; train on more documents or ask "
                       f"for a vocabulary of {vocab:,} or less")
        documents = stats.get("documents", {})
        if not sum(documents.values()):
            out.append("no documents to tokenize: every token file is empty and the loader has nothing to read; "
                       "check what the earlier stages dropped (`tokenmill manifest show RUN`)")
        return out

    def report(self, stats: Mapping[str, Any], reduced: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        tokenizer = (reduced or {}).get("tokenizer")
        if not stats and tokenizer is None:
            return None
        tokens = stats.get("tokens", {})
        warnings = self.warnings(stats, tokenizer.vocab_size if tokenizer is not None else None)
        for warning in warnings:
            log.warning("tokenize: %s", warning)
        return {"tokens": tokens, "documents": stats.get("documents", {}),
                "special_token_text_docs": stats.get("special_token_text_docs", 0),
                **({"warnings": warnings} if warnings else {}),
                "summary": [f"{tokens.get('train', 0):,} train and {tokens.get('valid', 0):,} valid tokens"]
                + [f"warning: {w}" for w in warnings]}
