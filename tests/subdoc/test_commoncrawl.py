"""The subdoc stage on the shared Common Crawl samples (dolma's CC jsonl, WET, WARC through the pipeline's own
readers), at its defaults: navigation and footer lines removed, code untouched, content lines kept (a held-out
check: long prose lines, chosen without the algorithm, none lost outside exact-duplicate pages)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import SHARED_DATA
from tests.pipeline.test_runner import run_into
from tokenmill.subdoc import normalize
from tokenmill.text.escapes import content_kind

pytestmark = [pytest.mark.ray, pytest.mark.slow]

CC = SHARED_DATA / "commoncrawl"
FILES = {"dolma": ["dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz"],
         "cc_wet": ["CC-MAIN-2016-50_filter_test_1.warc.wet.gz", "whirlwind.warc.wet.gz"],
         "cc_warc": ["whirlwind.warc.gz", "dolma_wget_sample-0000.warc.gz"]}


def rows(folder: Path) -> list[dict]:
    return [r for p in sorted(folder.glob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def content_line(line: str) -> bool:
    """A line of prose content: at least 25 words, ending as a sentence ends."""
    norm = normalize(line)
    return len(norm.split()) >= 25 and norm[-1:] in ".!?\""


def test_navigation_and_footers_go_code_and_content_stay(ray_cluster, tmp_path):
    if not all((CC / f).is_file() for fs in FILES.values() for f in fs):
        pytest.skip(f"Common Crawl samples not found under {CC} (they sit beside the repository in CI)")
    sources = [{"name": name, "format": "jsonl" if name == "dolma" else name, "paths": [str(CC / f) for f in fs],
                "language": "any", **({"id_field": "id"} if name == "dolma" else {})} for name, fs in FILES.items()]
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({"output": "out", "seed": 1, "sources": sources,
                                                       "stages": {"subdoc": {}}}))
    reports = run_into(tmp_path / "run.yaml", tmp_path / "o")
    out = tmp_path / "o"
    report = json.loads((out / "subdoc" / "manifest.json").read_text())["content"]["report"]
    received = rows(out / "ingest" / "shards")
    after = {r["id"]: r["text"] for r in rows(out / "subdoc" / "shards")}
    after.update({r["id"]: "" for r in rows(out / "subdoc" / "dropped")})  # dropped: every line lost
    removed = rows(out / "subdoc" / "removed")
    spans = Counter((r["source"], r["span"]) for r in removed)
    # Figures of docs/subdoc.md (defaults: lines, min_chars 20, max_docs 3, min_doc_chars 50).
    assert len(received) == report["spans"]["docs"] == 719
    assert report["count"]["repeated_spans"] == 76
    assert report["by_source"]["dolma"]["spans_removed"] == 494 and report["by_source"]["cc_wet"]["spans_removed"] == 40
    assert reports[-1].totals["drops"] == {"subdoc_too_short": 13}
    # Navigation and footers, from all but the first page holding them.
    assert spans[("dolma", "Jump to navigation Jump to search")] == 39
    assert spans[("dolma", "By clicking “Post Your Answer”, you agree to our terms of service, privacy policy and "
                           "cookie policy")] == 10
    assert spans[("cc_wet", "Skip directly to site content")] == 3
    assert spans[("cc_wet", "© 2009-2016 BioMedSearch.com. All rights reserved")] == 3
    # No line of a code document removed.
    code = [r for r in received if content_kind(r["text"]) == "code"]
    assert len(code) == report["spans"]["code_docs"] == 9
    assert all(after[r["id"]] == r["text"] for r in code)
    assert not {r["id"] for r in removed} & {r["id"] for r in code}
    # Held out: every long prose line kept, but in pages that are exact copies of others (dedup's job, earlier).
    copies = Counter(r["text"] for r in received)
    lost = total = 0
    for r in received:
        kept = {normalize(line) for line in after[r["id"]].split("\n")}
        for line in filter(content_line, r["text"].split("\n")):
            total += 1
            lost += copies[r["text"]] == 1 and normalize(line) not in kept
    assert total > 3000 and lost == 0
    # Inspection: each removed span's first document (`kept_by`) holds it in the output, unless dropped itself.
    from tokenmill.inspect import removed_spans

    inspected = removed_spans(out).to_pylist()
    assert len(inspected) == len(removed) == report["count"]["removals"]
    assert not any(r["kept_by_dropped"] for r in inspected)  # no first document was dropped itself
    for r in inspected:
        assert r["kept_by"] != r["id"] and r["docs"] > 3
        if not r["kept_by_dropped"] and r["chars"] == len(r["span"]):  # not cut
            assert r["span"] in {normalize(line) for line in after[r["kept_by"]].split("\n")}, r
