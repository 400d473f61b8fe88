"""Nothing silent (issue 17 item 13): a trained tokenizer smaller than asked and a tokenize run with no documents are
warned in the log, the manifest's report and the run summary; a file named `[x].jsonl` is shown with its brackets."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tokenmill import cli

pytestmark = pytest.mark.ray


def _run(tmp_path: Path, records: list[str], capsys, caplog) -> tuple[dict, str]:
    (tmp_path / "[x].jsonl").write_text("".join(r + "\n" for r in records))
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps({
        "output": "run", "sources": [{"name": "a", "format": "jsonl", "paths": ["[[]x].jsonl"]}],
        "stages": {"tokenize": {"tokenizer": {"train": {"vocab_size": 4096, "sample_docs": 100}}}}}))
    with caplog.at_level(logging.WARNING, logger="tokenmill"):
        assert cli.main(["run", str(config)]) == 0
    manifest = json.loads((tmp_path / "run" / "tokenize" / "manifest.json").read_text())
    return manifest["content"]["report"], capsys.readouterr().out


def test_small_trained_vocabulary_is_warned_and_bracketed_file_names_shown(ray_cluster, tmp_path, capsys, caplog):
    records = [json.dumps({"text": f"a short document number {i}"}) for i in range(20)] + ["{not json"]
    report, out = _run(tmp_path, records, capsys, caplog)
    (warning,) = report["warnings"]
    assert "of the 4,096 asked" in warning and "tokenizer.train.vocab_size" in warning
    assert any("of the 4,096 asked" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    flat = " ".join(out.split())
    assert "warning: the trained tokenizer has" in flat
    assert "a:[x].jsonl" in flat  # the bad record's message names the file (rich markup used to eat `[x]`)


def test_a_tokenize_run_without_documents_is_warned(ray_cluster, tmp_path, capsys, caplog):
    report, out = _run(tmp_path, [json.dumps({"text": "   "}), json.dumps({"body": "no text field"})], capsys, caplog)
    assert any(w.startswith("no documents to tokenize") for w in report["warnings"])
    assert any("no documents to tokenize" in r.getMessage() for r in caplog.records)
    assert "warning: no documents to tokenize" in " ".join(out.split())
