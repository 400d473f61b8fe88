"""The clean stage's config and its per-source overrides, built from the filters' declared settings."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field, create_model, model_validator

from tokenmill.config_base import StageConfig, StrictModel
from tokenmill.stages.clean.chain import chain_filters
from tokenmill.stages.clean.filter import Setting


def declared_settings() -> list[Setting]:
    """Each settings field the chain's filters declare, once, in chain order (filters sharing one declare the same)."""
    out: dict[str, Setting] = {}
    for f in chain_filters():
        s = f.settings
        if s is not None and out.setdefault(s.key, s) is not s:
            raise TypeError(f"clean filter {f.name!r} declares a settings field {s.key!r} another filter declares "
                            f"otherwise: filters that share a field share its `Setting`")
    return list(out.values())


class _OverrideBase(StrictModel):
    """Settings for one source, one subset, or one subset of one source; the most specific override wins.

    Every clean filter with settings reads them through the same override lookup (`stages/clean/filter.py:resolve`),
    so each of its settings fields can be set here (one optional field per filter's `Setting`, built from the
    filters). A field left out keeps the stage's setting for these documents (a filter cannot be turned off per
    source, but `classifiers: []` gives these documents no classifier).
    """

    source: Optional[str] = None
    """Source name this override applies to (any source when left out)."""
    subset: Optional[str] = None
    """Subset this override applies to (e.g. the Pile's `ArXiv`); any subset when left out."""


class _CleanBase(StageConfig):
    """Escape-leak checks first, on the raw text; then normalization, PII, blocklist, language and quality filters,
    and the classifiers: one field per filter's `Setting`, built from the filters."""

    @model_validator(mode="after")
    def _filters_agree(self) -> Any:
        for f in chain_filters():
            problem = f.check(self)
            if problem is not None:
                raise ValueError(problem)
        return self


def _build() -> tuple[type[StrictModel], type[StageConfig]]:
    settings = declared_settings()
    per_source = [s for s in settings if s.per_source]
    override = create_model("CleanOverride", __base__=_OverrideBase, __module__=__name__, **{
        s.key: (Optional[s.annotation], Field(default=None, description=f"For these documents: {s.doc}"))
        for s in per_source})
    override.later_fields = tuple(s.key for s in per_source if "override" not in s.dumped)
    keys = ", ".join(f"`{s.key}`" for s in per_source)
    fields: dict[str, Any] = {s.key: (s.annotation, Field(default=s.default, description=s.doc)) for s in settings}
    fields["overrides"] = (list[override], Field(default=[], description=(
        f"Per source and subset {keys}, e.g. `{{source: pile, subset: ArXiv, escapes: {{mode: flag}}}}` or "
        f"`{{source: pile, subset: Github, normalize: {{code: document}}}}`.")))
    config = create_model("CleanConfig", __base__=_CleanBase, __module__=__name__, **fields)
    config.later_fields = tuple(s.key for s in settings if "stage" not in s.dumped)
    return override, config


CleanOverride, CleanConfig = _build()
