"""The language filter: fastText language identification replaces the document's language; a confident mismatch
with the source's declared one drops it."""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Optional

from tokenmill.stages.clean.filter import Batch, Case, Filter, Setting
from tokenmill.text.langid import LangidConfig, identify, mismatch

FRENCH = ("Le comité s'est réuni mardi pour discuter du nouveau budget de la bibliothèque municipale. Les membres "
          "ont convenu que les salles de lecture devraient rester ouvertes plus tard le soir.")


class LangidFilter(Filter):
    """fastText language identification: the document's language becomes the identified one; a confident mismatch
    with the source's declared language drops it."""

    name = "langid"
    order = 60
    settings = Setting("langid", Optional[LangidConfig], LangidConfig(), dumped=("stage",), doc=(
        "fastText language identification; null turns it off (then `lang` is the source's language). E.g. a higher "
        "`min_score` in an override for a multilingual forum."))
    drop_reasons = ("wrong_language",)
    sections = {"languages": {}}
    cases = {"wrong_language": Case(FRENCH, lang="en", settings=LangidConfig())}

    def process(self, batch: Batch, rows: list[int], settings: LangidConfig) -> list[str | None]:
        found, scores = identify([batch.texts[i] for i in rows], settings.quick_chars, settings.quick_min_score)
        reasons = []
        batch.lang_scores[rows] = scores
        for i, lang, score in zip(rows, found, scores.tolist()):
            expected = batch.langs[i]
            batch.langs[i] = lang
            reasons.append("wrong_language" if mismatch(expected, lang, score, settings) else None)
        languages = batch.stats.section("languages")
        for (source, lang), n in Counter((batch.sources[i], batch.langs[i]) for i in rows).items():
            per = languages.setdefault(source, {})
            per[lang] = per.get(lang, 0) + n
        return reasons

    def report(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        return {"languages": stats.get("languages", {})}
