"""Early stopping of a losing variant: the rule, and its check against the final verdicts.

The rule reads, at each evaluation point, every running variant's mean and interval over seeds of one metric (the
report's `mean_interval`). The best variant at a point is the one of best mean among the variants still running
there (the first in config order on a tie). A variant is *behind* at a point when its whole interval lies on the
worse side of the best's (lower is better: its low above the best's high); it is stopped at the point that ends its
first run of `patience` consecutive points behind, and from the next point on it is no longer compared (it has no
scores there). The base is never stopped: every verdict is against it.

The rule is causal: a decision at a point reads scores up to that point only, and of the variants running there. So
the decisions made between rounds (as the ablation makes them) equal `decide` applied afterwards to the whole curves
(scores past a stop are ignored), and a rerun that reads the same scores makes the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

Interval = tuple[float, float, float]
"""(mean, low, high) of one variant at one point."""


def behind_at(here: dict[str, Interval], lower_is_better: bool) -> dict[str, bool]:
    """At one point, per variant compared there: whether its interval lies wholly on the worse side of the best's."""
    sign = 1.0 if lower_is_better else -1.0
    best = min(here, key=lambda v: sign * here[v][0])  # min keeps the first of equal means
    _, b_low, b_high = here[best]
    return {v: (low > b_high if lower_is_better else high < b_low) for v, (_, low, high) in here.items()}


def stop_index(flags: Sequence[bool], patience: int) -> int | None:
    """The index of the point that ends the first run of `patience` consecutive True flags, or None."""
    run = 0
    for i, flag in enumerate(flags):
        run = run + 1 if flag else 0
        if run >= patience:
            return i
    return None


def decide(curves: dict[str, Sequence[Interval]], lower_is_better: bool, patience: int,
           protected: Sequence[str] = ()) -> dict[str, int]:
    """{variant: index of the point it is stopped at} for every variant the rule stops (never one of `protected`).

    `curves` maps each variant (in config order) to its intervals at the first evaluation points, one per point it
    was scored at (a stopped variant's curve may end at its stop; scores past a stop are never read)."""
    stopped: dict[str, int] = {}
    runs = {v: 0 for v in curves}
    for i in range(max((len(c) for c in curves.values()), default=0)):
        here = {v: c[i] for v, c in curves.items() if len(c) > i and v not in stopped}
        if not here:
            break
        for v, flag in behind_at(here, lower_is_better).items():
            runs[v] = runs[v] + 1 if flag else 0
            if runs[v] >= patience and v not in protected:
                stopped[v] = i
    return stopped


@dataclass(frozen=True)
class CheckRow:
    """The rule at one patience, applied afterwards to the variants trained to the end."""

    patience: int
    checked: list[str]
    """The variants trained to the end (the base included), on which the rule is checked."""
    would_stop: dict[str, int]
    """{variant: index of the point the rule would have stopped it at}."""
    wrong: list[str]
    """Those of `would_stop` whose final verdict against the final best is not `worse`: stopping them was wrong."""

    def to_json(self, steps: Sequence[int]) -> dict:
        n = len(self.would_stop)
        return {"patience": self.patience, "runs_checked": len(self.checked), "would_stop": n,
                "wrong": len(self.wrong), "wrong_fraction": len(self.wrong) / n if n else None,
                "stopped_at": {v: steps[i] for v, i in sorted(self.would_stop.items())}, "wrong_variants": self.wrong}


def check(curves: dict[str, Sequence[Interval]], lower_is_better: bool, patiences: Sequence[int],
          finished: Sequence[str], final_worse: dict[str, bool], protected: Sequence[str] = ()) -> list[CheckRow]:
    """How often the rule would have been wrong on the variants trained to the end (`finished`), at each patience:
    the rule (`decide`) applied afterwards to every variant's curve (a stopped one's up to its stop), each stop of a
    finished variant compared with its final verdict against the final best (`final_worse[v]`: detectably worse at
    the last point; False for the best itself)."""
    rows = []
    for k in patiences:
        stops = decide(curves, lower_is_better, k, protected)
        would = {v: stops[v] for v in finished if v in stops}
        rows.append(CheckRow(k, list(finished), would, [v for v in would if not final_worse[v]]))
    return rows
