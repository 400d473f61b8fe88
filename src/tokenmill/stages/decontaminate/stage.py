"""The decontaminate stage: index the evaluation sets once, count which of their n-grams the corpus holds, then
excise (or drop) the matches that are not common phrases, recording every hit."""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.documents import NO_SUBSET
from tokenmill.pipeline.stats import text_bytes
from tokenmill.pipeline import storage
from tokenmill.pipeline.columns import with_fallbacks
from tokenmill.documents import parquet_bytes
from tokenmill.pipeline.contract import DriverPhase, Phase, PlanContext, Stage, Task, TaskContext
from tokenmill.pipeline.map_phase import ShardMap, ShardOutput, shard_name
from tokenmill.stages.decontaminate.config import DecontaminateConfig
from tokenmill.stages.decontaminate.evalsets import load_evalset
from tokenmill.stages.decontaminate.excise import excise
from tokenmill.stages.decontaminate.ngrams import EvalIndex, build_index, find_matches_batch

log = logging.getLogger(__name__)

CJK = ("zh", "ja")
HITS_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("subset", pa.string()),
                         ("evalset", pa.string()), ("item", pa.string()), ("field", pa.string()),
                         ("rule", pa.string()), ("start", pa.int64()), ("end", pa.int64()), ("text", pa.string())])


class BuildIndex(DriverPhase):
    """On the driver, no tasks: the n-gram index of every evaluation field, built once; the runner shares it with
    every later task through the object store, and its summary goes to the report."""

    name = "index"

    def build(self, stage: "DecontaminateStage", ctx: PlanContext) -> Any:
        started = time.perf_counter()
        cfg = stage.config

        def fields():
            for config, path in zip(cfg.evalsets, stage.evalset_paths):
                for f in load_evalset(config, path):
                    yield config.name, f.item, f.field, f.text, config.language

        index = build_index(fields(), word_n=cfg.word_n, char_n=cfg.char_n, min_n=cfg.min_n, max_n=cfg.max_n,
                            min_whole_words=cfg.min_whole_words, min_whole_bytes=cfg.min_whole_bytes)
        # Manifest content must be the same run to run: the build time goes to the log and run_info, not here.
        log.info("decontaminate index: %d hashes in %.3f s", len(index.hashes), time.perf_counter() - started)
        coverage = {name: c.to_dict() for name, c in sorted(index.coverage.items())}
        for name, c in coverage.items():
            items, segments = c["items"], c["segments"]
            log.info("decontaminate %s: n = %d (%s); %d items: %d by %d-grams, %d as whole text, %d too short to "
                     "check, %d without text; %d segments (%d multiple-choice fields cut into lines): %d by n-grams, "
                     "%d whole, %d too short, %d without text", name, c["n"], c["n_rule"], items["total"],
                     items["ngram"], c["n"], items["whole"], items["too_short"], items["no_text"], segments["total"],
                     c["segmented_fields"], segments["ngram"], segments["whole"], segments["too_short"],
                     segments["no_text"])
            if items["too_short"] or items["no_text"]:
                log.warning("decontaminate %s: %d of %d items cannot be checked (every field too short or without "
                            "text)", name, items["too_short"] + items["no_text"], items["total"])
        summary = {"ngrams": int(len(index.hashes)), "bytes": int(index.nbytes()),
                   "items": {name: c["items"]["total"] for name, c in coverage.items()},
                   "window_lengths": {"words": {k: list(v) for k, v in index.word_lengths.items()},
                                      "characters": {k: list(v) for k, v in index.char_lengths.items()}},
                   "coverage": coverage}
        return {"index": index, "summary": summary}


def _doc_matches(table: pa.Table, index: EvalIndex, ignore: frozenset = frozenset(),
                 texts: list[str] | None = None) -> list[list[tuple[int, int, int]]]:
    """Per document, the matches (start, end, hash) of indexed n-grams not in `ignore`; `texts`, when given, is the
    table's text column as Python strings, else the column is matched as it is in Arrow."""
    if texts is None:
        column = table.column("text")
        texts = column.combine_chunks() if column.num_chunks else pa.array([], pa.string())
    langs = ["zh" if lang in CJK else (lang or "en") for lang in table.column("lang").to_pylist()]
    return [[m for m in matches if m[2] not in ignore] if ignore and matches else matches
            for matches in find_matches_batch(texts, langs, index)]


def _hit_shards(results: Mapping[str, Any], ignore: frozenset) -> frozenset[str]:
    """The count tasks (shard keys) that matched an n-gram not ignored: the excise phase finds the same matches less
    the ignored ones, so a shard not listed has none to excise. Kept in memory for the excise tasks, never written."""
    return frozenset(key for key, result in results.items() if any(int(h) not in ignore for h in result["ngrams"]))


def _match_columns(path: str, fs) -> pa.Table:
    """The columns of a shard that matching reads: text and language, and the source its language may fall back on
    (`with_fallbacks`); a shard's other columns (clean's scores among them) are most of its bytes."""
    names = set(pq.read_schema(path, filesystem=fs).names)
    return pq.read_table(path, columns=[c for c in ("text", "lang", "source") if c in names], filesystem=fs)


class CountNgrams(Phase):
    """Per shard: in how many documents each matched evaluation n-gram occurs (common phrases are ignored later)."""

    name = "count"

    def plan(self, stage: "DecontaminateStage", ctx: PlanContext) -> list[Task]:
        return [Task(key=shard_name(s["path"]), inputs=(s["path"],)) for s in ctx.input_shards]

    def run(self, stage: "DecontaminateStage", task: Task, ctx: TaskContext) -> Any:
        table = with_fallbacks(_match_columns(storage.join(ctx.input_dir, task.inputs[0]), ctx.fs), stage)
        index = ctx.shared["index"]["index"]
        counts: Counter = Counter()
        sample: dict[int, str] = {}
        found = _doc_matches(table, index)
        rows = [i for i, matches in enumerate(found) if matches]  # only these documents' text is read in Python
        for row, text in zip(rows, table.column("text").take(pa.array(rows, pa.int64())).to_pylist()):
            for start, end, h in found[row]:
                sample.setdefault(h, text[start:end])
            counts.update({h for _, _, h in found[row]})
        return {"ngrams": {str(h): [n, sample[h]] for h, n in sorted(counts.items())}}

    def reduce(self, stage: "DecontaminateStage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        totals: Counter = Counter()
        texts: dict[str, str] = {}
        for key in sorted(results):
            for h, (n, text) in results[key]["ngrams"].items():
                totals[h] += n
                texts.setdefault(h, text)
        cap = stage.config.max_doc_frequency
        common = sorted(((n, texts[h]) for h, n in totals.items() if n > cap), reverse=True)
        ignore = frozenset(int(h) for h, n in totals.items() if n > cap)
        return {"ignore": ignore, "common": [{"documents": n, "text": t} for n, t in common],
                "hit_shards": _hit_shards(results, ignore)}


class Decontaminate(ShardMap):
    """Per shard: excise (or drop) the matches that are not common phrases; every hit to `_work/hits/`."""

    name = "excise"

    def map_shard(self, stage: "DecontaminateStage", task: Task, ctx: TaskContext, table: pa.Table) -> ShardOutput:
        cfg: DecontaminateConfig = stage.config
        hit_shards = ctx.shared["count"].get("hit_shards")
        if hit_shards is not None and task.key not in hit_shards:  # nothing to excise: no matching again
            ctx.write(f"_work/hits/{task.key}.parquet", parquet_bytes(_no_hits()))
            return _unchanged(table)
        filled = with_fallbacks(table, stage)
        index: EvalIndex = ctx.shared["index"]["index"]
        ignore = ctx.shared["count"]["ignore"]
        ids, texts = table.column("id").to_pylist(), table.column("text").to_pylist()
        subsets = table.column("subset").to_pylist()
        out_texts, reasons = list(texts), [None] * len(texts)
        hits: dict[str, list] = {name: [] for name in HITS_SCHEMA.names}
        found: dict[str, dict[str, dict[str, list[str]]]] = {}
        removed_chars = 0
        for i, matches in enumerate(_doc_matches(filled, index, ignore, texts)):
            if not matches:
                continue
            subset = subsets[i] if subsets[i] is not None else NO_SUBSET
            for start, end, h in matches:
                for evalset, item, field, rule in index.owners_with_rule(h):
                    for name, value in zip(HITS_SCHEMA.names, (ids[i], task.params["source"], subsets[i], evalset, item,
                                                                field, rule, start, end, texts[i][start:end])):
                        hits[name].append(value)
                    found.setdefault(evalset, {}).setdefault(task.params["source"], {}).setdefault(subset, []).append(item)
            if cfg.policy == "drop":
                reasons[i] = "contaminated"
                continue
            pieces, removed = excise(texts[i], [(s, e) for s, e, _ in matches], margin=cfg.margin,
                                     min_piece=cfg.min_piece, max_pieces=cfg.max_pieces)
            removed_chars += removed
            if pieces is None:
                reasons[i] = "contamination_fragmented"
            elif not pieces:
                reasons[i] = "contamination_left_too_little"
            else:
                out_texts[i] = "\n\n".join(pieces)
        ctx.write(f"_work/hits/{task.key}.parquet", parquet_bytes(pa.table(hits, schema=HITS_SCHEMA)))
        out = table.set_column(table.schema.get_field_index("text"), "text", pa.array(out_texts, pa.string()))
        stats: dict[str, Any] = {"found": {s: {src: {sub: sorted(set(items)) for sub, items in subs.items()}
                                               for src, subs in per.items()} for s, per in found.items()},
                                 "hits": len(hits["id"]), "excised_chars": removed_chars,
                                 "documents_with_hits": sum(1 for r, t0, t1 in zip(reasons, texts, out_texts)
                                                            if r is not None or t0 != t1)}
        # Excision shortens texts: the manifest's bytes_in must be what came in, so the cut bytes stay in the lineage.
        return ShardOutput(out, pa.array(reasons, pa.string()), stats, bytes_in=text_bytes(table))


def _no_hits() -> pa.Table:
    """The hits table of a shard without any, built as `Decontaminate.map_shard` builds one."""
    return pa.table({name: [] for name in HITS_SCHEMA.names}, schema=HITS_SCHEMA)


def _unchanged(table: pa.Table) -> ShardOutput:
    """What `Decontaminate.map_shard` makes of a shard without a match to excise: every row kept as it came, the text
    column one chunk of `string` as its rebuilt one is, no hits."""
    text = table.column("text")
    text = text.cast(pa.string()).combine_chunks() if text.num_chunks else pa.array([], pa.string())
    out = table.set_column(table.schema.get_field_index("text"), "text", text)
    stats = {"found": {}, "hits": 0, "excised_chars": 0, "documents_with_hits": 0}
    return ShardOutput(out, pa.nulls(table.num_rows, pa.string()), stats, bytes_in=text_bytes(table))


class JoinHits(Phase):
    """One task: every shard's hits in one `hits.parquet` at the stage root, for auditors."""

    name = "hits"

    def plan(self, stage: "DecontaminateStage", ctx: PlanContext) -> list[Task]:
        return [Task(key="all", params={"shards": [shard_name(s["path"]) for s in ctx.input_shards]})]

    def run(self, stage: "DecontaminateStage", task: Task, ctx: TaskContext) -> Any:
        tables = [pq.read_table(storage.join(ctx.stage_dir, f"_work/hits/{name}.parquet"), filesystem=ctx.fs)
                  for name in task.params["shards"]]
        table = pa.concat_tables(tables) if tables else HITS_SCHEMA.empty_table()
        ctx.write("hits.parquet", parquet_bytes(table))
        return {"hits": table.num_rows}


class DecontaminateStage(Stage):
    """Evaluation-set n-grams excised from the corpus, every hit reported (docs/decontaminate.md)."""

    name = "decontaminate"
    order = 40
    config_class = DecontaminateConfig
    paths = ("evalsets[].path",)
    needs = frozenset({"id", "text", "source", "subset"})
    uses = frozenset({"lang"})
    drop_reasons = ("contaminated", "contamination_fragmented", "contamination_left_too_little")

    config: DecontaminateConfig

    def __init__(self, config: DecontaminateConfig, run):
        super().__init__(config, run)
        self.evalset_paths = [self.resolve(e.path) for e in config.evalsets]

    def identity(self) -> dict[str, Any]:
        identity = super().identity()
        # The sets' content, not where they lie.
        for entry, path in zip(identity["config"]["evalsets"], self.evalset_paths):
            entry["path"] = "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()
        identity["languages"] = {name: s.language for name, s in sorted(self.run.sources.items())}
        return identity

    def phases(self) -> list[Phase]:
        return [BuildIndex(), CountNgrams(), Decontaminate(), JoinHits()]

    def report(self, stats: Mapping[str, Any], reduced: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Per evaluation set: its n and how its items and segments were checked (coverage), items found (number
        and fraction), per source and subset; the index; common n-grams."""
        reduced = reduced or {}
        index = (reduced.get("index") or {}).get("summary", {})
        totals = index.get("items", {})
        coverage = index.get("coverage", {})
        evalsets = {}
        summary = []
        for name in sorted(totals):
            per = stats.get("found", {}).get(name, {})
            items = sorted({i for subs in per.values() for its in subs.values() for i in its})
            by_source = {src: {sub: {"items": len(set(its))} for sub, its in sorted(subs.items())}
                         for src, subs in sorted(per.items())}
            fraction = len(items) / totals[name] if totals[name] else 0.0
            cov = coverage.get(name, {})
            checked = cov.get("items", {})
            evalsets[name] = {"items": totals[name], "n": cov.get("n"), "n_rule": cov.get("n_rule"),
                              "unit": cov.get("unit"), "checked_ngram": checked.get("ngram", 0),
                              "checked_whole": checked.get("whole", 0),
                              "not_checkable": {"too_short": checked.get("too_short", 0),
                                                "no_text": checked.get("no_text", 0)},
                              "segments": cov.get("segments", {}),
                              "segmented_fields": cov.get("segmented_fields", 0),
                              "found": len(items), "fraction": round(fraction, 5),
                              "by_source": by_source, "found_items": items[:100]}
            unchecked = checked.get("too_short", 0) + checked.get("no_text", 0)
            if unchecked:
                summary.append(f"{name}: {unchecked:,} of {totals[name]:,} items not checkable (too short or no text)")
            if items:
                summary.append(f"{name}: {len(items):,} of {totals[name]:,} items found in the corpus ({100 * fraction:.2f}%)")
        return {"evalsets": evalsets, "hits": stats.get("hits", 0), "documents_with_hits": stats.get("documents_with_hits", 0),
                "excised_chars": stats.get("excised_chars", 0), "index": index,
                "common_ngrams_ignored": (reduced.get("count") or {}).get("common", []), "summary": summary}
