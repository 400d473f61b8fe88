"""The clean filter contract: the base class keeps the first reason, counts, refuses undeclared reasons; the stage's
declarations derive from its filters; per-source and per-subset overrides reach every filter's settings."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from tokenmill.sources.config import SourceConfig
from tokenmill.pipeline.contract import RunContext
from tokenmill.stages.clean.chain import Chain
from tokenmill.stages.clean.config import CleanConfig, CleanOverride
from tokenmill.stages.clean.filter import Batch, Filter, Setting
from tokenmill.stages.clean.stage import CleanStage

PROSE = ("The committee met on Tuesday to discuss the new budget for the city library. Members agreed that the "
         "reading rooms should stay open later in the evening, and that the children's section needs more books. "
         "They also talked about the old roof, which has been leaking for two winters, and about the cost of a "
         "repair. In the end the vote was close, but the plan passed with a small majority and work starts soon.")
FR = ("Le comité s'est réuni mardi pour discuter du nouveau budget de la bibliothèque municipale. Les membres "
      "ont convenu que les salles de lecture devraient rester ouvertes plus tard le soir. Ils ont aussi parlé du "
      "vieux toit, qui fuit depuis deux hivers, et du coût d'une réparation. À la fin, le vote a été serré.")


def batch(*texts: str, sources=None) -> Batch:
    n = len(texts)
    return Batch(ids=[f"d{i}" for i in range(n)], texts=list(texts), sources=sources or ["s"] * n,
                 subsets=[None] * n, metas=["{}"] * n, langs=["en"] * n, lang_scores=np.zeros(n, dtype=np.float32))


class Short(Filter):
    name = "short"
    drop_reasons = ("too_short", "way_too_short")

    def process(self, b, rows, settings):
        return ["way_too_short" if len(b.texts[i]) < 2 else "too_short" if len(b.texts[i]) < 5 else None for i in rows]


class Liar(Filter):
    name = "liar"
    drop_reasons = ("declared",)

    def process(self, b, rows, settings):
        return ["undeclared" for _ in rows]


class Everything(Filter):
    name = "everything"
    drop_reasons = ("anything",)

    def process(self, b, rows, settings):
        self.seen = list(rows)
        return ["anything" for _ in rows]


def test_the_first_reason_wins_and_later_filters_see_only_kept_rows():
    b = batch("a", "abc", "a long enough text")
    short, everything = Short(), Everything()
    for f in (short, everything):
        f.run(b, lambda *a: None)
    assert b.reasons == ["way_too_short", "too_short", "anything"]
    assert everything.seen == [2]
    assert short.dropped == {"way_too_short": 1, "too_short": 1} and everything.dropped == {"anything": 1}


def test_an_undeclared_reason_fails_loudly():
    with pytest.raises(RuntimeError, match="liar.*undeclared"):
        Liar().run(batch("x"), lambda *a: None)


def test_a_null_setting_turns_a_filter_off_for_those_documents():
    class PerSource(Everything):
        settings = Setting("any", dict, {}, doc="")

    f = PerSource()
    b = batch("x", "y", sources=["on", "off"])
    f.run(b, lambda name, source, subset: None if source == "off" else {"on": True})
    assert b.reasons == ["anything", None]


def test_the_stage_declares_what_its_filters_declare_and_keeps_todays_columns():
    names = [f.name for f in CleanStage.adds]
    assert names[:5] == ["lang", "lang_score", "escape_score", "escape_counts", "clean_steps"]
    assert names[5:] == [f.name for f in next(f for f in CleanStage.filters if f.name == "quality_scores").adds]
    assert len(set(CleanStage.drop_reasons)) == len(CleanStage.drop_reasons)
    order = [f.name for f in CleanStage.filters]
    first = ["escapes", "normalize", "pii", "blocklist", "empty", "langid", "quality_scores", "gopher_quality",
             "gopher_repetition", "c4", "cjk", "classifiers"]  # today's filters, in today's order; others may join
    assert [name for name in order if name in first] == first and order[0] == "escapes" and order[-1] == "classifiers"


def test_every_filter_setting_can_be_overridden():
    settings = {f.settings.key for f in CleanStage.filters if f.settings is not None and f.settings.per_source}
    assert settings <= set(CleanOverride.model_fields) and settings <= set(CleanConfig.model_fields)


def _stage(tmp_path, config: dict) -> CleanStage:
    sources = {name: SourceConfig(name=name, format="jsonl", paths=["x"], language="en") for name in ("web", "logs")}
    return CleanStage(CleanConfig.model_validate(config), RunContext(seed=0, sources=sources, base_dir=str(tmp_path)))


def _run(stage: CleanStage, rows) -> dict[str, tuple[str | None, str]]:
    table = pa.table({"id": [r[0] for r in rows], "text": [r[1] for r in rows], "source": [r[2] for r in rows],
                      "subset": pa.array([r[3] if len(r) > 3 else None for r in rows], pa.string()),
                      "meta": ["{}"] * len(rows)})
    out = stage.process(table, {})
    return dict(zip(out.table.column("id").to_pylist(),
                    zip(out.drop_reason.to_pylist(), out.table.column("text").to_pylist())))


def test_overrides_reach_pii_and_langid_too(tmp_path):
    stage = _stage(tmp_path, {"overrides": [
        {"source": "logs", "pii": {"ip": False}},
        {"source": "logs", "subset": "forum", "langid": {"min_score": 1.0}},
    ]})
    text = PROSE + " The server at 8.8.8.8 answered."
    res = _run(stage, [("web", text, "web"), ("logs", text, "logs"), ("fr-web", FR, "web"),
                       ("fr-forum", FR, "logs", "forum")])
    assert "<IP_ADDRESS>" in res["web"][1] and "8.8.8.8" in res["logs"][1]
    assert res["fr-web"][0] == "wrong_language" and res["fr-forum"][0] != "wrong_language"
    assert stage.setting("pii", "logs", None).ip is False and stage.setting("pii", "web", None).ip is True


def test_an_override_without_the_later_fields_dumps_as_before():
    """pii and langid joined the override later: a config without them keeps its run identity."""
    dumped = CleanOverride.model_validate({"source": "s", "escapes": {"mode": "flag"}}).model_dump(mode="json")
    # In chain order since the override is built from the filters (it was escapes, quality, normalize): the
    # identity hashes canonical JSON, sorted keys, so the order never reaches a run's key.
    assert list(dumped) == ["source", "subset", "escapes", "normalize", "quality"]
    assert "pii" in CleanOverride.model_validate({"pii": {"ip": False}}).model_dump(mode="json")


def test_the_chain_reports_each_filters_sections(tmp_path):
    stage = _stage(tmp_path, {})
    table = pa.table({"id": ["a"], "text": [PROSE + " Mail ann@example.org."], "source": ["web"],
                      "subset": pa.nulls(1, pa.string()), "meta": [json.dumps({})]})
    out = stage.process(table, {})
    report = stage.report(out.stats)
    assert set(report) == {"leaks", "normalize", "pii", "languages", "summary"}
    assert report["pii"] == {"email": 1} and report["languages"] == {"web": {"en": 1}}
    chain = Chain(CleanStage.filters, stage.config, stage.config.overrides)
    assert [f.name for f in chain.filters] == [f.name for f in CleanStage.filters]


def test_the_config_and_its_overrides_are_built_from_the_filters_settings():
    from tokenmill.stages.clean.config import declared_settings

    settings = declared_settings()
    keys = [s.key for s in settings]
    assert [k for k in keys if k in CleanConfig.model_fields] == keys and keys[:3] == ["escapes", "normalize", "pii"]
    for s in settings:
        field = CleanConfig.model_fields[s.key]
        assert field.description == s.doc and field.default == s.default
        assert (s.key in CleanOverride.model_fields) == s.per_source
    assert "blocklist" not in CleanOverride.model_fields  # one list for the stage
    assert set(CleanStage.paths) == {"blocklist", "classifiers[].model", "overrides[].classifiers[].model"}


def test_two_filters_declaring_one_field_otherwise_are_refused(monkeypatch):
    from tokenmill.stages.clean import config

    class Twin(Filter):
        name = "twin"
        order = 999
        settings = Setting("quality", dict, {}, doc="another quality block")

    try:
        monkeypatch.setattr(config, "chain_filters", lambda: (*CleanStage.filters, Twin))
        with pytest.raises(TypeError, match="'twin' declares a settings field 'quality'"):
            config.declared_settings()
    finally:
        from tokenmill.stages.clean.filter import _FILTERS

        _FILTERS.pop("twin")
