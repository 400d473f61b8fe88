"""The blocklist filter: documents whose `meta.url` lies on a blocked domain of the stage's list file."""

from __future__ import annotations

import json
from typing import Mapping, Optional

from tokenmill.stages.clean.filter import Batch, Case, Filter, Setting
from tokenmill.text.pii import blocked, load_blocklist


class BlocklistFilter(Filter):
    """Documents whose `meta.url` lies on a blocked domain (the list file is the stage's `blocklist` path)."""

    name = "blocklist"
    order = 40
    settings = Setting("blocklist", Optional[str], None, per_source=False, dumped=("stage",), doc=(
        "File of blocked domains, one per line, relative to the config file; documents whose `meta.url` is on one "
        "are dropped. One list for the stage (its content, not its place, is part of the run's identity)."))
    drop_reasons = ("blocked_domain",)
    paths = ("blocklist",)
    cases = {"blocked_domain": Case("A page of a blocked domain.", meta='{"url": "https://spam.example/a"}',
                                    blocklist="spam.example\n")}

    def __init__(self) -> None:
        super().__init__()
        self.domains: frozenset[str] | None = None

    def setup(self, paths: Mapping[str, str | None]) -> None:
        if paths.get("blocklist") is not None:
            with open(paths["blocklist"], encoding="utf-8") as f:
                self.domains = load_blocklist(f)

    def process(self, batch: Batch, rows: list[int], settings: None) -> list[str | None]:
        if not self.domains:
            return [None] * len(rows)
        return ["blocked_domain" if blocked(json.loads(batch.metas[i]).get("url"), self.domains) else None
                for i in rows]
