"""The clean stage's per-shard counts: documents per source and subset, and each filter's own sections."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any, Mapping, Sequence

from tokenmill.documents import NO_SUBSET


class CleanStats:
    """Per-shard counts: `docs` (per source and subset) and the sections the filters declare and write (summed
    across shards by the manifest; a filter's `report` shapes its own)."""

    def __init__(self, sections: Mapping[str, Any] | None = None):
        self.data: dict[str, Any] = {"docs": {}}
        for name, empty in (sections or {}).items():
            self.data[name] = copy.copy(empty)

    def section(self, name: str, empty: Any = None) -> Any:
        """A filter's section, made empty (`{}` unless given) the first time (a batch built without the chain)."""
        return self.data.setdefault(name, {} if empty is None else copy.copy(empty))

    def docs(self, sources: Sequence[str], subsets: Sequence[str | None]) -> None:
        """Count documents per source and subset (tallied in C, then added in first-seen order, as one by one)."""
        for (source, subset), n in Counter(zip(sources, subsets)).items():
            key = subset if subset is not None else NO_SUBSET
            per = self.data["docs"].setdefault(source, {})
            per[key] = per.get(key, 0) + n

    def count(self, section: str, names) -> None:
        """One more of each name in `names`."""
        counts = self.section(section)
        for name in names:
            counts[name] = counts.get(name, 0) + 1

    def add(self, section: str, counts: Mapping[str, int]) -> None:
        into = self.section(section)
        for name, value in counts.items():
            into[name] = into.get(name, 0) + value

    def to_json(self) -> dict[str, Any]:
        return self.data
