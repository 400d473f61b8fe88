"""The excise phase skips the shards whose count task matched nothing it must excise (`hit_shards`): every file it
writes and every manifest field the same as when it matches every shard again, on real and hostile text."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from tokenmill.pipeline.contract import RunContext, Task, TaskContext
from tokenmill.sources.config import SourceConfig
from tokenmill.stages.decontaminate.config import DecontaminateConfig
from tokenmill.stages.decontaminate.ngrams import build_index
from tokenmill.stages.decontaminate.stage import CountNgrams, Decontaminate, DecontaminateStage

HOSTILE = ["", "\x00", "a\x00b " * 50, "\r\n\r\r", "\u00a0\u2003\u3000 x\u2028y", "x" * 300_000,
           "e\u0301cole cafe\u0301 " * 40, "中文English混合，测试。" * 30]


class _Writer:
    """A task writer that keeps what is written in memory and links nothing (so every file's bytes are compared)."""

    def __init__(self) -> None:
        self.fs = pafs.LocalFileSystem()
        self.files: dict[str, bytes] = {}

    def write(self, relpath: str, data: bytes) -> None:
        self.files[relpath] = data

    def link(self, relpath: str, source: str) -> bool:
        return False


def _shards(shared: Path) -> list[list[str]]:
    """Real texts cut into shards, with gsm8k questions planted in a few documents of some shards (one of them in
    eleven documents: a common phrase, ignored), and hostile texts in a shard of their own."""
    pile = json.loads((shared / "pile" / "pearl_pile_texts.json").read_text(encoding="utf-8"))
    with gzip.open(shared / "commoncrawl" / "dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz", "rt") as f:
        web = [json.loads(line)["text"] for line in f if line.strip()]
    gsm = [json.loads(line)["question"] for line in (shared / "evalsets" / "gsm8k_test.jsonl").open(encoding="utf-8")]
    shards = [pile[i:i + 100] for i in range(0, 1000, 100)] + [web[i:i + 150] for i in range(0, len(web), 150)]
    shards[1][5] += "\n\n" + gsm[3]
    shards[4][0] = gsm[7] + " " + shards[4][0]
    for k in range(11):  # a common phrase: found in more documents than max_doc_frequency, ignored
        shards[6 + k % 2][k] += " " + gsm[11]
    shards[12][3] += " " + gsm[20].upper()
    return shards + [HOSTILE, HOSTILE + [gsm[30]]]


def _run(phase, stage, key: str, texts: list[str], tmp: Path, shared: dict):
    (tmp / "in").mkdir(exist_ok=True)
    n = len(texts)
    pq.write_table(pa.table({"id": [f"{key}-{i}" for i in range(n)], "text": texts, "source": ["s"] * n,
                             "subset": pa.array([None if i % 3 else "a" for i in range(n)], pa.string()),
                             "meta": ["{}"] * n}), tmp / "in" / f"{key}.parquet")
    writer = _Writer()
    ctx = TaskContext(str(tmp / "out"), str(tmp / "in"), shared, writer)
    result = phase.run(stage, Task(key=key, inputs=(f"{key}.parquet",), params={"source": "s"}), ctx)
    return result, writer.files


def test_skipped_shards_write_what_matching_them_writes(tmp_path, shared_data):
    (tmp_path / "gsm.jsonl").write_bytes((shared_data / "evalsets" / "gsm8k_test.jsonl").read_bytes())
    run = RunContext(seed=0, sources={"s": SourceConfig(name="s", format="jsonl", paths=["x"])},
                     base_dir=str(tmp_path))
    config = DecontaminateConfig(evalsets=[{"name": "gsm", "path": "gsm.jsonl", "fields": ["question"]}])
    stage = DecontaminateStage(config, run)
    questions = [json.loads(line)["question"] for line in (tmp_path / "gsm.jsonl").open(encoding="utf-8")]
    index = build_index(("gsm", str(i), "question", q, "en") for i, q in enumerate(questions))
    shards = {f"s{k:02d}": texts for k, texts in enumerate(_shards(shared_data))}
    counts = {key: _run(CountNgrams(), stage, key, texts, tmp_path, {"index": {"index": index}})[0]
              for key, texts in shards.items()}
    reduced = CountNgrams().reduce(stage, counts, None)
    assert reduced["ignore"] and reduced["hit_shards"] == {"s01", "s04", "s12", "s16"}
    before = {k: v for k, v in reduced.items() if k != "hit_shards"}  # the code before: every shard matched again
    for key, texts in shards.items():
        new, new_files = _run(Decontaminate(), stage, key, texts, tmp_path, {"index": {"index": index}, "count": reduced})
        old, old_files = _run(Decontaminate(), stage, key, texts, tmp_path, {"index": {"index": index}, "count": before})
        assert new.to_json() == old.to_json(), key
        assert new_files == old_files, key
        assert (key in reduced["hit_shards"]) == (new.shards[0]["stats"]["hits"] > 0), key

