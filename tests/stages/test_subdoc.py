"""The subdoc stage through the real runner (Ray): its three phases equal the one-process reference, code kept
whole, too-short documents dropped with their reason, counts per source in the manifest, removed spans inspectable."""

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


def test_three_phases_equal_the_reference_and_report_per_source(ray_cluster, tmp_path):
    config = corpus(tmp_path)
    reports = run_into(config, tmp_path / "o")
    out = tmp_path / "o"
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


@pytest.mark.slow
def test_worker_count_does_not_change_bytes(ray_cluster, tmp_path):
    config = corpus(tmp_path)
    run_into(config, tmp_path / "w1", workers=1)
    run_into(config, tmp_path / "w2", workers=2)
    a, b = tree(tmp_path / "w1", "subdoc"), tree(tmp_path / "w2", "subdoc")
    assert a == b and any(p.startswith("subdoc/removed/") for p in a)
