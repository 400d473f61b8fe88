"""The jsonl reader on real samples from ../shared/data (skipped where they are absent)."""

from __future__ import annotations

from tokenmill.sources.config import SourceConfig
from tokenmill.readers.jsonl import read_jsonl


def test_pile_zst_with_ascii_escapes(shared_data):
    src = SourceConfig(name="pile", format="jsonl", paths=["x"], subset_field="meta.pile_set_name")
    records = list(read_jsonl(str(shared_data / "pile" / "the_pile_hf_dummy_train00.jsonl.zst"), src, "pile"))
    assert len(records) == 1 and records[0].drop is None
    assert records[0].subset == "Pile-CC" and len(records[0].text) == 13_274
    assert "\\u" not in records[0].text  # \uXXXX escapes decoded by the JSON parser, not left in


def test_dolma_cc_gz_empty_texts_and_line_separators(shared_data):
    src = SourceConfig(name="cc", format="jsonl", paths=["x"], id_field="id")
    path = shared_data / "commoncrawl" / "dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz"
    records = list(read_jsonl(str(path), src, "cc"))
    assert len(records) == 697
    assert sum(r.drop == "empty_text" for r in records) == 27
    assert all(r.drop in (None, "empty_text") for r in records)
    # A raw U+2028 sits inside one JSON string: splitting on it (str.splitlines) would break that record.
    assert sum("\u2028" in r.text for r in records) == 1
