"""The chain check runs before any work; fallbacks stand in for annotations of absent stages."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tokenmill.errors import StageChainError
from tokenmill.pipeline.columns import check_chain, with_fallbacks
from tokenmill.sources.config import SourceConfig
from tokenmill.config_base import StageConfig
from tokenmill.pipeline.contract import RunContext, Stage
from tokenmill.stages.ingest import IngestConfig, IngestStage
from tokenmill.stages.sample import SampleStage

RUN = RunContext(seed=0, sources={
    "en": SourceConfig(name="en", format="jsonl", paths=["x"], language="en"),
    "zh": SourceConfig(name="zh", format="jsonl", paths=["x"], language="zh"),
})


class NeedsScore(Stage):
    name = "needs_score"
    needs = frozenset({"text", "quality_score"})


class UsesLang(Stage):
    name = "uses_lang"
    uses = frozenset({"lang"})


class UsesUnknown(Stage):
    name = "uses_unknown"
    uses = frozenset({"mystery"})


def chain(*extra):
    return [IngestStage(IngestConfig(), RUN, []), *[cls(StageConfig(), RUN) for cls in extra]]


def test_configured_chain_passes():
    inputs = check_chain(chain(SampleStage))
    assert {"id", "text", "source", "subset", "meta"} <= inputs["sample"]


def test_missing_column_is_named_before_any_work():
    with pytest.raises(StageChainError, match=r"stages.needs_score: needs column\(s\) \['quality_score'\]"):
        check_chain(chain(SampleStage, NeedsScore))


def test_used_column_without_fallback_is_an_error():
    with pytest.raises(StageChainError, match="mystery"):
        check_chain(chain(UsesUnknown))


def test_lang_falls_back_to_source_language():
    check_chain(chain(UsesLang))
    table = pa.table({"id": ["1", "2"], "text": ["a", "b"], "source": ["en", "zh"]})
    filled = with_fallbacks(table, UsesLang(StageConfig(), RUN))
    assert filled.column("lang").to_pylist() == ["en", "zh"]


class NeedsTextHash(Stage):
    name = "needs_text_hash"
    needs = frozenset({"id", "text", "text_hash"})


def test_text_hash_is_provided_by_every_shard_write():
    inputs = check_chain(chain(SampleStage, NeedsTextHash))
    assert "text_hash" in inputs["sample"] and "text_hash" in inputs["needs_text_hash"]


def test_the_source_stage_is_first_and_only_first():
    with pytest.raises(StageChainError, match="'sample' is first in the chain"):
        check_chain([SampleStage(StageConfig(), RUN)])
    with pytest.raises(StageChainError, match="'ingest' is number 3 in the chain"):
        check_chain(chain(SampleStage) + [IngestStage(IngestConfig(), RUN, [])])
