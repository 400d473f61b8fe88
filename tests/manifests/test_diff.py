"""`tokenmill manifest diff` on real runs: a twin is identical; one changed config key shows exactly that key, the
drops it changed and the documents it removed, checked against the ids in the shards."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tokenmill.demo import write_demo_corpus
from tokenmill.cli import main as cli
from tokenmill.errors import TokenmillError
from tokenmill.manifests.diff import config_keys, diff_runs
from tokenmill.pipeline.config import load_config
from tokenmill.pipeline.runner import run_pipeline

pytestmark = pytest.mark.ray

MIN_WORDS_KEY = "stages.clean.quality.gopher_quality.min_doc_words"


def write_config(root: Path, name: str, edit=None) -> Path:
    """The demo config with only sample and clean (fast on 2 cores), edited by `edit(cfg)`."""
    cfg = yaml.safe_load((root / "demo.yaml").read_text())
    cfg["stages"] = {k: v for k, v in cfg["stages"].items() if k in ("sample", "clean")}
    if edit:
        edit(cfg)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_into(config_path: Path, output: Path) -> Path:
    run_pipeline(load_config(config_path).model_copy(update={"output": str(output)}))
    return output


def kept_texts(run: Path, stage: str) -> dict[str, dict[str, str]]:
    """Every kept text by id per source, read from the shards themselves."""
    out: dict[str, dict[str, str]] = {}
    for path in sorted((run / stage / "shards").glob("*.parquet")):
        for row in pq.read_table(path, columns=["id", "source", "text"]).to_pylist():
            out.setdefault(row["source"], {})[row["id"]] = row["text"]
    return out


def kept_ids(run: Path, stage: str) -> dict[str, set[str]]:
    """Every kept id per source, read from the shards themselves."""
    out: dict[str, set[str]] = {}
    for path in sorted((run / stage / "shards").glob("*.parquet")):
        table = pq.read_table(path, columns=["id", "source"]).to_pylist()
        for row in table:
            out.setdefault(row["source"], set()).add(row["id"])
    return out


def drop_reasons(run: Path, stage: str) -> dict[str, str]:
    out = {}
    for path in sorted((run / stage / "dropped").glob("*.parquet")):
        out.update({r["id"]: r["drop_reason"] for r in pq.read_table(path, columns=["id", "drop_reason"]).to_pylist()})
    return out


@pytest.fixture(scope="module")
def runs(ray_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("diff")
    corpus = root / "corpus"
    write_demo_corpus(corpus, docs_per_source=40)
    base = write_config(corpus, "base")

    def stricter(cfg):
        cfg["stages"]["clean"].setdefault("quality", {})["gopher_quality"] = {"min_doc_words": 200}

    def other_placeholder(cfg):
        cfg["stages"]["clean"]["pii"] = {"email_placeholder": "[email]"}

    def fewer_web(cfg):
        for source in cfg["sources"]:
            if source["name"] == "web_en":
                source["fraction"] = 0.25

    return {
        "a": run_into(base, root / "a"),
        "twin": run_into(base, root / "twin"),
        "strict": run_into(write_config(corpus, "strict", stricter), root / "strict"),
        "fraction": run_into(write_config(corpus, "fraction", fewer_web), root / "fraction"),
        "placeholder": run_into(write_config(corpus, "placeholder", other_placeholder), root / "placeholder"),
        "root": root,
    }


def stage(result: dict, name: str) -> dict:
    return next(s for s in result["stages"] if s["stage"] == name)


def check_documents(result_stage: dict, a: Path, b: Path) -> None:
    """Removed and added per source are exactly the set differences of the two runs' kept ids; changed, exactly the
    ids kept in both whose texts differ."""
    texts_a, texts_b = kept_texts(a, result_stage["stage"]), kept_texts(b, result_stage["stage"])
    expected = {}
    for source in set(texts_a) | set(texts_b):
        ta, tb = texts_a.get(source, {}), texts_b.get(source, {})
        removed, added = set(ta) - set(tb), set(tb) - set(ta)
        changed = {i for i in set(ta) & set(tb) if ta[i] != tb[i]}
        if removed or added or changed:
            expected[source] = (removed, added, changed)
    got = {r["source"]: r for r in result_stage["documents"]}
    assert set(got) == set(expected)
    for source, (removed, added, changed) in expected.items():
        assert (got[source]["removed"], got[source]["added"], got[source]["changed"]) == \
            (len(removed), len(added), len(changed))
        assert {e["id"] for e in got[source]["changed_examples"]} <= changed
        assert len(got[source]["changed_examples"]) == min(3, len(changed))
        for e in got[source]["changed_examples"]:
            x, y = texts_a[source][e["id"]], texts_b[source][e["id"]]
            assert x[:e["position"]] == y[:e["position"]] and x[e["position"]:e["position"] + 1] != y[e["position"]:e["position"] + 1]
            assert (e["a"]["chars"], e["b"]["chars"]) == (len(x), len(y))
            assert x[e["start"]:].startswith(e["a"]["excerpt"]) and y[e["start"]:].startswith(e["b"]["excerpt"])
            assert e["a"]["excerpt"] != e["b"]["excerpt"]
        assert {e["id"] for e in got[source]["removed_examples"]} <= removed
        assert {e["id"] for e in got[source]["added_examples"]} <= added
        assert len(got[source]["removed_examples"]) == min(3, len(removed))
        assert all(e["preview"] for e in got[source]["removed_examples"] + got[source]["added_examples"])


def test_twin_run_is_identical(runs, capsys):
    result = diff_runs(str(runs["a"]), str(runs["twin"]))
    assert result["identical"]
    assert [s["stage"] for s in result["stages"]] == ["ingest", "sample", "clean"]
    for s in result["stages"]:
        assert s["status"] == "identical"
        assert s["config"] == [] and s["documents"] == [] and not any(s["shards"].values())
        assert all(not any(r["delta"].values()) for r in s["by_source"])
    assert cli(["manifest", "diff", str(runs["a"]), str(runs["twin"])]) == 0
    capsys.readouterr()
    assert cli(["manifest", "diff", str(runs["a"]), str(runs["twin"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["identical"] is True


def test_clean_threshold_shows_the_key_the_drops_and_the_documents(runs, capsys):
    a, b = runs["a"], runs["strict"]
    result = diff_runs(str(a), str(b))
    assert not result["identical"]
    assert [s["status"] for s in result["stages"]] == ["identical", "identical", "different"]
    clean = stage(result, "clean")
    assert clean["config"] == [{"key": MIN_WORDS_KEY, "a": 50, "b": 200, "change": "changed"}]
    assert not clean["input"]["changed"]

    # Drops: every (source, reason) pair the manifests disagree on, with the right numbers.
    ma = json.loads((a / "clean" / "manifest.json").read_text())["content"]["by_source"]
    mb = json.loads((b / "clean" / "manifest.json").read_text())["content"]["by_source"]
    rows = {(r["source"], r["reason"]): r for r in clean["drops"]}
    for source in ma:
        for reason in set(ma[source]["drops"]) | set(mb[source]["drops"]):
            x, y = ma[source]["drops"].get(reason, 0), mb[source]["drops"].get(reason, 0)
            assert (rows[source, reason]["a"], rows[source, reason]["b"], rows[source, reason]["delta"]) == (x, y, y - x)
    assert any(r["reason"] == "too_few_words" and r["delta"] > 0 for r in clean["drops"])
    assert sum(r["delta"]["docs_out"] for r in clean["by_source"] if r["subset"] is None) == clean["totals"]["delta"]["docs_out"] < 0

    # Documents: the removed ones are exactly those kept in A and not in B; B dropped each for a reason.
    check_documents(clean, a, b)
    assert all(r["added"] == 0 for r in clean["documents"])
    reasons_b = drop_reasons(b, "clean")
    for r in clean["documents"]:
        for e in r["removed_examples"]:
            assert e["other_run_drop_reason"] == reasons_b[e["id"]]
    changed = {s["path"] for s in clean["shards"]["changed"]}
    assert changed and changed == {
        s["path"] for s in json.loads((a / "clean" / "manifest.json").read_text())["content"]["shards"]
        if s["docs_out"] != next(t for t in json.loads((b / "clean" / "manifest.json").read_text())["content"]["shards"]
                                 if t["path"] == s["path"])["docs_out"]}

    assert cli(["manifest", "diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert MIN_WORDS_KEY in out and "too_few_words" in out
    assert cli(["manifest", "diff", str(a), str(b), "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == result


def test_source_fraction_shows_the_key_and_the_sampled_out_documents(runs, capsys):
    a, b = runs["a"], runs["fraction"]
    result = diff_runs(str(a), str(b))
    sample, clean = stage(result, "sample"), stage(result, "clean")
    assert stage(result, "ingest")["status"] == "identical"
    assert sample["config"] == [{"key": "sources.web_en.fraction", "a": 1.0, "b": 0.25, "change": "changed"}]
    assert clean["config"] == [] and clean["input"]["changed"]
    [drop] = [r for r in sample["drops"] if r["delta"]]
    assert (drop["source"], drop["reason"], drop["a"]) == ("web_en", "sampled_out", 0) and drop["b"] > 0
    for s in (sample, clean):
        check_documents(s, a, b)
        assert [r["source"] for r in s["documents"]] == ["web_en"]
    assert {e["other_run_drop_reason"] for e in sample["documents"][0]["removed_examples"]} == {"sampled_out"}
    assert sample["documents"][0]["removed"] == drop["b"]

    # Two manifests of one stage compare that stage alone.
    single = diff_runs(str(a / "sample" / "manifest.json"), str(b / "sample"))
    assert [s["stage"] for s in single["stages"]] == ["sample"]
    assert single["stages"][0]["config"] == sample["config"]
    assert cli(["manifest", "diff", str(a / "sample" / "manifest.json"), str(b / "sample"), "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == single


def test_text_changed_under_the_same_id_is_reported(runs, capsys):
    """Another e-mail placeholder: the same documents are kept under the same ids, in the same numbers; only the texts
    of those that held an address differ. Before text hashes, the diff named no document here."""
    a, b = runs["a"], runs["placeholder"]
    result = diff_runs(str(a), str(b))
    assert [s["status"] for s in result["stages"]] == ["identical", "identical", "different"]
    clean = stage(result, "clean")
    assert clean["config"] == [{"key": "stages.clean.pii.email_placeholder", "a": "<EMAIL>", "b": "[email]",
                                "change": "changed"}]
    # Nothing a count shows: same documents and bytes in and out (both placeholders are 7 characters), same drops.
    assert not any(v for r in clean["by_source"] for v in r["delta"].values())
    assert all(r["delta"] == 0 for r in clean["drops"])
    assert clean["shards"]["changed"] and all(s["a_docs"] == s["b_docs"] for s in clean["shards"]["changed"])
    check_documents(clean, a, b)
    changed = {r["source"]: r for r in clean["documents"] if r["changed"]}
    assert changed, "no document's text changed under its id: the planted e-mail addresses did not reach the kept documents"
    assert all(r["removed"] == r["added"] == 0 for r in clean["documents"])
    assert all("<EMAIL>" in e["a"]["excerpt"] and "[email]" in e["b"]["excerpt"]
               for r in changed.values() for e in r["changed_examples"])
    example = next(iter(changed.values()))["changed_examples"][0]

    assert cli(["manifest", "diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "text changed" in out and f"~ {next(iter(changed))} {example['id']}: text differs from character " \
        f"{example['position']:,}" in out
    assert cli(["manifest", "diff", str(a), str(b), "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == result


def test_stage_in_one_run_only_and_user_errors(runs, capsys):
    partial = runs["root"] / "partial"
    shutil.copytree(runs["twin"], partial)
    shutil.rmtree(partial / "clean")
    result = diff_runs(str(runs["a"]), str(partial))
    assert [(s["stage"], s["status"]) for s in result["stages"]] == [
        ("ingest", "identical"), ("sample", "identical"), ("clean", "only in a")]
    assert not result["identical"]
    assert cli(["manifest", "diff", str(runs["a"]), str(partial)]) == 1
    assert "only in a" in capsys.readouterr().out

    with pytest.raises(TokenmillError, match="no such file"):
        diff_runs(str(runs["a"]), str(runs["root"] / "nope"))
    with pytest.raises(TokenmillError, match="no completed 'clean' stage"):
        diff_runs(str(runs["a"] / "clean" / "manifest.json"), str(partial))
    with pytest.raises(TokenmillError, match="no stage manifests"):
        diff_runs(str(runs["a"]), str(runs["root"] / "corpus" / "web_en"))
    assert cli(["manifest", "diff", str(runs["a"]), str(runs["root"] / "nope"), "--json"]) == 2
    assert capsys.readouterr().out == ""


def test_config_keys_are_named_as_in_the_config_file():
    identity = {"config": {"quality": {"gopher_quality": {"min_doc_words": 50}}, "overrides": [{"source": "x"}],
                           "stop": ["a", "b"]}, "seed": 1, "fractions": {"web": 0.5}, "bands": 9}
    assert config_keys("clean", identity) == {
        "stages.clean.quality.gopher_quality.min_doc_words": 50, "stages.clean.overrides[0].source": "x",
        "stages.clean.stop": ["a", "b"], "seed": 1, "sources.web.fraction": 0.5, "clean.bands": 9}
    assert config_keys("ingest", {"config": {"docs_per_shard": 10}, "sources": {"web": {"format": "jsonl"}}}) == {
        "ingest.docs_per_shard": 10, "sources.web.format": "jsonl"}


def test_report_changes_name_the_keys():
    from tokenmill.manifests.diff import report_changes

    a = {"index": {"ngrams": 10, "seconds": 0.5}, "summary": ["x"]}
    b = {"index": {"ngrams": 12}, "summary": ["x"], "hits": 3}
    assert report_changes(a, b) == [
        {"key": "report.hits", "a": None, "b": 3, "change": "added"},
        {"key": "report.index.ngrams", "a": 10, "b": 12, "change": "changed"},
        {"key": "report.index.seconds", "a": 0.5, "b": None, "change": "removed"},
    ]
    assert report_changes(a, a) == []
