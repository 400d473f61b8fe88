"""The one-per-component removal rule beside the greedy one, and the number of documents each kept one stands for.

Both rules start from the greedy decisions (`decisions.decide`): a document goes only with a verified edge above
the threshold to a kept one, so in a chain A~B~C without A~C, A and C stay. The component rule (datatrove's
`MinhashDedupCluster`, which keeps one union-find root per component, and NeMo Curator's connected-components
dedup, which keeps one document per duplicate group) then keeps only the first document of each connected
component of the verified-edge graph in the visit order of the `keep` rules, and removes the others that greedy
kept as `component_duplicate`. That first document is always one greedy kept (it is visited first in its
component, and exact duplicates go first among the very same order), so the component rule removes exactly
what greedy removes and more: `nodes - components` in all.

A kept document's cluster size is the number of documents it stands for: itself and every document removed on
its account, following `kept_by` through documents removed in turn (an exact copy of a document that was then
removed as a near duplicate counts for the document that removed it). Summed over the kept documents it is the
number of documents of the components, so the output's `cluster_size` column sums to the stage's input count
(FineWeb-2's `minhash_cluster_size` under the component rule, where it is the component's size).
Pure functions over numpy arrays aligned with the sorted nodes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["component_keepers", "one_per_component", "removal_counts", "stands_for"]


def component_keepers(comp: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Per node, the index of its component's first node in the visit order (smallest `rank`). `comp`: each node's
    component label; `rank`: distinct visit ranks, aligned with the nodes."""
    if not comp.size:
        return np.zeros(0, np.int64)
    order = np.lexsort((rank, comp))  # by component, then visit order
    starts = np.r_[True, comp[order][1:] != comp[order][:-1]]
    first = order[starts]
    group = np.cumsum(starts) - 1
    keeper = np.empty(comp.size, np.int64)
    keeper[order] = first[group]
    return keeper


def one_per_component(code: np.ndarray, by: np.ndarray, comp: np.ndarray, rank: np.ndarray, kept: int,
                      reason: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The component rule over greedy decisions: (code, by, extra) with every document greedy kept, other than its
    component's keeper, given `reason` and removed by that keeper; `extra` marks those documents. `code` holds
    `kept` for a kept document; `by` the index of the document that removed it."""
    keeper = component_keepers(comp, rank)
    if np.any(code[keeper] != kept):
        raise RuntimeError("dedup: a component's first document in the visit order was removed by the greedy rule; "
                           "this is a bug (it is visited first, so greedy keeps it)")
    extra = (code == kept) & (keeper != np.arange(comp.size))
    code, by = code.copy(), by.copy()
    code[extra], by[extra] = reason, keeper[extra]
    return code, by, extra


def stands_for(dropped: np.ndarray, by: np.ndarray) -> np.ndarray:
    """Per node, the documents it stands for: 1 + those removed on its account (transitively through `by`) for a
    kept node, 0 for a removed one."""
    n = dropped.size
    target = np.where(dropped, by, np.arange(n))
    for _ in range(64):  # removal chains are at most two long (exact, then near; the component rule adds one)
        nxt = target[target]
        if np.array_equal(nxt, target):
            break
        target = nxt
    else:
        raise RuntimeError("dedup: removals that do not end at a kept document; this is a bug")
    if np.any(dropped[target]):
        raise RuntimeError("dedup: a removal chain ends at a removed document; this is a bug")
    return np.bincount(target, minlength=n).astype(np.int64)


def removal_counts(code: np.ndarray, comp: np.ndarray, greedy: tuple[int, ...]) -> dict[str, int]:
    """Documents each rule removes from these components, whatever rule was applied: greedy (codes in `greedy`)
    and one per component (every node but one per component)."""
    return {"greedy": int(np.isin(code, greedy).sum()), "component": int(comp.size - np.unique(comp).size)}
