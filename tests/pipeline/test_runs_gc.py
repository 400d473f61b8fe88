"""Superseded generations (issue 17 item 8): going back to an earlier config restores its output instead of
recomputing it, `tokenmill runs du` sizes live and superseded output, `tokenmill runs gc --keep N` deletes old
generations and nothing else. Also item 13: a change notice names the list element and key that changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import make_corpus
from tokenmill.cli import main as cli
from tokenmill.pipeline import runfolder, storage
from tokenmill.pipeline.config import load_config
from tokenmill.pipeline.generations import DELETING, GcError, collect, disk_usage, find_restorable
from tokenmill.pipeline.resume import diff_values, explain_change
from tokenmill.pipeline.runfolder import KEY_FILE
from tokenmill.pipeline.runner import run_pipeline


def with_fraction(corpus: Path, fraction: float, docs_per_shard: int = 25) -> Path:
    data = yaml.safe_load(corpus.read_text())
    data["sources"][0]["fraction"] = fraction
    data["ingest"]["docs_per_shard"] = docs_per_shard
    path = corpus.with_name(f"f{fraction}-d{docs_per_shard}.yaml")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_into(config_path: Path, output: Path):
    return run_pipeline(load_config(config_path).model_copy(update={"output": str(output)}))


def output_bytes(stage_dir: Path) -> dict[str, bytes]:
    """Every file a stage keeps (shards, dropped, manifest content, key), by path: what a restore must bring back."""
    out = {}
    for path in sorted(stage_dir.rglob("*")):
        rel = str(path.relative_to(stage_dir))
        if path.is_file():
            out[rel] = (json.dumps(json.loads(path.read_text())["content"]).encode() if path.name == "manifest.json"
                        else path.read_bytes())
    return out


def generation_names(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "_superseded").iterdir()) if (out / "_superseded").exists() else []


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.fixture
def corpus(tmp_path):
    return make_corpus(tmp_path / "corpus")


# ------------------------------------------------------------------------------------------ restore


@pytest.mark.ray
def test_going_back_to_an_earlier_config_restores_its_output(ray_cluster, corpus, tmp_path):
    out = tmp_path / "run"
    run_into(with_fraction(corpus, 0.6), out)
    original = output_bytes(out / "sample")
    assert any(k.startswith("shards/") for k in original)

    changed = run_into(with_fraction(corpus, 0.3), out)
    assert [r.status for r in changed] == ["up to date", "ran"]
    assert len(generation_names(out)) == 1
    recomputed_03 = output_bytes(out / "sample")
    assert recomputed_03 != original

    back = run_into(with_fraction(corpus, 0.6), out)
    assert [r.status for r in back] == ["up to date", "restored"]
    assert back[1].tasks_run == 0
    assert "restored from" in back[1].notes[0] and "fractions.en: 0.3 -> 0.6" in back[1].notes[0]
    assert output_bytes(out / "sample") == original  # the very bytes of the 0.6 run
    # The 0.6 output left its generation (now empty, removed); the 0.3 output went to a new one.
    gens = generation_names(out)
    assert len(gens) == 1
    moved = json.loads((out / "_superseded" / gens[0] / "sample" / KEY_FILE).read_text())
    assert moved["identity"]["fractions"]["en"] == 0.3
    assert output_bytes(out / "_superseded" / gens[0] / "sample") == recomputed_03
    logged = [json.loads(p.read_text()) for p in (out / "_logs").glob("*-sample-*.json")]
    assert "restored" in {r["status"] for r in logged}
    # The restored output is the current output from now on.
    assert [r.status for r in run_into(with_fraction(corpus, 0.6), out)] == ["up to date", "up to date"]


@pytest.mark.ray
def test_an_ingest_change_undone_restores_ingest_and_the_stages_after_it(ray_cluster, corpus, tmp_path):
    out = tmp_path / "run"
    run_into(with_fraction(corpus, 0.6, docs_per_shard=25), out)
    original = {s: output_bytes(out / s) for s in ("ingest", "sample")}
    assert [r.status for r in run_into(with_fraction(corpus, 0.6, docs_per_shard=7), out)] == ["ran", "ran"]
    back = run_into(with_fraction(corpus, 0.6, docs_per_shard=25), out)
    # ingest: its key changed back; sample: its folder was moved aside with ingest's, and came back the same way.
    assert [(r.stage, r.status, r.tasks_run) for r in back] == [("ingest", "restored", 0), ("sample", "restored", 0)]
    assert {s: output_bytes(out / s) for s in ("ingest", "sample")} == original


@pytest.mark.ray
def test_a_damaged_superseded_output_is_recomputed_not_restored(ray_cluster, corpus, tmp_path):
    out = tmp_path / "run"
    run_into(with_fraction(corpus, 0.6), out)
    original = output_bytes(out / "sample")
    run_into(with_fraction(corpus, 0.3), out)
    (gen,) = generation_names(out)
    victim = sorted((out / "_superseded" / gen / "sample" / "shards").glob("*.parquet"))[0]
    victim.unlink()  # e.g. a half-finished `rm`
    back = run_into(with_fraction(corpus, 0.6), out)
    assert back[1].status == "ran" and back[1].tasks_run > 0
    assert output_bytes(out / "sample") == original  # recomputed, deterministically the same


# ------------------------------------------------------------------------------------------ du and gc


def _three_generations(corpus: Path, out: Path) -> list[str]:
    """Live output at fraction 0.5; superseded 0.6, 0.3, 0.4 (oldest first)."""
    for fraction in (0.6, 0.3, 0.4, 0.5):
        run_into(with_fraction(corpus, fraction), out)
    gens = generation_names(out)
    assert len(gens) == 3
    return gens


@pytest.mark.ray
def test_runs_du_sizes_live_stages_and_each_superseded_generation(ray_cluster, corpus, tmp_path, capsys):
    out = tmp_path / "run"
    gens = _three_generations(corpus, out)
    assert cli(["runs", "du", str(out), "--json"]) == 0
    usage = json.loads(capsys.readouterr().out)
    live = {s["stage"]: s for s in usage["live"]["stages"]}
    assert set(live) == {"ingest", "sample"}
    for stage in ("ingest", "sample"):
        assert live[stage]["bytes"] == folder_size(out / stage) > 0
        assert live[stage]["files"] == sum(1 for p in (out / stage).rglob("*") if p.is_file())
    assert [g["name"] for g in usage["superseded"]] == gens
    for g in usage["superseded"]:
        (stage,) = g["stages"]
        assert stage["stage"] == "sample" and stage["complete"] and stage["ours"]
        assert stage["bytes"] == g["bytes"] == folder_size(out / "_superseded" / g["name"] / "sample")
    assert usage["total"] == folder_size(out)

    assert cli(["runs", "du", str(out)]) == 0
    table = capsys.readouterr().out
    for name in gens:
        assert name in table
    assert "live" in table and "ingest" in table


@pytest.mark.ray
def test_runs_gc_keeps_the_newest_generations_and_never_touches_the_live_output(ray_cluster, corpus, tmp_path, capsys):
    out = tmp_path / "run"
    gens = _three_generations(corpus, out)
    live = {s: output_bytes(out / s) for s in ("ingest", "sample")}
    # Something tokenmill did not make, in `_superseded/` and inside the oldest generation: gc leaves both.
    (out / "_superseded" / "my-notes.txt").write_text("keep me")
    (out / "_superseded" / gens[0] / "analysis.csv").write_text("a,b\n")

    assert cli(["runs", "gc", str(out), "--keep", "1", "--dry-run"]) == 0
    assert "would delete" in capsys.readouterr().out
    assert generation_names(out) == sorted(gens + ["my-notes.txt"])

    assert cli(["runs", "gc", str(out), "--keep", "1"]) == 0
    printed = capsys.readouterr().out
    assert gens[1] in printed and "deleted 1 generation" in printed
    assert generation_names(out) == sorted([gens[0], gens[2], "my-notes.txt"])
    assert (out / "_superseded" / gens[0] / "analysis.csv").read_text() == "a,b\n"
    assert (out / "_superseded" / gens[0] / "sample" / "manifest.json").exists()
    assert (out / "_superseded" / "my-notes.txt").read_text() == "keep me"
    assert {s: output_bytes(out / s) for s in ("ingest", "sample")} == live
    assert [r.status for r in run_into(with_fraction(corpus, 0.5), out)] == ["up to date", "up to date"]

    fs, root = storage.filesystem_for(str(out))
    result = collect(fs, root, keep=0)
    assert [g.name for g in result.deleted] == [gens[2]]
    assert sorted(g.name for g in result.left) == [gens[0], "my-notes.txt"]
    assert generation_names(out) == sorted([gens[0], "my-notes.txt"])
    assert {s: output_bytes(out / s) for s in ("ingest", "sample")} == live


@pytest.mark.ray
def test_runs_gc_is_refused_while_a_driver_holds_the_run_folder(ray_cluster, corpus, tmp_path, capsys):
    out = tmp_path / "run"
    run_into(with_fraction(corpus, 0.6), out)
    run_into(with_fraction(corpus, 0.3), out)
    gens = generation_names(out)
    fs, root = storage.filesystem_for(str(out))
    with runfolder.hold(fs, root):  # what `tokenmill run` holds from start to end
        assert cli(["runs", "gc", str(out), "--keep", "0"]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "in use by another tokenmill run" in err and "pid" in err
        with pytest.raises(runfolder.RunFolderLocked):
            collect(fs, root, keep=0)
        assert generation_names(out) == gens
    assert cli(["runs", "gc", str(out), "--keep", "0"]) == 0  # released: now it runs
    assert generation_names(out) == []


def test_gc_refuses_a_folder_tokenmill_did_not_make_and_a_negative_keep(tmp_path):
    mine = tmp_path / "mine"
    (mine / "_superseded" / "20260101T000000000000Z").mkdir(parents=True)
    (mine / "_superseded" / "20260101T000000000000Z" / "thesis.tex").write_text("x")
    fs, root = storage.filesystem_for(str(mine))
    with pytest.raises(GcError, match="not a tokenmill run folder"):
        collect(fs, root, keep=0)
    with pytest.raises(GcError, match="not a tokenmill run folder"):
        disk_usage(fs, root)
    assert (mine / "_superseded" / "20260101T000000000000Z" / "thesis.tex").exists()
    (mine / runfolder.ROOT_MARKER).write_text("{}")
    with pytest.raises(GcError, match="--keep -1"):
        collect(fs, root, keep=-1)


@pytest.mark.ray
def test_a_deletion_a_killed_gc_left_is_never_restored_and_is_finished(ray_cluster, corpus, tmp_path):
    out = tmp_path / "run"
    run_into(with_fraction(corpus, 0.6), out)
    run_into(with_fraction(corpus, 0.3), out)
    (gen,) = generation_names(out)
    key = json.loads((out / "_superseded" / gen / "sample" / KEY_FILE).read_text())["key"]
    fs, root = storage.filesystem_for(str(out))
    assert find_restorable(fs, root, "sample", key) is not None
    # A gc killed after renaming the generation, partway through deleting it.
    half = out / "_superseded" / (gen + DELETING)
    (out / "_superseded" / gen).rename(half)
    next((half / "sample" / "shards").glob("*.parquet")).unlink()
    assert find_restorable(fs, root, "sample", key) is None
    assert [g.deleting for g in disk_usage(fs, root).superseded] == [True]
    back = run_into(with_fraction(corpus, 0.6), out)
    assert back[1].status == "ran"
    result = collect(fs, root, keep=5)  # keeps complete generations; the half-deleted one goes anyway
    assert gen + DELETING in [g.name for g in result.deleted]
    assert not half.exists()


# ------------------------------------------------------------------------------------------ change notices


def test_a_change_inside_a_list_names_the_element_and_key():
    sources = [{"name": f"s{i}", "fraction": 0.5, "paths": [f"data/s{i}/{'x' * 60}/*.jsonl"] * 20} for i in range(8)]
    changed = [dict(s) for s in sources]
    changed[2] = {**changed[2], "fraction": 0.4}
    assert diff_values({"sources": sources}, {"sources": changed}) == ["sources[2].fraction: 0.5 -> 0.4"]

    inserted = sources[:3] + [{"name": "new", "fraction": 1.0}] + sources[3:]
    assert diff_values({"sources": sources}, {"sources": inserted}) == [
        "sources[3]: added ({'name': 'new', 'fraction': 1.0})"]
    (removed,) = diff_values({"sources": sources}, {"sources": sources[:1] + sources[2:]})
    assert removed.startswith("sources[1]: removed (was {'name': 's1'") and len(removed) < 250

    old = {"identity": {"config": {"overrides": sources}}, "key": {"input_hash": "h", "schema_version": 2}}
    everything = [{**s, "fraction": 0.1} for s in sources] + [{"name": f"t{i}"} for i in range(30)]
    key = {"input_hash": "h", "schema_version": 2}
    reasons = explain_change(old, {"config": {"overrides": everything}}, key)
    assert reasons[0] == "config.overrides[0].fraction: 0.5 -> 0.1"
    assert len(reasons) == 21 and reasons[-1].startswith("... and 18 more changed keys")
    assert len("; ".join(reasons)) < 3000


@pytest.mark.ray
def test_a_superseded_output_whose_manifest_points_outside_is_never_restored(ray_cluster, corpus, tmp_path, caplog):
    """A superseded manifest is read as every manifest is (`read_manifest`): one edited to name a shard outside its
    folder, under the right key, is not restored (it was moved back into place, and the run then stopped on it)."""
    out = tmp_path / "run"
    run_into(with_fraction(corpus, 0.6), out)
    run_into(with_fraction(corpus, 0.3), out)
    (gen,) = generation_names(out)
    stage = out / "_superseded" / gen / "sample"
    key = json.loads((stage / KEY_FILE).read_text())["key"]
    fs, root = storage.filesystem_for(str(out))
    assert find_restorable(fs, root, "sample", key) is not None
    manifest = json.loads((stage / "manifest.json").read_text())
    manifest["content"]["shards"][0]["path"] = "../../../outside.parquet"
    (stage / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level("WARNING", logger="tokenmill.pipeline.generations"):
        assert find_restorable(fs, root, "sample", key) is None
    assert "not restored" in caplog.text and "outside the run folder" in caplog.text and str(stage) in caplog.text


@pytest.mark.parametrize("inside", ["shards", "_work/commits"])
def test_a_superseded_output_with_a_symlink_below_it_stops_the_restore_naming_the_link(tmp_path, inside):
    """A superseded stage folder of tokenmill's (its marker) with a link at any depth below it: restoring it would
    read its key, manifest and files through the link, then move them into the live run folder. Refused, naming
    the link; what the link leads to is left as it was."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "theirs.parquet").write_bytes(b"someone's file")
    stage = tmp_path / "run" / "_superseded" / "20260101T000000000000Z" / "sample"
    stage.mkdir(parents=True)
    (stage / runfolder.STAGE_MARKER).write_text("")
    (stage / inside).parent.mkdir(parents=True, exist_ok=True)
    (stage / inside).symlink_to(elsewhere)
    fs, root = storage.filesystem_for(str(tmp_path / "run"))
    with pytest.raises(runfolder.RunFolderError, match=rf"sample/{inside} is a symlink to .*elsewhere"):
        find_restorable(fs, root, "sample", {"config_hash": "x"})
    assert [p.name for p in elsewhere.iterdir()] == ["theirs.parquet"]
