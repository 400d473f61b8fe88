"""`tokenmill ablate`: the command bodies (`validate`, a run, `report`) and the tables they print."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _num(value: Any, spec: str = ".4f") -> str:
    return "n/a" if value is None else format(value, spec)


def comparison_table(report: dict[str, Any]) -> Table:
    """Per variant against the base, per metric: the final difference with its interval, the verdict, and the
    earliest point from which it held."""
    table = Table(title=f"tokenmill ablate: against {report['base']!r} ({len(report['seeds'])} seeds, "
                        f"{report['confidence']:.0%} intervals)", title_justify="left")
    for col in ("variant", "metric", "base", "variant mean", "difference [interval]", "verdict", "held from"):
        table.add_column(col, justify="left" if col in ("variant", "metric", "verdict") else "right")
    base = report["variants"][report["base"]]["metrics"]
    for name, metrics in report["comparisons"].items():
        for metric, c in metrics.items():
            last = c["points"][-1]
            held = c["held_from"]
            style = {"better": "green", "worse": "red"}.get(c["verdict"], "")
            table.add_row(escape(name), escape(metric), _num(base[metric][-1]["mean"]),
                          _num(report["variants"][name]["metrics"][metric][-1]["mean"]),
                          f"{_num(last['difference'], '+.4f')} [{_num(last['low'], '+.4f')}, {_num(last['high'], '+.4f')}]",
                          f"[{style}]{c['verdict']}[/]" if style else c["verdict"],
                          f"step {held['step']} ({held['fraction_of_budget']:.0%})")
    return table


def sharing_table(report: dict[str, Any]) -> Table:
    """Per variant: the stages shared with an earlier variant and those recomputed, and the compute spent."""
    table = Table(title="stages and compute", title_justify="left")
    for col in ("variant", "shared (from)", "recomputed", "tokens", "train FLOPs"):
        table.add_column(col, justify="right" if col in ("tokens", "train FLOPs") else "left")
    for name, v in report["variants"].items():
        p = v["pipeline"]
        shared = f"{', '.join(p['shared'])} ({p['shared_from']})" if p["shared"] else "-"
        table.add_row(escape(name), escape(shared), escape(", ".join(p["recomputed"]) or "-"),
                      f"{v['compute']['tokens']:,.0f}", f"{v['compute']['train_flops']:.3g}")
    return table


def print_report(report: dict[str, Any]) -> None:
    console = Console(width=max(Console().width, 120))
    console.print(sharing_table(report))
    console.print(comparison_table(report))


def ablate(args: argparse.Namespace) -> int:
    """`tokenmill ablate CONFIG`, `tokenmill ablate validate CONFIG`, `tokenmill ablate report DIR`."""
    from tokenmill.ablate.config import load_ablate_config
    from tokenmill.ablate.validate import problems
    from tokenmill.errors import TokenmillError

    words = args.args
    if len(words) == 2 and words[0] == "validate":
        config = load_ablate_config(words[1])
        found = problems(config)
        for line in found:
            print(line, file=sys.stderr)
        if found:
            return 2
        print(f"{words[1]}: {len(config.names)} variants, {len(config.seeds)} seeds, {config.proxy.steps} steps "
              f"each: valid")
        return 0
    if len(words) == 2 and words[0] == "report":
        import json

        from tokenmill.ablate.report import write_report

        path = write_report(Path(words[1]))
        print_report(json.loads(path.read_text(encoding="utf-8")))
        print(f"report: {path}")
        return 0
    if len(words) != 1:
        raise TokenmillError("usage: tokenmill ablate CONFIG | tokenmill ablate validate CONFIG | "
                             "tokenmill ablate report DIR")
    import json

    from tokenmill.ablate.ablation import run_ablation

    config = load_ablate_config(words[0])
    result = run_ablation(config, say=lambda text: print(text, file=sys.stderr, flush=True),
                          ray_address=args.ray_address)
    print_report(json.loads(Path(result["report"]).read_text(encoding="utf-8")))
    print(f"proxy runs trained now: {result['trained_now']}, found finished: {result['found_finished']}; "
          f"report: {result['report']}")
    return 0
