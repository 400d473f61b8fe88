"""`manifest diff` finds a text that changed under the same id from the shards' `text_hash` column, without Ray: two
stage folders written here through the pipeline's own shard writer (`split_and_write`) and manifest builder."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pytest

from tokenmill.cli import main as cli
from tokenmill.manifests.diff import EXCERPT_BEFORE, diff_runs, text_change
from tokenmill.pipeline.manifest import build_content
from tokenmill.config_base import StageConfig
from tokenmill.documents import TEXT_HASH, read_shard, shard_bytes
from tokenmill.pipeline.map_phase import split_and_write
from tokenmill.pipeline.contract import RunContext, Stage

LONG = "word " * 20


class Written(Stage):
    name = "clean"
    drop_reasons = ("too_short",)


class Folder:
    """What `split_and_write` needs of a task context: somewhere to write files under the stage folder."""

    def __init__(self, root: Path):
        self.root = root

    def write(self, relpath: str, data: bytes) -> None:
        (self.root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (self.root / relpath).write_bytes(data)


def write_stage(root: Path, shards: dict[str, list[tuple[str, str]]], drop_short: bool = True) -> Path:
    """A committed `clean` stage folder of source `web`: one shard per name, rows (id, text); texts under 4
    characters are dropped (`too_short`)."""
    stage = Written(StageConfig(), RunContext(seed=0, sources={}))
    entries = []
    for name, rows in shards.items():
        table = pa.table({"id": [r[0] for r in rows], "text": [r[1] for r in rows], "source": ["web"] * len(rows),
                          "subset": pa.nulls(len(rows), pa.string()), "meta": ["{}"] * len(rows)})
        reasons = pa.array(["too_short" if drop_short and len(r[1]) < 4 else None for r in rows], pa.string())
        entry = split_and_write(stage, Folder(root), name, "web", table, reasons)
        entries.append({**entry, "input": f"shards/{name}.parquet"})
    content = build_content("clean", {"config": {}, "seed": 0}, {"stage": "sample", "manifest_hash": "x"}, entries)
    (root / "manifest.json").write_text(json.dumps({"content": content, "run_info": {}}))
    return root


A_ROWS = {
    "web.0": [("d1", "Hello  world, " + LONG), ("d2", "unchanged " + LONG), ("d3", "gone later " + LONG)],
    "web.1": [("e1", "same in both " + LONG), ("e2", "same too " + LONG)],
}
B_ROWS = {
    "web.0": [("d1", "Hello world, " + LONG), ("d2", "unchanged " + LONG), ("d3", "no"), ("d4", "new " + LONG)],
    "web.1": A_ROWS["web.1"],
}


def test_a_changed_text_under_the_same_id_is_named_with_where_it_differs(tmp_path, capsys):
    a = write_stage(tmp_path / "a" / "clean", A_ROWS)
    b = write_stage(tmp_path / "b" / "clean", B_ROWS)
    # An unchanged shard (same content hash) is never read: its files may as well be absent.
    for side in (a, b):
        (side / "shards" / "web.1.parquet").unlink()

    result = diff_runs(str(a), str(b))
    [clean] = result["stages"]
    assert clean["status"] == "different" and not result["identical"]
    [row] = clean["documents"]
    assert (row["source"], row["removed"], row["added"], row["changed"]) == ("web", 1, 1, 1)
    assert [e["id"] for e in row["removed_examples"]] == ["d3"]
    assert row["removed_examples"][0]["other_run_drop_reason"] == "too_short"
    assert [e["id"] for e in row["added_examples"]] == ["d4"]
    assert row["changed_examples"] == [{"id": "d1", "position": 6, "start": 0,
                                        "a": {"chars": len(A_ROWS["web.0"][0][1]), "excerpt": A_ROWS["web.0"][0][1][:96]},
                                        "b": {"chars": len(B_ROWS["web.0"][0][1]), "excerpt": B_ROWS["web.0"][0][1][:96]}}]

    assert cli(["manifest", "diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "text changed (same id)" in out
    assert "~ web d1: text differs from character 6 (A 114 characters, B 113)" in out
    assert "A: Hello  world" in out and "B: Hello world" in out
    assert cli(["manifest", "diff", str(a), str(b), "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == result


def test_only_whitespace_changed_is_shown_escaped(tmp_path, capsys):
    a = write_stage(tmp_path / "a" / "clean", {"web.0": [("d1", "x" * 50 + "\r\nend " + LONG)]})
    b = write_stage(tmp_path / "b" / "clean", {"web.0": [("d1", "x" * 50 + "\nend " + LONG)]})
    [row] = diff_runs(str(a), str(b))["stages"][0]["documents"]
    [example] = row["changed_examples"]
    assert (example["position"], example["start"]) == (50, 50 - EXCERPT_BEFORE)
    assert cli(["manifest", "diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "A: ..." + "x" * EXCERPT_BEFORE + "\\r\\nend" in out and "B: ..." + "x" * EXCERPT_BEFORE + "\\nend" in out


def test_repeated_ids_count_once_and_equal_texts_are_not_changed(tmp_path):
    # `r` occurs twice in each run with the same two texts (in another order): unchanged. `s` occurs twice in B, once
    # with A's text and once with a new one: changed, counted once.
    a = write_stage(tmp_path / "a" / "clean", {"web.0": [("r", "one " + LONG), ("r", "two " + LONG), ("s", "s " + LONG),
                                                        ("t", "t " + LONG)]})
    b = write_stage(tmp_path / "b" / "clean", {"web.0": [("r", "two " + LONG), ("r", "one " + LONG), ("s", "s " + LONG),
                                                        ("s", "s2 " + LONG)]})
    [row] = diff_runs(str(a), str(b))["stages"][0]["documents"]
    assert (row["removed"], row["added"], row["changed"]) == (1, 0, 1)
    assert [e["id"] for e in row["changed_examples"]] == ["s"]


def test_shards_written_before_text_hash_are_hashed_from_their_text(tmp_path, caplog):
    a = write_stage(tmp_path / "a" / "clean", A_ROWS)
    b = write_stage(tmp_path / "b" / "clean", B_ROWS)
    for side in (a, b):  # as schema version 1 wrote them: no text_hash column
        for path in (side / "shards").glob("*.parquet"):
            path.write_bytes(shard_bytes(read_shard(str(path)).drop_columns([TEXT_HASH])))
    with caplog.at_level(logging.WARNING, logger="tokenmill.manifests.diff"):
        [row] = diff_runs(str(a), str(b))["stages"][0]["documents"]
    assert (row["removed"], row["added"], row["changed"]) == (1, 1, 1)
    assert "no text_hash column" in caplog.text


@pytest.mark.parametrize("a, b, position", [("abc", "abd", 2), ("abc", "abcd", 3), ("", "x", 0), ("é1", "é2", 1)])
def test_text_change_names_the_first_differing_character(a, b, position):
    change = text_change(a, b)
    assert change["position"] == position and change["start"] == 0
    assert (change["a"], change["b"]) == ({"chars": len(a), "excerpt": a}, {"chars": len(b), "excerpt": b})


def test_golden_manifests_show_a_changed_text_under_the_same_id(tmp_path):
    from tokenmill.manifests.golden import extract

    rows = {"web.0": [("d1", "Hello  world, " + LONG), ("d2", "unchanged " + LONG)]}
    write_stage(tmp_path / "a" / "clean", rows)
    write_stage(tmp_path / "b" / "clean", {"web.0": [("d1", "Hallo  world, " + LONG), rows["web.0"][1]]})
    old = write_stage(tmp_path / "old" / "clean", rows)
    for path in (old / "shards").glob("*.parquet"):  # schema version 1: the digest is the same, from the text
        path.write_bytes(shard_bytes(read_shard(str(path)).drop_columns([TEXT_HASH])))
    a, b, c = (extract(tmp_path / run)["clean"]["by_source"]["web"] for run in ("a", "b", "old"))
    assert (a["kept_ids"], a["docs_out"], a["bytes_out"]) == (b["kept_ids"], b["docs_out"], b["bytes_out"])
    assert a["kept_texts"] != b["kept_texts"]
    assert a["kept_texts"] == c["kept_texts"]
