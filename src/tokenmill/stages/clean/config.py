"""The clean stage's config: escape policy (per source and subset), normalization, PII, blocklist, language, quality,
classifiers."""

from __future__ import annotations

from typing import Optional

from pydantic import model_validator

from tokenmill.config_base import StageConfig, StrictModel
from tokenmill.stages.clean.classifiers import Classifiers, disagreement
from tokenmill.text.escapes import EscapePolicy
from tokenmill.text.langid import LangidConfig
from tokenmill.text.normalize import NormalizeConfig
from tokenmill.text.pii import PiiConfig
from tokenmill.text.quality import QualityConfig


class CleanOverride(StrictModel):
    """Settings for one source, one subset, or one subset of one source; the most specific override wins.

    Every clean filter with settings reads them through the same override lookup (`stages/clean/filter.py:resolve`),
    so each of its settings fields (`escapes`, `normalize`, `pii`, `langid`, `quality`, `classifiers`) can be set
    here. A field left out keeps the stage's setting for these documents (a filter cannot be turned off per source,
    but `classifiers: []` gives these documents no classifier).
    """

    source: Optional[str] = None
    """Source name this override applies to (any source when left out)."""
    subset: Optional[str] = None
    """Subset this override applies to (e.g. the Pile's `ArXiv`); any subset when left out."""
    escapes: Optional[EscapePolicy] = None
    """The escape policy for these documents, e.g. `{mode: flag}` for a subset of code."""
    quality: Optional[QualityConfig] = None
    """The quality rules for these documents, e.g. fewer words for short-form sources such as Reddit comments."""
    normalize: Optional[NormalizeConfig] = None
    """The normalization steps for these documents, in place of the stage's (the whole block: keys left out take
    their defaults), e.g. `{code: document}` for a subset of source files such as the Pile's Github."""
    pii: Optional[PiiConfig] = None
    """The PII replacement for these documents, e.g. `{ip: false}` for a subset of network logs."""
    langid: Optional[LangidConfig] = None
    """The language-identification settings for these documents, e.g. a higher `min_score` for a multilingual forum."""
    classifiers: Optional[Classifiers] = None
    """The quality classifiers for these documents, in place of the stage's list (`[]`: none), e.g. the same model
    with a lower threshold for a source of short texts."""

    later_fields = ("pii", "langid", "classifiers")  # a filter's settings field added here joins this list


class CleanConfig(StageConfig):
    """Escape-leak checks first, on the raw text; then normalization, PII, blocklist, language and quality filters."""

    escapes: EscapePolicy = EscapePolicy()
    """What to do with text that still carries escapes from an upstream serialization (the OPT lesson)."""
    overrides: list[CleanOverride] = []
    """Per source and subset `escapes`, `normalize`, `pii`, `langid`, `quality` or `classifiers`, e.g. `{source: pile, subset: ArXiv, escapes: {mode:
    flag}}` or `{source: pile, subset: Github, normalize: {code: document}}`."""
    normalize: NormalizeConfig = NormalizeConfig()
    """Unicode and whitespace normalization steps, and where whitespace is code's own (kept)."""
    pii: Optional[PiiConfig] = PiiConfig()
    """Personal data replaced by placeholders; null turns it off."""
    blocklist: Optional[str] = None
    """File of blocked domains, one per line, relative to the config file; documents whose `meta.url` is on one are dropped."""
    langid: Optional[LangidConfig] = LangidConfig()
    """fastText language identification; null turns it off (then `lang` is the source's language)."""
    quality: QualityConfig = QualityConfig()
    """Gopher quality, Gopher repetition and C4 rules (character-based measures for Chinese and Japanese)."""
    classifiers: Classifiers = []
    """fastText quality classifiers, last in the chain: each scores every document (column `<name>_score`) and drops
    the kept ones below its threshold (`low_<name>_score`), e.g. `[{name: hq, model: model/model.bin, keep:
    {threshold: 0.018}}]`, or below the cut that keeps the best fraction of the input (`keep: {top_fraction: 0.1}`,
    found by a `score` phase before the map)."""

    later_fields = ("classifiers",)

    @model_validator(mode="after")
    def _classifiers_fit(self) -> "CleanConfig":
        problem = disagreement(self)
        if problem is not None:
            raise ValueError(problem)
        from tokenmill.stages.clean.chain import chain_adds
        from tokenmill.stages.clean.filters import FILTERS

        taken = {f.name for f in chain_adds(FILTERS)}
        for o in [self, *self.overrides]:
            for c in o.classifiers or ():
                if c.column in taken:
                    raise ValueError(f"classifier name {c.name!r}: its column {c.column} is already one of the clean "
                                     f"stage's columns; choose another name")
        return self
