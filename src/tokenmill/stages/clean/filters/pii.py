"""The PII filter: e-mail addresses, IP addresses and phone numbers replaced by placeholders."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from tokenmill.stages.clean.filter import Batch, Filter, Setting
from tokenmill.text.pii import PiiConfig, pii_candidates, replace_pii


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
        candidates, maybe_phone = pii_candidates([batch.texts[i] for i in rows], settings, batch.text_column(rows))
        for k in np.flatnonzero(candidates).tolist():  # the others hold nothing to replace
            i = rows[k]
            batch.texts[i], found = replace_pii(batch.texts[i], settings, bool(maybe_phone[k]))
            if found:
                batch.steps[i].append("pii:" + "+".join(sorted(found)))
                batch.stats.add("pii", found)

    def report(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        return {"pii": stats.get("pii", {})}
