"""The polars comparison of kept shards (`manifests.kept`) gives what a plain-Python reading of the shards gives, on two
runs with planted differences: ids in one run only, repeated ids, texts changed under the same id, shards with the same
content in both runs, a shard written before `text_hash`, and the ids split over several passes."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.manifests.diff import diff_runs, text_change
from tokenmill.manifests.kept import differences, scan_kept
from tokenmill.config_base import StageConfig
from tokenmill.pipeline.contract import RunContext
from tokenmill.documents import TEXT_HASH, read_shard, shard_bytes
from tokenmill.pipeline.manifest import build_content
from tokenmill.pipeline.map_phase import split_and_write
from tokenmill.pipeline import storage
from tests.manifests.test_diff_text import Folder, Written

SOURCES = ("books", "web", "wiki")
SHARDS = 4


def write_stage(root: Path, shards: dict[str, list[tuple[str, str]]]) -> Path:
    """A `clean` stage folder, one shard per name `<source>.<n>`, rows (id, text), all kept."""
    stage = Written(StageConfig(), RunContext(seed=0, sources={}))
    entries = []
    for name, rows in sorted(shards.items()):
        source = name.split(".")[0]
        table = pa.table({"id": [r[0] for r in rows], "text": [r[1] for r in rows], "source": [source] * len(rows),
                          "subset": pa.nulls(len(rows), pa.string()), "meta": ["{}"] * len(rows)})
        entries.append(split_and_write(stage, Folder(root), name, source, table, pa.nulls(len(rows), pa.string())))
    content = build_content("clean", {"config": {}, "seed": 0}, {"stage": "sample", "manifest_hash": "x"}, entries)
    (root / "manifest.json").write_text(json.dumps({"content": content, "run_info": {}}))
    return root


def planted_runs(seed: int = 0) -> tuple[dict, dict]:
    """Shards of runs A and B: mostly the same rows, with every kind of difference planted at random."""
    rng = random.Random(seed)
    original = {f"{source}.{n}": [(f"{source}-{n}-{i}", f"text {i} of {source}.{n} " + "x" * rng.randint(0, 40))
                                  for i in range(300)] for source in SOURCES for n in range(SHARDS)}
    a = {name: list(rows) for name, rows in original.items()}
    b = {name: list(rows) for name, rows in original.items()}
    for name, rows in original.items():
        source, n = name.split(".")[0], int(name.split(".")[1])
        if n == 0:
            continue  # the same content in both runs: never read
        for i in rng.sample(range(300), 60):
            doc_id, text = rows[i]
            kind = rng.choice(["removed", "added", "edited", "repeated", "repeated_edit", "swapped"])
            if kind == "removed":
                b[name].remove(rows[i])
            elif kind == "added":
                a[name].remove(rows[i])
            elif kind == "edited":
                b[name][b[name].index(rows[i])] = (doc_id, text[:rng.randint(0, len(text))] + "!")
            elif kind == "repeated":  # the same id twice in both runs, same texts: not changed
                a[name].append((doc_id, text + " second"))
                b[name].insert(0, (doc_id, text + " second"))
            elif kind == "repeated_edit":  # twice in B, once with A's text: changed
                b[name].append((doc_id, text + " again"))
            else:  # moved to another shard of the same source: not changed
                b[name].remove(rows[i])
                b[f"{source}.{n % (SHARDS - 1) + 1}"].append(rows[i])
        a[name].append((f"{source}-repeat-{n}", "once"))  # an id kept twice in A only: two removed rows
        a[name].append((f"{source}-repeat-{n}", "twice"))
    return a, b


def reference(a: dict, b: dict, examples: int = 3) -> list[dict]:
    """What `document_changes` must give, from the rows themselves in plain Python (shards in path order)."""
    out = []
    for source in SOURCES:
        rows_a = [r for name in sorted(a) if name.startswith(source + ".") for r in a[name]]
        rows_b = [r for name in sorted(b) if name.startswith(source + ".") for r in b[name]]
        ids_a, ids_b = {i for i, _ in rows_a}, {i for i, _ in rows_b}
        texts_a: dict[str, set] = {}
        texts_b: dict[str, set] = {}
        first_a: dict[str, str] = {}
        first_b: dict[str, str] = {}
        for rows, texts, first in ((rows_a, texts_a, first_a), (rows_b, texts_b, first_b)):
            for i, t in rows:
                texts.setdefault(i, set()).add(t)
                first.setdefault(i, t)
        removed = [i for i, _ in rows_a if i not in ids_b]
        added = [i for i, _ in rows_b if i not in ids_a]
        changed = [i for i in dict.fromkeys(i for i, _ in rows_a) if i in ids_b and texts_a[i] != texts_b[i]]
        if removed or added or changed:
            out.append({"source": source, "removed": len(removed), "added": len(added), "changed": len(changed),
                        "removed_examples": removed[:examples], "added_examples": added[:examples],
                        "changed_examples": [{"id": i, **text_change(first_a[i], first_b[i])}
                                             for i in changed[:examples]]})
    return out


def test_the_polars_comparison_matches_a_plain_python_reading(tmp_path):
    a, b = planted_runs()
    run_a, run_b = write_stage(tmp_path / "a" / "clean", a), write_stage(tmp_path / "b" / "clean", b)
    # A shard as schema version 1 wrote it (no text_hash): its texts are hashed instead.
    old = run_b / "shards" / "web.2.parquet"
    old.write_bytes(shard_bytes(read_shard(str(old)).drop_columns([TEXT_HASH])))
    expected = reference(a, b)
    assert {r["source"] for r in expected} == set(SOURCES)
    assert all(r["removed"] and r["added"] and r["changed"] for r in expected)

    [stage] = diff_runs(str(run_a), str(run_b))["stages"]
    got = [{**r, "removed_examples": [e["id"] for e in r["removed_examples"]],
            "added_examples": [e["id"] for e in r["added_examples"]]} for r in stage["documents"]]
    assert got == expected


@pytest.mark.parametrize("passes", [1, 3, 16])
def test_passes_split_the_ids_without_changing_the_result(tmp_path, passes):
    a, b = planted_runs(seed=1)
    run_a, run_b = write_stage(tmp_path / "a", a), write_stage(tmp_path / "b", b)
    fs = storage.filesystem_for(str(run_a))[0]
    for source in [r["source"] for r in reference(a, b)]:
        entries_a = [e for e in json.loads((run_a / "manifest.json").read_text())["content"]["shards"]
                     if e["source"] == source]
        entries_b = [e for e in json.loads((run_b / "manifest.json").read_text())["content"]["shards"]
                     if e["source"] == source]
        kept_a, kept_b = scan_kept(fs, str(run_a), entries_a), scan_kept(fs, str(run_b), entries_b)
        pass_bytes = -(-max(kept_a.id_bytes, kept_b.id_bytes) // passes)
        found = differences(kept_a, kept_b, examples=1000, pass_bytes=pass_bytes)
        [want] = [r for r in reference(a, b, examples=1000) if r["source"] == source]
        assert (found.removed, found.added, found.changed) == (want["removed"], want["added"], want["changed"])
        assert [i for i, _ in found.removed_first] == want["removed_examples"]
        assert [i for i, _ in found.added_first] == want["added_examples"]
        assert [i for i, _, _ in found.changed_first] == [e["id"] for e in want["changed_examples"]]
        # Each `at` names the row's shard: the id is in the shard `shard_of` gives.
        for i, at, at_b in found.changed_first[:20]:
            for kept, row_at, run in ((kept_a, at, run_a), (kept_b, at_b, run_b)):
                shard = pq.read_table(run / kept.shard_of(row_at)["path"], columns=["id"]).column("id").to_pylist()
                assert i in shard
