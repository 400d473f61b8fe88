"""The dedup stage on a real Ray cluster: exact and near duplicates across shards and sources, verification,
determinism whatever the worker count, resume after a kill in any phase, clusters.parquet and the report."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import write_jsonl
from tests.pipeline.test_runner import run_into, tree
from tokenmill.demo.planted import jaccard
from tokenmill.documents import read_rows
from tokenmill.dedup.refs import doc_ref, rows_by_shard

pytestmark = pytest.mark.ray

VOCAB = ("river mountain forest village harbor market bridge castle garden meadow valley island lantern "
         "orchard library museum theater station bakery school tower canal square temple workshop").split()


def article(rng: random.Random, words: int = 400) -> str:
    sentences, count = [], 0
    while count < words:
        n = rng.randint(8, 16)
        sentences.append(" ".join(rng.choice(VOCAB) for _ in range(n)).capitalize() + ".")
        count += n
    return " ".join(sentences)


def edited(text: str, rng: random.Random, target: float) -> str:
    n = len(text.split()) - 4
    k = max(1, round(n * (1 - target) / target))
    return text + " Updated " + " ".join(f"w{rng.randint(0, 10**9)}" for _ in range(k)) + "."


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("dedup")
    rng = random.Random(7)
    base = [article(rng) for _ in range(60)]
    near97, near93 = edited(base[1], rng, 0.97), edited(base[2], rng, 0.93)
    web = [{"id": f"w{i}", "text": t} for i, t in enumerate(base)]
    forum = [{"id": "f-exact", "text": base[0]},          # exact copy of w0, other source
             {"id": "f-near97", "text": near97},          # near copy of w1 (0.97), other source
             {"id": "f-near93", "text": near93}]          # 0.93: must survive verification
    forum += [{"id": f"f{i}", "text": article(rng)} for i in range(20)]
    write_jsonl(root / "web" / "a.jsonl", web[:30])
    write_jsonl(root / "web" / "b.jsonl", web[30:])
    write_jsonl(root / "forum" / "c.jsonl", forum)
    config = {"output": "out", "seed": 1, "ingest": {"docs_per_shard": 10},
              "sources": [{"name": "web", "format": "jsonl", "paths": ["web/*.jsonl"], "id_field": "id"},
                          {"name": "forum", "format": "jsonl", "paths": ["forum/*.jsonl"], "id_field": "id"}],
              "stages": {"dedup": {"partitions": 4}}}
    (root / "run.yaml").write_text(yaml.safe_dump(config))
    return root / "run.yaml", {"near97": jaccard(base[1], near97), "near93": jaccard(base[2], near93)}


def dropped(out: Path) -> dict[str, tuple[str, str]]:
    rows = [r for p in sorted((out / "dedup" / "dropped").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    return {r["id"]: r["drop_reason"] for r in rows}


def test_exact_and_near_duplicates_across_shards_and_sources(ray_cluster, corpus, tmp_path):
    config, measured = corpus
    assert 0.96 < measured["near97"] < 0.98 and 0.92 < measured["near93"] < 0.94
    reports = run_into(config, tmp_path / "o")
    out = tmp_path / "o"
    gone = dropped(out)
    # Longest is kept: the web original and its exact forum copy tie, so the lower id ("f-exact") stays.
    assert gone == {"w0": "exact_duplicate", "w1": "near_duplicate"}
    clusters = pq.read_table(out / "dedup" / "clusters.parquet").to_pylist()
    by_id = {r["id"]: r for r in clusters}
    assert by_id["w1"]["removed_by"] == "f-near97" and by_id["w1"]["jaccard"] > 0.95
    assert by_id["w0"]["removed_by"] == "f-exact" and by_id["f-exact"]["kept"]
    assert "f-near93" not in by_id  # the 0.93 candidate failed verification: no edge, no cluster
    content = json.loads((out / "dedup" / "manifest.json").read_text())["content"]
    report = content["report"]
    assert report["clusters"]["clusters"] == 2 and report["clusters"]["near_duplicates"] == 1
    # The reduced cluster and candidate counts reach the report directly, not through the first shard's stats.
    assert not any({"clusters", "candidates"} & set(s.get("stats") or {}) for s in content["shards"])
    assert report["clusters"]["by_source"]["forum"]["size_histogram"] == {"2": 2}
    assert reports[-1].totals["drops"] == {"exact_duplicate": 1, "near_duplicate": 1}
    candidates = report["candidates"]
    assert candidates["buckets_over_cap"] == 0 and candidates["pairs_not_verified"] == 0
    assert candidates["pairs_rejected"] >= 1  # f-near93
    assert candidates["pairs_verified"] == candidates["pairs_above_threshold"] + candidates["pairs_rejected"]
    # Three pairs (w0 and f-exact, w1 and f-near97, w2 and f-near93), each proposed by several bands' buckets in
    # several partitions (candidate_pairs counts each), are verified once each: pairs travel to verify by anchor.
    assert candidates["pairs_verified"] == 3 < candidates["candidate_pairs"]
    phase_files_hold_no_text_nor_shingles(out)


def phase_files_hold_no_text_nor_shingles(out: Path) -> None:
    """Dedup's phase files keep references, band keys, hashes and lengths: never a document's text or its shingle
    set (verify reads the text back from the input shard). A list or a large string column is a copy creeping in."""
    files = sorted((out / "dedup" / "_work").rglob("*.parquet"))
    assert any("docs" in f.parts for f in files) and any("bands" in f.parts for f in files)
    for f in files:
        schema = pq.read_schema(f)
        assert not {"text", "shingles", "signature"} & set(schema.names), f
        assert not any(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_binary(t)
                       or pa.types.is_large_binary(t) for t in schema.types), (f, schema)
        if "docs" in f.parts:  # per document only its length: row i is row i of the input shard
            assert schema.names == ["length"], (f, schema)
        elif "bands" in f.parts:
            assert all(pa.types.is_integer(t) for t in schema.types), (f, schema)
    text = sum(f.stat().st_size for f in (out / "ingest" / "shards").glob("*.parquet"))
    docs = sum(f.stat().st_size for f in files if "docs" in f.parts)
    assert docs < 0.1 * text, (docs, text)


@pytest.mark.long  # a dedup run, then its later phases again: about 10 s on 2 loaded cores
def test_a_band_file_not_where_this_version_writes_it_fails_the_partition_naming_it(ray_cluster, corpus, tmp_path):
    """A `_work` resumed after its band files were lost, or left by a version that laid them out otherwise (one file
    per shard and partition, in a folder per partition): the buckets tasks open each shard's file by name and fail
    naming it, instead of reading no rows and finding no duplicates."""
    import shutil

    from tokenmill.errors import StageFailed

    config, _ = corpus
    out = tmp_path / "o"
    run_into(config, out)
    work = out / "dedup" / "_work"
    moved = sorted((work / "bands").glob("*.parquet"))[0]
    (work / "bands" / "p0000").mkdir()
    shutil.move(str(moved), str(work / "bands" / "p0000" / moved.name))
    # Its commit record names it where it now is, as an older version's record would: the task stays committed.
    record = work / "commits" / "signatures" / f"{moved.stem}.json"
    data = json.loads(record.read_text())
    for f in data["files"]:
        f["path"] = f["path"].replace("_work/bands/", "_work/bands/p0000/")
    record.write_text(json.dumps(data))
    (out / "dedup" / "manifest.json").unlink()
    for phase in sorted(p.name for p in (work / "commits").iterdir()):
        if phase != "signatures":
            shutil.rmtree(work / "commits" / phase)
    with pytest.raises(StageFailed) as failed:
        run_into(config, out)
    assert failed.value.failures and all(moved.name in why for _, why in failed.value.failures), failed.value.failures


@pytest.mark.long  # three dedup runs (one and two workers, a resume): 19 s on 2 loaded cores
def test_workers_do_not_change_bytes_and_resume_is_exact(ray_cluster, corpus, tmp_path):
    config, _ = corpus
    run_into(config, tmp_path / "w1", workers=1)
    run_into(config, tmp_path / "w2", workers=2)
    assert tree(tmp_path / "w1") == tree(tmp_path / "w2")
    # A kill in the middle of every phase: some commits of each phase lost, the manifest not written.
    out = tmp_path / "w2"
    (out / "dedup" / "manifest.json").unlink()
    for phase in ("signatures", "buckets", "groups", "verify", "clusters", "filter"):
        records = sorted((out / "dedup" / "_work" / "commits" / phase).glob("*.json"))
        for r in records[::2]:
            r.unlink()
    resumed = run_into(config, out)
    assert resumed[-1].status == "resumed"
    assert tree(out) == tree(tmp_path / "w1")


@pytest.fixture(scope="module")
def giant_bucket(tmp_path_factory):
    """Forty documents sharing most of their text, forced into one LSH bucket (1 band x 1 row) over a cap of 3
    pairs; only the last two, A and B, are near duplicates (Jaccard > 0.95). The bucket's first document, the old
    star's centre, is neither."""
    root = tmp_path_factory.mktemp("giant")
    rng = random.Random(11)
    boilerplate = article(rng, 300)
    docs = [{"id": f"d{i:02d}", "text": boilerplate + " " + article(rng, 150)} for i in range(38)]
    a_text = boilerplate + " " + article(rng, 150)
    docs += [{"id": "x-a", "text": a_text}, {"id": "x-b", "text": edited(a_text, rng, 0.97)}]
    write_jsonl(root / "web" / "a.jsonl", docs)
    config = {"output": "out", "seed": 1, "ingest": {"docs_per_shard": 10},
              "sources": [{"name": "web", "format": "jsonl", "paths": ["web/*.jsonl"], "id_field": "id"}],
              "stages": {"dedup": {"partitions": 2, "num_perm": 16, "bands": 1, "rows": 1,
                                   "max_pairs_per_bucket": 3}}}
    (root / "run.yaml").write_text(yaml.safe_dump(config))
    return root / "run.yaml", jaccard(docs[-2]["text"], docs[-1]["text"]), jaccard(docs[0]["text"], a_text)


def test_bucket_over_the_cap_keeps_pairs_away_from_its_first_document(ray_cluster, giant_bucket, tmp_path):
    config, j_ab, j_other = giant_bucket
    assert j_ab > 0.95 and j_other < 0.9
    run_into(config, tmp_path / "o")
    out = tmp_path / "o"
    # The old star verified A and B only against d00 and lost the pair; leader clustering finds it.
    # B, the edited copy, is the longer one: it stays.
    assert dropped(out) == {"x-a": "near_duplicate"}
    by_id = {r["id"]: r for r in pq.read_table(out / "dedup" / "clusters.parquet").to_pylist()}
    assert by_id["x-a"]["removed_by"] == "x-b" and by_id["x-a"]["jaccard"] > 0.95


def test_candidate_counts_reach_the_manifest_and_the_summary(ray_cluster, giant_bucket, tmp_path):
    config, _, _ = giant_bucket
    run_into(config, tmp_path / "o")
    report = json.loads((tmp_path / "o" / "dedup" / "manifest.json").read_text())["content"]["report"]
    c = report["candidates"]
    assert c["buckets_over_cap"] >= 1 and c["pairs_in_buckets_over_cap"] >= 39 * 38 // 2
    # Leader clustering compared a fraction of the bucket's pairs, in one pass, and left none undecided.
    assert 0 < c["pairs_compared_in_buckets_over_cap"] < c["pairs_in_buckets_over_cap"]
    assert c["buckets_over_cap_second_pass"] == 0
    assert c["pairs_verified"] == c["pairs_above_threshold"] + c["pairs_rejected"]
    assert c["pairs_verified"] == c["candidate_pairs"] + c["pairs_compared_in_buckets_over_cap"]
    assert c["pairs_above_threshold"] >= 1 and c["pairs_rejected"] > 0 and c["pairs_not_verified"] == 0
    assert f"{c['buckets_over_cap']:,} buckets over the cap" in report["summary"][1]
    assert f"{c['pairs_not_verified']:,} pairs not verified" in report["summary"][1]
    # A budget of one comparison per document leaves pairs undecided, and says how many.
    cfg = yaml.safe_load(config.read_text())
    cfg["stages"]["dedup"]["max_comparisons_per_document"] = 1
    tight = config.parent / "tight.yaml"
    tight.write_text(yaml.safe_dump(cfg))
    run_into(tight, tmp_path / "t")
    report = json.loads((tmp_path / "t" / "dedup" / "manifest.json").read_text())["content"]["report"]
    assert report["candidates"]["pairs_not_verified"] > 0 and report["candidates"]["buckets_over_cap_second_pass"] >= 1
    assert f"{report['candidates']['pairs_not_verified']:,} pairs not verified" in report["summary"][1]


def test_a_cluster_over_the_cap_in_every_band_is_verified_once(ray_cluster, tmp_path):
    """Forty near copies of one article (each 0.99 to it) fill one bucket in each of 4 bands, all over a cap of 3
    pairs. Verified bucket by bucket, the cluster cost 4 x 39 comparisons; joined into one group by their shared
    documents, 39 (one per document after the first), with the same removals."""
    rng = random.Random(3)
    text = article(rng, 400)
    docs = [{"id": "base", "text": text}] + [{"id": f"c{i:02d}", "text": text + f" extra{i}"} for i in range(39)]
    write_jsonl(tmp_path / "web" / "a.jsonl", docs)
    config = {"output": "out", "seed": 1, "ingest": {"docs_per_shard": 10},
              "sources": [{"name": "web", "format": "jsonl", "paths": ["web/*.jsonl"], "id_field": "id"}],
              "stages": {"dedup": {"partitions": 4, "num_perm": 16, "bands": 4, "rows": 1,
                                   "max_pairs_per_bucket": 3}}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    run_into(tmp_path / "run.yaml", tmp_path / "o")
    c = json.loads((tmp_path / "o" / "dedup" / "manifest.json").read_text())["content"]["report"]["candidates"]
    # A copy's one extra shingle can move its MinHash in a band: a bucket holds 38-40 of the 40, the group all.
    assert c["buckets_over_cap"] == 4 and c["pairs_in_buckets_over_cap"] > 3 * 40 * 39 // 2
    assert c["pairs_compared_in_buckets_over_cap"] == 39 and c["pairs_not_verified"] == 0
    assert len(dropped(tmp_path / "o")) == 39  # one kept: the longest copy


def test_rows_read_back_are_the_rows_a_whole_read_gives(tmp_path):
    """Verify and clusters read back only the needed rows' row groups; across several row groups, with rows
    skipped, first and last, the rows come back in order and equal those of a whole read (pyarrow's own)."""
    path = tmp_path / "s.parquet"
    n = 1000
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(n)], "text": [f"text {i}" for i in range(n)]}), path,
                   row_group_size=64)
    assert pq.ParquetFile(path).metadata.num_row_groups > 10
    rows = np.array([0, 3, 63, 64, 65, 300, 301, 700, 999])
    for fs in (pyarrow.fs.LocalFileSystem(), None):
        got = read_rows(str(path), rows, ["id", "text", "lang"], fs)  # a column the file lacks is left out
        assert got.column_names == ["id", "text"]
        assert got.to_pylist() == pq.read_table(path).take(pa.array(rows)).to_pylist()

    docs = np.r_[doc_ref(2, np.array([5, 1])), doc_ref(0, np.array([7])), doc_ref(2, np.array([5]))]
    split = [(i, d.tolist(), r.tolist()) for i, d, r in rows_by_shard(docs)]
    assert split == [(0, doc_ref(0, np.array([7])).tolist(), [7]), (2, doc_ref(2, np.array([1, 5])).tolist(), [1, 5])]
    assert rows_by_shard(np.zeros(0, np.uint64)) == []


@pytest.mark.long  # two dedup runs: about 10 s on 2 loaded cores
def test_auto_partitions_are_sized_from_the_input_and_remove_the_same_documents(ray_cluster, corpus, tmp_path,
                                                                                 monkeypatch):
    from tokenmill.dedup import sizing

    config, _ = corpus
    run_into(config, tmp_path / "four")
    auto = config.parent / "auto-partitions.yaml"  # beside the corpus: its source patterns are relative
    settings = yaml.safe_load(config.read_text())
    settings["stages"]["dedup"] = {}  # partitions: auto, the default
    auto.write_text(yaml.safe_dump(settings))
    # One document a partition: 83 input documents take 16 doubled three times (the count is fixed on the driver).
    monkeypatch.setattr(sizing, "DOCS_PER_PARTITION", 1)
    run_into(auto, tmp_path / "auto")
    reports = {name: json.loads((tmp_path / name / "dedup" / "manifest.json").read_text())["content"]["report"]
               for name in ("four", "auto")}
    assert reports["four"]["partitions"] == 4 and reports["auto"]["partitions"] == 128
    assert "128 band-key partitions (sized from 83 documents" in " ".join(reports["auto"]["summary"])
    assert len(list((tmp_path / "auto" / "dedup" / "index").glob("p*.parquet"))) == 128
    assert dropped(tmp_path / "auto") == dropped(tmp_path / "four") == {"w0": "exact_duplicate",
                                                                         "w1": "near_duplicate"}
    assert ((tmp_path / "auto" / "dedup" / "clusters.parquet").read_bytes()
            == (tmp_path / "four" / "dedup" / "clusters.parquet").read_bytes())
    assert reports["auto"]["clusters"] == reports["four"]["clusters"]
