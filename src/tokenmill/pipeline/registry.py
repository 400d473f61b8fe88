"""The stages tokenmill knows, in pipeline order, and how to build the configured chain."""

from __future__ import annotations

from tokenmill.pipeline.config import RunConfig
from tokenmill.pipeline.stage import RunContext, Stage
from tokenmill.stages.clean.stage import CleanStage
from tokenmill.stages.decontaminate.stage import DecontaminateStage
from tokenmill.stages.dedup.stage import DedupStage
from tokenmill.stages.tokenize.stage import TokenizeStage
from tokenmill.stages.ingest import IngestStage, list_source_files
from tokenmill.stages.sample import SampleStage

STAGE_CLASSES: dict[str, type[Stage]] = {
    "sample": SampleStage,
    "clean": CleanStage,
    "dedup": DedupStage,
    "decontaminate": DecontaminateStage,
    "tokenize": TokenizeStage,
}
STAGE_ORDER = ["ingest", *STAGE_CLASSES]
"""Every stage name in pipeline order; a later stage reads the nearest earlier configured one."""


def run_context(config: RunConfig) -> RunContext:
    return RunContext(seed=config.seed, sources={s.name: s for s in config.sources}, base_dir=config.base_dir)


def build_stages(config: RunConfig) -> list[Stage]:
    """Ingest followed by every configured stage, in pipeline order."""
    run = run_context(config)
    stages: list[Stage] = [IngestStage(config.ingest, run, list_source_files(config))]
    for name, stage_config in config.stages.configured():
        stages.append(STAGE_CLASSES[name](stage_config, run))
    return stages
