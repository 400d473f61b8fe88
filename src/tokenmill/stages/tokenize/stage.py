"""The tokenize stage in five phases: the training sample's candidates per shard (for a trained tokenizer), the
tokenizer (loaded, or trained on that keyed sample), encoding per shard into token files under `_work/parts/`, their
merge into the stage's token files (per source and split, up to `max_tokens_per_file` each), and the dataset index
`tokens.json` that the loader reads."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from tokenmill.errors import ConfigError
from tokenmill.pipeline import storage
from tokenmill.documents import parquet_bytes
from tokenmill.pipeline.contract import Phase, PlanContext, ShardsResult, Stage, Task, TaskContext
from tokenmill.pipeline.map_phase import ShardMap, ShardOutput, shard_name
from tokenmill.stages.tokenize.config import Gpt2Files, TokenizeConfig, TrainTokenizer
from tokenmill.stages.tokenize.rehydrate import copies, spread
from tokenmill.tokenize.fast_engine import encode_flat, tiktoken_encoding
from tokenmill.tokenize import bundle, hf_files, tokens_json
from tokenmill.tokenize.bundle import SplitFiles
from tokenmill.tokenize.merge import join_parts, plan_files
from tokenmill.tokenize.indexed import dtype_for_vocab
from tokenmill.tokenize.sample import choose_sample, id_keys, read_texts, sample_bound, sample_candidates, training_sample
from tokenmill.tokenize.tokenizer import LoadedTokenizer, _loaded, load_gpt2_files, load_tokenizer, train_bpe

SPLITS = ("train", "valid")
PARTS = "_work/parts/"
"""Where the encode phase writes each shard's token files (``<split>/<shard>.<part>``), which the merge joins."""
LAYOUT = "per source and split"
"""The token files' layout, in the stage's identity: output of another layout is superseded, never mixed with it."""

log = logging.getLogger(__name__)


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
        texts = read_texts(path, ctx.fs, rows) if rows.size else []
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

        data = storage.read_bytes(ctx.fs, storage.join(ctx.stage_dir, tokens_json.TOKENIZER_FILE)).decode("utf-8")
        return _loaded(Tokenizer.from_str(data), stage.config.eos_token)


class Encode(ShardMap):
    """Per shard: every document's ids and its end-of-text id, into train and valid `.bin`/`.idx` pairs under
    `PARTS`, which `Merge` joins per source."""

    name = "encode"

    def plan(self, stage: "TokenizeStage", ctx: PlanContext) -> list[Task]:
        if not ctx.input_shards:
            log.warning("tokenize: the input stage has no shards: no token files are written and tokens.json lists "
                        "none; check what the earlier stages kept (`tokenmill manifest show RUN`)")
        return super().plan(stage, ctx)

    def map_shard(self, stage: "TokenizeStage", task: Task, ctx: TaskContext, table: pa.Table) -> ShardOutput:
        cfg: TokenizeConfig = stage.config
        tok: LoadedTokenizer = ctx.shared["tokenizer"]
        threshold = int(cfg.valid_fraction * 2**64)  # below 2**64: valid_fraction < 1
        valid = id_keys(table.column("id"), stage.run.seed) < np.uint64(threshold)
        engines: set[str] = set()
        out = {s: SplitFiles(s, task.key, dtype_for_vocab(tok.vocab_size), cfg.max_tokens_per_file, table, engines,
                             ctx, PARTS) for s in SPLITS}
        encoder = tiktoken_encoding(tok) if cfg.engine == "auto" else None  # built once per worker process
        special_docs = 0
        texts_column = table.column("text")
        repeats, ids = _repeats(cfg, table), None
        if repeats is not None:
            ids = table.column("id").cast(pa.string()).to_pylist()
            extra = {"documents": 0, "tokens": 0}
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
                if rows.size and split == "train" and repeats is not None:
                    entries = rows[spread([ids[start + r] for r in rows.tolist()], repeats[start + rows],
                                          stage.run.seed)]
                    out[split].add(entries + start, lengths[entries], _gather(tokens, lengths, entries))
                    extra["documents"] += int(entries.size - rows.size)
                    extra["tokens"] += int(lengths[entries].sum() - lengths[rows].sum())
                elif rows.size:
                    out[split].add(rows + start, lengths[rows],
                                   tokens if rows.size == len(lengths) else tokens[np.repeat(mask, lengths)])
        for split in SPLITS:
            out[split].flush()
        stats = {"tokens": {s: out[s].tokens for s in SPLITS}, "documents": {s: out[s].documents for s in SPLITS},
                 "special_token_text_docs": special_docs}
        if repeats is not None:
            stats["rehydrated"] = extra
        return ShardOutput(table, pa.nulls(table.num_rows, pa.string()), stats,
                           extra={"token_files": {s: out[s].files for s in SPLITS},
                                  "engine": "+".join(sorted(engines)) or "tokenizers"})

    def reduce(self, stage: "TokenizeStage", results: Mapping[str, ShardsResult], ctx: PlanContext) -> Any:
        """{(split, source): its shards' files in prefix order (the streams' order)}, each ``{prefix, tokens}``."""
        groups: dict[tuple[str, str], list[dict]] = {}
        for r in results.values():
            for e in r.shards:
                for split, files in e.get("token_files", {}).items():
                    groups.setdefault((split, e["source"]), []).extend(
                        {"prefix": f["prefix"], "tokens": f["tokens"]} for f in files)
        return {key: sorted(parts, key=lambda p: p["prefix"]) for key, parts in sorted(groups.items())}


def _repeats(cfg: TokenizeConfig, table: pa.Table) -> np.ndarray | None:
    """Copies of each row by `rehydrate` from its `cluster_size` (null: 1); None without `rehydrate`."""
    if cfg.rehydrate is None:
        return None
    if "cluster_size" not in table.column_names:
        raise RuntimeError("tokenize.rehydrate needs the `cluster_size` column, which the dedup stage writes; run "
                           "dedup before tokenize or leave rehydrate out")
    return copies(table.column("cluster_size").fill_null(1).to_numpy(), cfg.rehydrate)


def _gather(tokens: np.ndarray, lengths: np.ndarray, entries: np.ndarray) -> np.ndarray:
    """The tokens of the documents at `entries` (indices into `lengths`, repeats allowed), back to back."""
    starts = (np.cumsum(lengths) - lengths)[entries]
    lens = lengths[entries]
    return tokens[np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))]


class Merge(Phase):
    """A task per token file of the stage: one source's documents of one split, joined from its shards' files
    (`merge.plan_files`: up to `max_tokens_per_file` tokens, cut evenly at documents), so that a trainer that
    takes a file as a dataset (Megatron's blend) gets a few files sized for training, not one per shard and split."""

    name = "merge"

    def plan(self, stage: "TokenizeStage", ctx: PlanContext) -> list[Task]:
        tasks = []
        for (split, source), parts in ctx.shared[Encode.name].items():
            for i, planned in enumerate(plan_files(parts, stage.config.max_tokens_per_file)):
                stem = f"{split}/{source}.{i:05d}"
                tasks.append(Task(key=stem.replace("/", "."), params={"stem": stem, **planned}))
        return tasks

    def run(self, stage: "TokenizeStage", task: Task, ctx: TaskContext) -> Any:
        p = task.params

        def read_range(path: str, offset: int, size: int) -> bytes:
            with ctx.fs.open_input_file(storage.join(ctx.stage_dir, path)) as f:
                return f.read_at(size, offset)

        joined = join_parts(p["parts"], p["lo"], p["hi"], lambda path: storage.read_bytes(
            ctx.fs, storage.join(ctx.stage_dir, path)), read_range)
        if joined is None:
            return None
        return bundle.write_bundle(ctx, p["stem"], *joined)

    def reduce(self, stage: "TokenizeStage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        """Each token file's index entry by prefix, as its task computed it from the bytes it wrote (the index phase
        then reads none of them)."""
        return {r["prefix"]: r for r in results.values() if r is not None}


class WriteIndex(Phase):
    """One task: `tokens.json`, the dataset index the loader reads (files sorted by path: the loader's stream order)."""

    name = "index"

    def plan(self, stage: "TokenizeStage", ctx: PlanContext) -> list[Task]:
        return [Task(key="tokens")]

    def run(self, stage: "TokenizeStage", task: Task, ctx: TaskContext) -> Any:
        tok: LoadedTokenizer = ctx.shared["tokenizer"]
        itemsize = dtype_for_vocab(tok.vocab_size).itemsize
        known: Mapping[str, dict] = ctx.shared.get(Merge.name) or {}
        splits: dict[str, list[dict]] = {}
        for split in SPLITS:
            entries = []
            folder = storage.join(ctx.stage_dir, split)
            sizes = {i.path: i.size for i in storage.list_tree(ctx.fs, folder) if i.type == pafs.FileType.File}
            for idx in sorted(p for p in sizes if p.endswith(bundle.IDX)):
                prefix = idx[: -len(bundle.IDX)]
                rel = prefix[len(ctx.stage_dir) + 1:]
                # The merge task's entry, where the files on disk are the ones it wrote (their sizes agree); else
                # the files read through the run's filesystem (a shared disk or an object store), each once.
                entries.append(bundle.recorded_entry(known.get(rel), sizes, prefix, itemsize)
                               or bundle.read_entry(lambda path: storage.read_bytes(ctx.fs, path), prefix, rel))
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

    def __init__(self, config: TokenizeConfig, run):
        super().__init__(config, run)
        if config.rehydrate is not None:  # checked with the chain, before any task: dedup must come first
            self.needs = type(self).needs | {"cluster_size"}

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
        if self.config.rehydrate is None:  # a run without it keeps the identity (and resume key) it had before
            identity["config"].pop("rehydrate", None)
        spec = self.config.tokenizer
        files = [spec] if isinstance(spec, str) else [spec.encoder, spec.merges] if isinstance(spec, Gpt2Files) else []
        # The tokenizer files' content, not where they lie.
        identity["tokenizer_files"] = [hashlib.sha256(Path(self.resolve(f)).read_bytes()).hexdigest() for f in files]
        identity["layout"] = LAYOUT
        return identity

    def phases(self) -> list[Phase]:
        return [SampleIds(), PrepareTokenizer(), Encode(), Merge(), WriteIndex()]

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
        rehydrated = stats.get("rehydrated")
        return {"tokens": tokens, "documents": stats.get("documents", {}),
                "special_token_text_docs": stats.get("special_token_text_docs", 0),
                **({"rehydrated": rehydrated} if rehydrated is not None else {}),
                **({"warnings": warnings} if warnings else {}),
                "summary": [f"{tokens.get('train', 0):,} train and {tokens.get('valid', 0):,} valid tokens"]
                + ([f"rehydrate: {rehydrated['documents']:,} copies of train documents, {rehydrated['tokens']:,} "
                    f"tokens, by cluster size {self.config.rehydrate}"] if rehydrated is not None else [])
                + [f"warning: {w}" for w in warnings]}
