"""The subdoc stage through the real runner (Ray): its three phases equal the one-process reference, code kept
whole, too-short documents dropped with their reason, counts per source in the manifest, removed spans inspectable
(`tokenmill.inspect.subdoc`, `tokenmill inspect --removed`), hostile inputs through the stage."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import write_jsonl
from tests.pipeline.test_runner import run_into, tree
from tokenmill.subdoc import dedup_texts
from tokenmill.text.escapes import content_kind

pytestmark = pytest.mark.ray

NAV = "Home | World | Business | Sport | Contact"
BANNER = "This site uses cookies. By continuing you agree to our use of cookies."
SIGNATURE = "-- Posted from my phone, please excuse the typos"
LICENSE = "# Copyright (c) The Authors. Licensed under the MIT License."
WORDS = "river mountain forest village harbor market bridge castle garden meadow valley island lantern".split()
CODE = (f"{LICENSE}\nimport os\n\ndef main(base, name):\n    path = os.path.join(base, name)\n    return len(path)\n\n"
        "class Config:\n    verbose = False\n")


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "."


def corpus(root: Path) -> Path:
    rng = random.Random(3)
    web = [{"id": f"w{i}", "text": f"{NAV}\n{sentence(rng)} {sentence(rng)}\n{BANNER}"} for i in range(24)]
    web += [{"id": f"w-empty{i}", "text": f"{NAV}\n{BANNER}"} for i in range(3)]  # nothing left but boilerplate
    forum = [{"id": f"f{i}", "text": f"{sentence(rng)}\n\n{SIGNATURE}\n{LICENSE}"} for i in range(12)]
    forum += [{"id": f"code{i}", "text": CODE.replace("verbose", f"verbose_{i}")} for i in range(4)]
    write_jsonl(root / "web" / "a.jsonl", web[:14])
    write_jsonl(root / "web" / "b.jsonl", web[14:])
    write_jsonl(root / "forum" / "c.jsonl", forum)
    config = {"output": "out", "seed": 1, "ingest": {"docs_per_shard": 8},
              "sources": [{"name": "web", "format": "jsonl", "paths": ["web/*.jsonl"], "id_field": "id"},
                          {"name": "forum", "format": "jsonl", "paths": ["forum/*.jsonl"], "id_field": "id"}],
              "stages": {"subdoc": {"partitions": 3, "max_docs": 2, "min_doc_chars": 30}}}
    (root / "run.yaml").write_text(yaml.safe_dump(config))
    return root / "run.yaml"


def _too_short(tmp: Path) -> list[str | None]:
    from tests.stages.test_drop_reasons import _pipeline

    docs = [{"id": f"d{i}", "text": f"{NAV}\n{BANNER}"} for i in range(3)]
    return _pipeline("subdoc", {"subdoc": {"max_docs": 1}}, docs)(tmp)


DROP_REASON_CASES = {"subdoc": {"subdoc_too_short": (_too_short, pytest.mark.ray)}}
"""The stage's drop reason, reached by an input: for the generic drop-reason test, which collects cases from
modules under tests/stages/ only (a module there re-exporting this name brings it in)."""


def rows(folder: Path) -> list[dict]:
    return [r for p in sorted(folder.glob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def reference(out: Path) -> dict[str, tuple[str, bool]]:
    """The one-process algorithm over the stage's input in the stable order (source, shard name, row)."""
    shards = sorted(((pq.read_table(p).column("source")[0].as_py(), p.stem, p)
                     for p in (out / "ingest" / "shards").glob("*.parquet")), key=lambda s: s[:2])
    docs = [r for _, _, p in shards for r in pq.read_table(p).to_pylist()]
    texts = [d["text"] for d in docs]
    out_texts, short = dedup_texts(texts, "lines", min_chars=20, max_docs=2, min_doc_chars=30,
                                   skip=[content_kind(t) == "code" for t in texts])
    # A dropped document is written as it came (its text before removal).
    return {d["id"]: (d["text"] if s else t, s) for d, t, s in zip(docs, out_texts, short)}


@pytest.fixture(scope="module")
def subdoc_run(ray_cluster, tmp_path_factory):
    """`corpus` through ingest and subdoc once for the module: (output folder, stage reports)."""
    root = tmp_path_factory.mktemp("subdoc")
    reports = run_into(corpus(root), root / "o")
    return root / "o", reports


def test_three_phases_equal_the_reference_and_report_per_source(subdoc_run):
    out, reports = subdoc_run
    expected = reference(out)
    kept = {r["id"]: r["text"] for r in rows(out / "subdoc" / "shards")}
    dropped = {r["id"]: (r["text"], r["drop_reason"]) for r in rows(out / "subdoc" / "dropped")}
    assert kept == {i: t for i, (t, s) in expected.items() if not s}
    assert dropped == {i: (t, "subdoc_too_short") for i, (t, s) in expected.items() if s}
    # The first web document keeps the banner and the navigation; every later one loses both.
    assert NAV in kept["w0"] and BANNER in kept["w0"]
    assert sum(NAV in t for t in kept.values()) == 1 and sum(BANNER in t for t in kept.values()) == 1
    assert set(dropped) == {"w-empty0", "w-empty1", "w-empty2"} and dropped["w-empty1"][0] == f"{NAV}\n{BANNER}"
    # Code keeps its license line; the forum posts (prose) lose the signature and the license but the first.
    assert all(kept[f"code{i}"] == CODE.replace("verbose", f"verbose_{i}") for i in range(4))
    assert sum(LICENSE in kept[f"f{i}"] for i in range(12)) == 1
    assert sum(SIGNATURE in kept[f"f{i}"] for i in range(12)) == 1
    content = json.loads((out / "subdoc" / "manifest.json").read_text())["content"]
    assert reports[-1].totals["drops"] == {"subdoc_too_short": 3}
    report = content["report"]
    # web: 26 later documents lose NAV and BANNER (2 spans each); forum: 11 posts lose 2 spans each.
    assert report["by_source"]["web"]["spans_removed"] == 2 * 26
    assert report["by_source"]["forum"]["spans_removed"] == 2 * 11
    assert report["by_source"]["forum"]["docs_changed"] == 11
    assert report["spans"]["code_docs"] == 4 and report["count"]["repeated_spans"] == 4
    assert {t["span"] for t in report["top"]} == {NAV, BANNER, SIGNATURE, LICENSE}
    assert {t["span"]: t["docs"] for t in report["top"]}[NAV] == 27
    # One shard (the one of each span's second document) gives each top span's text: one example per span.
    examples = [e for shard in content["shards"] for e in (shard.get("stats") or {}).get("examples", [])]
    assert len(examples) == len({h for h, _ in examples}) == 4
    removed = rows(out / "subdoc" / "removed")
    assert len(removed) == 2 * 26 + 2 * 11 and {r["span"] for r in removed} == {NAV, BANNER, SIGNATURE, LICENSE}
    assert not any(r["id"].startswith("code") for r in removed)
    # kept/: each repeated span once, in the shard of its first document, which was not dropped.
    kept = {r["span"]: (r["id"], r["source"], r["docs"], r["dropped"]) for r in rows(out / "subdoc" / "kept")}
    assert kept == {NAV: ("w0", "web", 27, False), BANNER: ("w0", "web", 27, False),
                    SIGNATURE: ("f0", "forum", 12, False), LICENSE: ("f0", "forum", 12, False)}


def test_removed_spans_are_inspectable_with_the_document_that_kept_them(subdoc_run, tmp_path, capsys):
    import shutil

    from tokenmill.cli import main
    from tokenmill.errors import TokenmillError
    from tokenmill.inspect import removed_span_summary, removed_spans

    out, _ = subdoc_run
    spans = removed_spans(out).to_pylist()
    assert len(spans) == 2 * 26 + 2 * 11
    assert {(r["span"], r["kept_by"], r["kept_by_source"]) for r in spans} == {
        (NAV, "w0", "web"), (BANNER, "w0", "web"), (SIGNATURE, "f0", "forum"), (LICENSE, "f0", "forum")}
    assert all(r["chars"] == len(r["span"]) and not r["kept_by_dropped"] for r in spans)
    assert {r["id"] for r in spans if r["span"] == NAV} == {f"w{i}" for i in range(1, 24)} | {f"w-empty{i}"
                                                                                             for i in range(3)}
    summary = removed_span_summary(out)
    assert list(summary) == ["forum", "web"]
    web = {s["span"]: (s["removed_from"], s["docs"], s["kept_by"], s["example"]) for s in summary["web"]}
    assert web == {NAV: (26, 27, "w0", "w-empty0"), BANNER: (26, 27, "w0", "w-empty0")}
    assert [(s["span"], s["removed_from"], s["kept_by"]) for s in removed_span_summary(out, "forum", n=1)["forum"]] \
        in ([(SIGNATURE, 11, "f0")], [(LICENSE, 11, "f0")])
    assert removed_spans(out, source="nope").num_rows == 0
    # The command prints each source's spans with the document that kept them.
    assert main(["inspect", str(out), "--removed", "-n", "2", "--source", "web"]) == 0
    printed = capsys.readouterr().out
    assert NAV in printed and "w0 (web)" in printed and SIGNATURE not in printed
    # Files that do not add up to the manifest's counts are refused, not read.
    bad = tmp_path / "bad"
    shutil.copytree(out / "subdoc", bad / "subdoc")
    for gone in sorted((bad / "subdoc" / "removed").glob("*.parquet"))[:1]:
        gone.unlink()
    with pytest.raises(TokenmillError, match="manifest counts"):
        removed_spans(bad)


@pytest.mark.slow
def test_worker_count_does_not_change_bytes(ray_cluster, tmp_path):
    config = corpus(tmp_path)
    run_into(config, tmp_path / "w1", workers=1)
    run_into(config, tmp_path / "w2", workers=2)
    a, b = tree(tmp_path / "w1", "subdoc"), tree(tmp_path / "w2", "subdoc")
    assert a == b and any(p.startswith("subdoc/removed/") for p in a)


@pytest.mark.long
def test_hostile_inputs_through_the_stage_lose_nothing(ray_cluster, tmp_path):
    """A 5 MB one-line page and its copy, a source of empty and whitespace-only texts, CJK and Latin lines with CRLF
    endings, and a first document dropped itself: every input document is kept or has a named drop reason."""
    from tests.subdoc.test_hostile import one_line
    from tokenmill.inspect import removed_spans
    from tokenmill.stages.subdoc import SPAN_CHARS
    from tokenmill.subdoc import normalize

    big = one_line(5_000_000)
    ad, tag = "Subscribe to our newsletter for weekly updates", "Posted in Uncategorized | Leave a comment here"
    footer = "订阅 Newsletter 获取最新 updates：©2024 Example 公司 All rights reserved"
    mixed = [{"id": "m0", "text": f"Real content of page zero, long enough to stay in the corpus.\n{ad}"},
             {"id": "m1", "text": f"{tag}\n{ad}"},  # first for `tag`, loses `ad`, left too short: dropped
             {"id": "m2", "text": f"{tag}\nAnother real page with enough words in it to be kept after removal."}]
    mixed += [{"id": f"m{i}", "text": f"第{i}篇 article about 数据 pipelines, part {i} of the series 系列，内容很长，"
                                      f"讲的是数据清洗。\r\n{footer}\r\n"} for i in range(3, 6)]
    write_jsonl(tmp_path / "big" / "a.jsonl", [{"id": "b0", "text": big}, {"id": "b1", "text": big}])
    write_jsonl(tmp_path / "empty" / "a.jsonl", [{"id": "e0", "text": ""}, {"id": "e1", "text": ""},
                                                 {"id": "e2", "text": " \r\n\t\u3000\n"}])
    write_jsonl(tmp_path / "mixed" / "a.jsonl", mixed)
    sources = [{"name": n, "format": "jsonl", "paths": [f"{n}/*.jsonl"], "id_field": "id"}
               for n in ("big", "empty", "mixed")]
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({
        "output": "out", "seed": 1, "sources": sources,
        "stages": {"subdoc": {"max_docs": 1, "min_doc_chars": 60, "partitions": 2}}}))
    reports = run_into(tmp_path / "run.yaml", tmp_path / "o")
    out = tmp_path / "o"
    kept = {r["id"]: r["text"] for r in rows(out / "subdoc" / "shards")}
    dropped = {r["id"]: (r["drop_reason"], r["text"]) for stage in ("ingest", "subdoc")
               for r in rows(out / stage / "dropped")}
    # Nothing lost: every input document kept or dropped with its reason, once.
    assert not set(kept) & set(dropped)
    assert set(kept) | set(dropped) == {"b0", "b1", "e0", "e1", "e2", *(d["id"] for d in mixed)}
    assert {i: dropped[i][0] for i in ("e0", "e1", "e2")} == dict.fromkeys(("e0", "e1", "e2"), "empty_text")
    assert kept["b0"] == big and dropped["b1"] == ("subdoc_too_short", big)  # dropped as it came
    assert dropped["m1"] == ("subdoc_too_short", mixed[1]["text"]) and kept["m0"] == mixed[0]["text"]
    assert kept["m2"] == mixed[2]["text"].split("\n", 1)[1]
    assert kept["m3"] == mixed[3]["text"] and all(kept[f"m{i}"] == mixed[i]["text"].replace(f"{footer}\r\n", "")
                                                  for i in (4, 5))
    assert reports[-1].totals["drops"] == {"subdoc_too_short": 2}
    # The 5 MB span is cut in removed/ and nowhere whole in the manifest; `tag` was kept by a dropped document.
    spans = {r["id"]: r for r in removed_spans(out).to_pylist()}
    assert spans["b1"]["chars"] == len(normalize(big)) and spans["b1"]["span"] == normalize(big)[:SPAN_CHARS]
    assert (spans["m2"]["span"], spans["m2"]["kept_by"], spans["m2"]["kept_by_dropped"]) == (tag, "m1", True)
    assert (out / "subdoc" / "manifest.json").stat().st_size < 200_000
    # The source whose texts ingest dropped as empty reaches the stage as an empty shard, and leaves as one.
    shards = json.loads((out / "subdoc" / "manifest.json").read_text())["content"]["shards"]
    assert [(s["docs_in"], s["docs_out"]) for s in shards if s["source"] == "empty"] == [(0, 0)]


def test_auto_partitions_grow_with_the_text_and_keep_16_for_small_runs():
    from pydantic import ValidationError

    from tokenmill.stages.subdoc import TEXT_BYTES_PER_PARTITION, SubdocConfig, partition_count

    def shards(total: int, n: int = 4) -> list[dict]:
        return [{"bytes_out": total // n}] * n

    assert partition_count("auto", []) == partition_count("auto", shards(16 * TEXT_BYTES_PER_PARTITION)) == 16
    assert partition_count("auto", shards(16 * TEXT_BYTES_PER_PARTITION + 4)) == 32
    assert partition_count("auto", shards(10**14)) == 4096
    assert partition_count(3, shards(10**14)) == 3
    assert SubdocConfig().partitions == "auto"
    for bad in (0, 4097, "many"):
        with pytest.raises(ValidationError):
            SubdocConfig(partitions=bad)


@pytest.mark.parametrize("partitions", [1, "auto"])
def test_the_output_is_the_same_whatever_the_partitions(subdoc_run, tmp_path, partitions):
    """The partitions split the count work, not what is decided: shards, drops, removed/ and kept/ byte-identical
    to the module's run over 3."""
    out, _ = subdoc_run
    config = yaml.safe_load(corpus(tmp_path).read_text())
    config["stages"]["subdoc"]["partitions"] = partitions
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    run_into(tmp_path / "run.yaml", tmp_path / "o")
    for folder in ("shards", "dropped", "removed", "kept"):
        mine, theirs = tree(tmp_path / "o" / "subdoc" / folder), tree(out / "subdoc" / folder)
        assert mine == theirs and mine, (partitions, folder)
