"""The tokenize stage in three phases: the tokenizer (loaded, or trained on a keyed sample), encoding per shard into
token files, and the dataset index `tokens.json` that the loader reads."""

from __future__ import annotations

import hashlib
import heapq
import logging
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from tokenmill.errors import ConfigError
from tokenmill.pipeline import storage
from tokenmill.pipeline.documents import parquet_bytes, read_shard
from tokenmill.pipeline.stats import NO_SUBSET
from tokenmill.pipeline.contract import Phase, PlanContext, ShardsResult, Stage, Task, TaskContext
from tokenmill.pipeline.map_phase import shard_tasks, split_and_write
from tokenmill.stages.tokenize.config import Gpt2Files, TokenizeConfig, TrainTokenizer
from tokenmill.tokenize.fast_engine import encode_checked, tiktoken_encoding
from tokenmill.tokenize import hf_files, tokens_json
from tokenmill.tokenize.indexed import IndexedWriter, dtype_for_vocab, parse_index
from tokenmill.tokenize.tokenizer import LoadedTokenizer, _loaded, load_gpt2_files, load_tokenizer, train_bpe

SPLITS = ("train", "valid")

log = logging.getLogger(__name__)


def _key(seed: int, doc_id: str) -> int:
    return xxhash.xxh3_64_intdigest(doc_id.encode("utf-8"), seed=(seed ^ 0x70C3) & 0xFFFFFFFFFFFFFFFF)


def training_sample(tables, seed: int, n: int) -> list[str]:
    """The n documents with the smallest keyed hash of their id: the same sample whatever the sharding."""
    heap: list[tuple[int, str, str]] = []
    for table in tables:
        for doc_id, text in zip(table.column("id").to_pylist(), table.column("text").to_pylist()):
            item = (-_key(seed, doc_id), doc_id, text)
            if len(heap) < n:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
    return [text for _, _, text in sorted(heap, key=lambda x: (-x[0], x[1]))]


class PrepareTokenizer(Phase):
    """One task: the tokenizer as `tokenizer.json` beside the tokens (trained on a keyed sample when asked)."""

    name = "tokenizer"

    def plan(self, stage: "TokenizeStage", ctx: PlanContext) -> list[Task]:
        return [Task(key="tokenizer", params={"shards": [s["path"] for s in ctx.input_shards]})]

    def run(self, stage: "TokenizeStage", task: Task, ctx: TaskContext) -> Any:
        tables = (read_shard(storage.join(ctx.input_dir, path), ctx.fs) for path in task.params["shards"])
        tok = stage.make_tokenizer(tables)
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
        ids, texts = table.column("id").to_pylist(), table.column("text").to_pylist()
        sources, subsets = table.column("source").to_pylist(), table.column("subset").to_pylist()
        threshold = int(cfg.valid_fraction * 2**64)
        split_of = ["valid" if _key(stage.run.seed, i) < threshold else "train" for i in ids]
        dtype = dtype_for_vocab(tok.vocab_size)
        files: dict[str, list[dict]] = {s: [] for s in SPLITS}
        writers: dict[str, tuple[IndexedWriter, dict[str, list]]] = {}
        in_file = {s: 0 for s in SPLITS}  # tokens in the split's open file (IndexedWriter.num_tokens sums a list)
        tokens = {s: 0 for s in SPLITS}
        docs = {s: 0 for s in SPLITS}

        def flush(split: str) -> None:
            writer, side = writers.pop(split)
            stem = f"{split}/{task.key}.{len(files[split]):04d}"
            bin_bytes, idx_bytes = writer.finalize()
            ctx.write(f"{stem}.bin", bin_bytes)
            ctx.write(f"{stem}.idx", idx_bytes)
            ctx.write(f"{stem}.docs.parquet", parquet_bytes(pa.table(side, schema=pa.schema(
                [("id", pa.string()), ("source", pa.string()), ("subset", pa.string()), ("tokens", pa.int64())]))))
            files[split].append({"prefix": stem, "documents": writer.num_documents, "tokens": writer.num_tokens})
            ctx.write(f"{stem}.engine", ("+".join(sorted(engines)) or "tokenizers").encode())

        encoding = tiktoken_encoding(tok) if cfg.engine == "auto" else None  # built once per worker process
        engines = set()
        for start in range(0, len(texts), cfg.batch_docs):
            encoded, engine = encode_checked(tok, encoding, texts[start:start + cfg.batch_docs])
            engines.add(engine)
            for j, doc_tokens in enumerate(encoded):
                i = start + j
                split = split_of[i]
                if split not in writers:
                    writers[split] = (IndexedWriter(dtype), {"id": [], "source": [], "subset": [], "tokens": []})
                writer, side = writers[split]
                writer.add_document(doc_tokens.astype(dtype))
                for name, value in (("id", ids[i]), ("source", sources[i]), ("subset", subsets[i]),
                                    ("tokens", len(doc_tokens))):
                    side[name].append(value)
                tokens[split] += len(doc_tokens)
                docs[split] += 1
                in_file[split] += len(doc_tokens)
                if in_file[split] >= cfg.max_tokens_per_file:
                    flush(split)
                    in_file[split] = 0
        for split in list(writers):
            flush(split)
        stats = {"tokens": tokens, "documents": docs, "special_token_text_docs": tok.count_special_strings(texts)}
        entry = split_and_write(stage, ctx, task.key, task.params["source"], table,
                                pa.nulls(table.num_rows, pa.string()), stats)
        entry["input"] = task.inputs[0]
        entry["token_files"] = files
        entry["engine"] = "+".join(sorted(engines)) or "tokenizers"
        return ShardsResult([entry])


class WriteIndex(Phase):
    """One task: `tokens.json`, the dataset index the loader reads (files sorted by path: the loader's stream order)."""

    name = "index"

    def plan(self, stage: "TokenizeStage", ctx: PlanContext) -> list[Task]:
        return [Task(key="tokens")]

    def run(self, stage: "TokenizeStage", task: Task, ctx: TaskContext) -> Any:
        tok: LoadedTokenizer = ctx.shared["tokenizer"]
        splits: dict[str, list[dict]] = {}
        for split in SPLITS:
            entries = []
            for idx in storage.list_files(ctx.fs, storage.join(ctx.stage_dir, split), ".idx"):
                prefix = idx[: -len(".idx")]
                # Read through the run's filesystem (a shared disk or an object store), each file once.
                data = {ext: storage.read_bytes(ctx.fs, prefix + ext) for ext in (".bin", ".idx", ".docs.parquet")}
                index_file = parse_index(data[".idx"], prefix + ".idx")
                if len(data[".bin"]) != index_file.num_tokens * index_file.dtype.itemsize:
                    raise ValueError(f"{prefix}.bin: {len(data['.bin'])} bytes, but its .idx describes "
                                     f"{index_file.num_tokens * index_file.dtype.itemsize}")
                side = pq.read_table(pa.BufferReader(data[".docs.parquet"])).to_pylist()
                rel = prefix[len(ctx.stage_dir) + 1:]
                per_source: dict[str, dict[str, Any]] = {}
                for row in side:
                    s = per_source.setdefault(row["source"], {"documents": 0, "tokens": 0, "subsets": {}})
                    sub = s["subsets"].setdefault(row["subset"] if row["subset"] is not None else NO_SUBSET,
                                                  {"documents": 0, "tokens": 0})
                    for tally in (s, sub):
                        tally["documents"] += 1
                        tally["tokens"] += row["tokens"]
                entries.append({
                    "prefix": rel, "documents": len(index_file.sequence_lengths), "tokens": index_file.num_tokens,
                    "by_source": per_source,
                    "engine": storage.read_bytes(ctx.fs, prefix + ".engine").decode(),
                    "sha256": {ext: hashlib.sha256(raw).hexdigest() for ext, raw in data.items()},
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

    def make_tokenizer(self, tables) -> LoadedTokenizer:
        """The configured tokenizer; a trained one sees only `tables` (the input shards, read lazily)."""
        spec, eos = self.config.tokenizer, self.config.eos_token
        if isinstance(spec, TrainTokenizer):
            return train_bpe(training_sample(tables, self.run.seed, spec.train.sample_docs), spec.train.vocab_size, eos)
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
        return [PrepareTokenizer(), Encode(), WriteIndex()]

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
