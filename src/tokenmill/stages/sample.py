"""Sample stage: keep a deterministic share of each source, chosen by a keyed hash of the document id."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tokenmill.config_base import StageConfig
from tokenmill.pipeline.contract import Processed
from tokenmill.pipeline.map_phase import MapStage
from tokenmill.sampling import keep_mask


class SampleConfig(StageConfig):
    """The sample stage has no options of its own: each source's `fraction` says how much to keep."""


class SampleStage(MapStage):
    """Keep a deterministic share (`fraction`) of each source."""

    name = "sample"
    order = 10
    config_class = SampleConfig
    needs = frozenset({"id", "source"})
    drop_reasons = ("sampled_out",)

    def identity(self) -> dict[str, Any]:
        return {
            **super().identity(),
            "fractions": {name: s.fraction for name, s in sorted(self.run.sources.items())},
        }

    def process(self, table: pa.Table, shared: Mapping[str, Any]) -> Processed:
        ids, sources = table.column("id"), table.column("source")
        keep = np.ones(table.num_rows, dtype=bool)
        for source in sources.unique().to_pylist():
            rows = pc.equal(sources, source).to_numpy(zero_copy_only=False)
            picked = ids.filter(pa.array(rows)).to_pylist()
            keep[rows] = keep_mask(self.run.seed, source, picked, self.run.sources[source].fraction)
        reasons = pc.if_else(pa.array(keep), pa.scalar(None, pa.string()), pa.scalar("sampled_out"))
        return Processed(table, reasons)
