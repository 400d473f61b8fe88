"""Stages in the order the pipeline ran them, from what each stage's manifest says it read (`input.stage`).

The manifests alone give the order, so the auditors' tools import no stage to sort a run's folders, and a stage
added to the pipeline sorts in its place without being named here.
"""

from __future__ import annotations

from typing import Iterable


def lineage_order(edges: Iterable[tuple[str, str | None]]) -> list[str]:
    """Every stage after each stage it read: `edges` are (stage, the stage it read, None for the sources).

    Several edges for one stage (two runs compared, one that skipped a stage) all hold. Stages ready at the same time
    come by name; a stage whose input is not among them is ready at once (its input's folder is gone). A cycle, which
    only hand-edited manifests could make, leaves its stages at the end, by name.
    """
    inputs: dict[str, set[str]] = {}
    for stage, read in edges:
        inputs.setdefault(stage, set())
        if read is not None:
            inputs[stage].add(read)
    waiting = {stage: {read for read in reads if read in inputs and read != stage} for stage, reads in inputs.items()}
    order: list[str] = []
    ready = sorted(stage for stage, reads in waiting.items() if not reads)
    while ready:
        stage = ready.pop(0)
        order.append(stage)
        for other, reads in waiting.items():
            if stage in reads:
                reads.discard(stage)
                if not reads:
                    ready = sorted([*ready, other])
    return order + sorted(stage for stage in inputs if stage not in order)
