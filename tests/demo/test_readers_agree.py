"""The pipeline's readers see the demo corpus exactly as ground_truth.json says (no Ray: the readers alone).

tests/test_demo_run.py checks the same end to end through ingest; this one is fast and names the record.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tokenmill.demo import write_demo_corpus


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("demo_readers")
    write_demo_corpus(root, seed=1234, docs_per_source=120)
    return root


def _sources(root: Path) -> list[dict]:
    return yaml.safe_load((root / "demo.yaml").read_text(encoding="utf-8"))["sources"]


@pytest.mark.parametrize("name", ["web_en", "books_en", "news_zh", "forum_en", "pile", "cc_wet", "cc_html", "reddit",
                                  "news_zh_gb"])
def test_reader_matches_ground_truth(root, name):
    from tokenmill.sources.config import SourceConfig
    from tokenmill.sources.formats import READERS

    src = next(s for s in _sources(root) if s["name"] == name)
    if src["format"] not in READERS:
        pytest.skip(f"no {src['format']} reader yet")
    truth = json.loads((root / "ground_truth.json").read_text(encoding="utf-8"))
    config = SourceConfig(**src)
    records, kept, drops = 0, 0, []
    for path in sorted(p for pattern in src["paths"] for p in root.glob(pattern)):
        rel = path.relative_to(root).as_posix()
        for record in READERS[src["format"]].read(str(path), config, rel):
            records += 1
            if record.drop is None:
                kept += 1
                assert record.text.strip(), (rel, record.index)
            else:
                drops.append((rel, record.index, record.drop))
                assert path.name in record.message, record.message
    gt = truth["sources"][name]
    assert (records, kept) == (gt["records"], gt["valid_documents"])
    expected = sorted((p["file"], p["record_index"], p["expect_drop_reason"]) for p in truth["planted"]
                      if p["source"] == name and p["stage"] == "ingest")
    assert sorted(drops) == expected
