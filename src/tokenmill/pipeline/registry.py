"""The registered stages: found by importing every module of `tokenmill.stages` once, then in pipeline order."""

from __future__ import annotations

from tokenmill.discovery import import_every_module
from tokenmill.pipeline.contract import SourceStage, Stage, registered

STAGES_PACKAGE = "tokenmill.stages"


def discover() -> None:
    """Import every module under `tokenmill.stages`, so each stage class registers itself (`Stage.order`); the
    pipeline's own modules never import a stage."""
    import_every_module(STAGES_PACKAGE)


def stage_classes() -> dict[str, type[Stage]]:
    """Every registered stage class by name, in pipeline order (the source stage first)."""
    discover()
    return dict(sorted(registered().items(), key=lambda item: (item[1].order, item[0])))


def stage_order() -> list[str]:
    """Every stage name in pipeline order; a later stage reads the nearest earlier configured one."""
    return list(stage_classes())


def source_stage() -> type[SourceStage]:
    """The one registered stage that reads the sources (ingest)."""
    found = [cls for cls in stage_classes().values() if issubclass(cls, SourceStage)]
    if len(found) != 1:
        raise RuntimeError(f"expected one registered source stage, found {[c.name for c in found]}")
    return found[0]
