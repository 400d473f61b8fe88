"""The metadata filter stage: its predicates, and a real pipeline run on real Pushshift dumps."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import SHARED_DATA
from tokenmill.pipeline.config import load_config
from tokenmill.pipeline.contract import RunContext
from tokenmill.pipeline.registry import stage_classes
from tokenmill.pipeline.runner import run_pipeline
from tokenmill.stages.metadata_filter import MetadataFilterConfig, MetadataFilterStage, MetadataRule, host

REDDIT = SHARED_DATA / "reddit"
DUMPS = ("pushshift_test_comments.ndjson", "pushshift_test_submissions.ndjson")
RUN = RunContext(seed=0, sources={})


def table(rows):
    return pa.table({"id": [r["id"] for r in rows], "text": [r.get("text", "some text") for r in rows],
                     "source": [r.get("source", "reddit") for r in rows],
                     "subset": pa.array([r.get("subset") for r in rows], pa.string()),
                     "meta": [json.dumps(r.get("meta", {})) for r in rows]})


def reasons(rules, rows):
    stage = MetadataFilterStage(MetadataFilterConfig(rules=rules), RUN)
    return stage.process(table(rows), {}).drop_reason.to_pylist()


def _case(rule: dict, meta: dict):
    """An input for `tests/stages/test_drop_reasons.py`: one document under one rule; the reasons it gets."""
    return lambda tmp: reasons([rule], [{"id": "a", "meta": meta}])


DROP_REASON_CASES = {"metadata_filter": {
    "below_min": _case({"field": "score", "min": 2}, {"score": 1}),
    "above_max": _case({"field": "score", "max": 2}, {"score": 3}),
    "not_a_number": _case({"field": "score", "min": 2}, {"score": "high"}),
    "value_not_allowed": _case({"field": "lang", "allowed": ["en"]}, {"lang": "fr"}),
    "value_blocked": _case({"field": "url", "domain": True, "blocked": ["imgur.com"]}, {"url": "https://i.imgur.com/x"}),
    "field_missing": _case({"field": "score", "missing": "drop"}, {}),
}}
"""Every drop reason of the stage, reached by an input (collected by the generic drop-reason test)."""


def test_registers_itself_after_sample_and_before_clean():
    order = list(stage_classes())
    assert order.index("sample") < order.index("metadata_filter") < order.index("clean")


def test_numeric_bounds_per_source_and_subset():
    rows = [{"id": "a", "meta": {"score": 1}}, {"id": "b", "meta": {"score": 5}}, {"id": "c", "meta": {"score": "x"}},
            {"id": "d", "meta": {}}, {"id": "e", "source": "web", "meta": {"score": 0}},
            {"id": "f", "subset": "nba", "meta": {"score": 1}}]
    assert reasons([{"field": "score", "source": "reddit", "min": 2, "max": 100}], rows) == \
        ["below_min", None, "not_a_number", None, None, "below_min"]
    assert reasons([{"field": "score", "subset": "nba", "min": 2}], rows) == [None] * 5 + ["below_min"]
    assert reasons([{"field": "score", "missing": "drop"}], rows)[3] == "field_missing"
    assert reasons([{"field": "score", "max": 3}], rows)[1] == "above_max"


def test_domains_match_subdomains_and_bare_hosts():
    assert host("https://i.IMGUR.com/x.png") == "i.imgur.com" and host("v.redd.it") == "v.redd.it"
    assert host("self.AskReddit") == "self.askreddit" and host("") is None and host(3) is None
    rows = [{"id": "a", "meta": {"url": "https://i.imgur.com/x.png"}}, {"id": "b", "meta": {"url": "https://notimgur.com"}},
            {"id": "c", "meta": {"url": "https://example.org/a"}}, {"id": "d", "meta": {}}]
    assert reasons([{"field": "url", "domain": True, "blocked": ["imgur.com"]}], rows) == ["value_blocked", None, None, None]
    assert reasons([{"field": "url", "domain": True, "allowed": ["example.org"]}], rows) == \
        ["value_not_allowed", "value_not_allowed", None, None]


def test_values_length_and_the_first_failing_rule_names_the_reason():
    rows = [{"id": "a", "text": "short", "meta": {"over_18": True}}, {"id": "b", "text": "long enough text",
                                                                       "meta": {"over_18": 1}}]
    assert reasons([{"field": "over_18", "blocked": [True]}], rows) == ["value_blocked", None]  # 1 is not true
    assert reasons([{"field": "text_chars", "min": 10}, {"field": "over_18", "blocked": [True]}], rows) == \
        ["below_min", None]
    assert reasons([{"field": "id", "allowed": ["b"]}], rows) == ["value_not_allowed", None]


def test_a_rule_without_a_predicate_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="rule on 'score' has no predicate"):
        MetadataRule(field="score")
    with pytest.raises(ValueError, match="min \\(5.0\\) is above max"):
        MetadataRule(field="score", min=5, max=1)
    with pytest.raises(ValueError, match="rule on 'url': domain applies to allowed and blocked"):
        MetadataRule(field="url", domain=True, missing="drop")


def test_an_unknown_key_under_the_stage_is_named(tmp_path):
    from tokenmill.errors import ConfigError
    from tokenmill.pipeline.config import parse_config

    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    data = {"output": "out", "sources": [{"name": "a", "format": "jsonl", "paths": ["a.jsonl"]}],
            "stages": {"metadata_filter": {"rules": [{"field": "score", "min": 1, "mni": 2}]}}}
    with pytest.raises(ConfigError, match=r"stages.metadata_filter.rules\[0\].mni: unknown key"):
        parse_config(data, tmp_path)


def _expected(meta: dict, blocked: tuple[str, ...]) -> str | None:
    """The reason the rules of the run below must give a document, decided here from its meta alone."""
    if meta["score"] < 2:
        return "below_min"
    domain = (meta.get("domain") or "").lower()
    return "value_blocked" if any(domain == d or domain.endswith("." + d) for d in blocked) else None


@pytest.mark.ray
def test_a_real_run_on_pushshift_dumps(ray_cluster, tmp_path):
    if not all((REDDIT / name).is_file() for name in DUMPS):
        pytest.skip(f"Pushshift samples not found under {REDDIT} (they sit beside the repository in CI)")
    config_path = tmp_path / "run.yaml"
    rules = [{"source": "reddit", "field": "score", "min": 2},
             {"source": "reddit", "field": "domain", "domain": True, "blocked": ["redd.it", "redgifs.com"]}]
    config_path.write_text(yaml.safe_dump({
        "output": "out", "seed": 7,
        "sources": [{"name": "reddit", "format": "reddit", "paths": [str(REDDIT / name) for name in DUMPS]}],
        "stages": {"sample": {}, "metadata_filter": {"rules": rules}},
    }, sort_keys=False))
    config = load_config(config_path)
    reports = run_pipeline(config)
    assert [r.stage for r in reports] == ["ingest", "sample", "metadata_filter"]
    root = Path(config.output_dir)
    manifest = json.loads((root / "metadata_filter" / "manifest.json").read_text())["content"]

    def rows(folder):
        tables = [pq.read_table(p) for p in sorted((root / folder).glob("*.parquet"))]
        return pa.concat_tables(tables).to_pylist() if tables else []

    received = rows("sample/shards")
    assert len(received) > 40 and all("score" in json.loads(r["meta"]) for r in received)  # ingest keeps the score
    expected = {r["id"]: _expected(json.loads(r["meta"]), ("redd.it", "redgifs.com")) for r in received}
    counts = Counter(v for v in expected.values() if v is not None)
    assert counts["below_min"] > 10 and counts["value_blocked"] >= 2  # the data exercise both rules
    assert manifest["totals"]["drops"] == dict(counts)
    assert manifest["report"]["rules"][0]["dropped"] == {"reddit": counts["below_min"]}
    kept = rows("metadata_filter/shards")
    dropped = rows("metadata_filter/dropped")
    assert sorted(r["id"] for r in kept) == sorted(k for k, v in expected.items() if v is None)
    assert {r["id"]: r["drop_reason"] for r in dropped} == {k: v for k, v in expected.items() if v is not None}
