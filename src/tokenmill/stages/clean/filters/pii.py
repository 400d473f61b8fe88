"""The PII filter: e-mail addresses, IP addresses and phone numbers replaced by placeholders."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from tokenmill.stages.clean.filter import Batch, Filter, Setting
from tokenmill.text.pii import PiiConfig, phone_candidates, replace_pii


class PiiFilter(Filter):
    """E-mail addresses, IP addresses and phone numbers replaced by placeholders."""

    name = "pii"
    order = 30
    settings = Setting("pii", Optional[PiiConfig], PiiConfig(), dumped=("stage",), doc=(
        "Personal data replaced by placeholders; null turns it off. E.g. `{ip: false}` in an override for a subset "
        "of network logs."))
    edits = True
    sections = {"pii": {}}

    def process(self, batch: Batch, rows: list[int], settings: PiiConfig) -> None:
        maybe = phone_candidates([batch.texts[i] for i in rows]) if settings.phone else None
        for k, i in enumerate(rows):
            batch.texts[i], found = replace_pii(batch.texts[i], settings, True if maybe is None else bool(maybe[k]))
            if found:
                batch.steps[i].append("pii:" + "+".join(sorted(found)))
                batch.stats.add("pii", found)

    def report(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        return {"pii": stats.get("pii", {})}
