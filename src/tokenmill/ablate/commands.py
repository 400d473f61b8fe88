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
        stopped = report["variants"][name].get("stopped_at")
        for metric, c in metrics.items():
            last = c["points"][-1]
            held = c["held_from"]
            style = {"better": "green", "worse": "red"}.get(c["verdict"], "")
            verdict = f"[{style}]{c['verdict']}[/]" if style else c["verdict"]
            if stopped:  # a variant stopped early is compared at its last point, with the base at the same step
                verdict += f" (stopped at step {stopped['step']})"
            base_mean = next(b["mean"] for b in base[metric] if b["step"] == last["step"])
            table.add_row(escape(name), escape(metric), _num(base_mean),
                          _num(report["variants"][name]["metrics"][metric][-1]["mean"]),
                          f"{_num(last['difference'], '+.4f')} [{_num(last['low'], '+.4f')}, {_num(last['high'], '+.4f')}]",
                          verdict, f"step {held['step']} ({held['fraction_of_budget']:.0%})")
    return table


def _agreed(share: dict[str, Any]) -> str:
    if not share["of"]:
        return "-"
    return f"{share['agree']}/{share['of']} ({share['agreement']:.0%})"


def early_signal_table(report: dict[str, Any]) -> Table:
    """Per metric and over all: how often the verdict at 25% and 50% of the budget (the last evaluation point by
    then), and at every earlier point, was the final verdict, over the variants trained to the end."""
    es = report["early_signal"]
    left = f"; left out, stopped early: {', '.join(es['left_out_stopped'])}" if es["left_out_stopped"] else ""
    table = Table(title=f"early signal: the verdict at an earlier point against the final one ({len(es['variants'])} "
                        f"variant(s) against the base{left})", title_justify="left")
    table.add_column("metric")
    for row in es["at"]:
        where = "no point yet" if row["step"] is None else f"step {row['step']}"
        table.add_column(f"at {row['fraction']:.0%} ({where})", justify="right")
    table.add_column("every earlier point", justify="right")
    rows = [(m, part) for m, part in es["by_metric"].items()] + [("all metrics", es)]
    for name, part in rows:
        table.add_row(escape(name), *[_agreed(r) for r in part["at"]], _agreed(part["every_point"]))
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


def early_stop_table(report: dict[str, Any]) -> Table:
    """Per variant: where the rule stopped it (or would have), the compute that saved, its final verdict against
    the best; then the rule checked afterwards on the runs trained to the end, per patience."""
    es = report["early_stop"]
    how = "stopped" if es["apply"] else "would stop (apply: false)"
    table = Table(title=f"early stopping on {es['metric']}: {how} after {es['patience']} point(s) behind the best "
                        f"(best at the end: {es['best_at_end']})", title_justify="left")
    for col in ("variant", "stopped at", "saved tokens", "saved FLOPs", "final verdict against the best"):
        table.add_column(col, justify="left" if col in ("variant", "final verdict against the best") else "right")
    for name, v in es["variants"].items():
        at = f"step {v['step']} ({v['fraction_of_budget']:.0%})" if "step" in v else "-"
        saved = v.get("saved")
        table.add_row(escape(name), at, f"{saved['tokens']:,.0f}" if saved else "-",
                      f"{saved['train_flops']:.3g}" if saved else "-",
                      v["final_verdict_against_best"] or "(stopped)")
    return table


def early_check_table(report: dict[str, Any]) -> Table:
    table = Table(title="the rule checked on the runs trained to the end: stops that the final verdict contradicts",
                  title_justify="left")
    for col in ("patience", "variants checked", "would stop", "wrong", "wrong fraction"):
        table.add_column(col, justify="right")
    for row in report["early_stop"]["check"]:
        fraction = "n/a" if row["wrong_fraction"] is None else f"{row['wrong_fraction']:.2f}"
        table.add_row(str(row["patience"]), str(row["runs_checked"]), str(row["would_stop"]), str(row["wrong"]),
                      fraction)
    return table


def mixture_table(report: dict[str, Any]) -> Table:
    """Per source: natural and predicted weights; the check's target loss per arm and the difference."""
    m = report["mixture"]
    check = m["check"]
    d = check["difference"]
    table = Table(title=f"mixture search: {len(m['runs'])} mixtures, LightGBM (cross-validated rank correlation "
                        f"{_num(m['fit']['cv_rank_correlation'], '.2f')}); written to {m['train_config']}",
                  title_justify="left")
    for col in ("source", "natural", "predicted", "natural: held-out bpb", "predicted: held-out bpb"):
        table.add_column(col, justify="left" if col == "source" else "right")
    arms = check["arms"]
    for source in m["sources"]:
        table.add_row(escape(source), f"{m['natural'][source]:.3f}", f"{m['predicted'][source]:.3f}",
                      _num(arms["natural"]["per_source_bpb"].get(source)),
                      _num(arms["predicted"]["per_source_bpb"].get(source)))
    nat, pre = arms["natural"]["loss"], arms["predicted"]["loss"]
    table.add_row(f"target ({escape(', '.join(m['target']))})", "", "",
                  f"{_num(nat['mean'])} [{_num(nat['low'])}, {_num(nat['high'])}]",
                  f"{_num(pre['mean'])} [{_num(pre['low'])}, {_num(pre['high'])}]")
    table.caption = (f"predicted - natural: {_num(d['predicted_minus_natural'], '+.4f')} [{_num(d['low'], '+.4f')}, "
                     f"{_num(d['high'], '+.4f')}] bits per byte over {len(check['seeds'])} seed(s): {d['verdict']}")
    return table


def print_report(report: dict[str, Any]) -> None:
    console = Console(width=max(Console().width, 120))
    if "variants" in report:
        console.print(sharing_table(report))
        console.print(comparison_table(report))
        console.print(early_signal_table(report))
    if "early_stop" in report:
        console.print(early_stop_table(report))
        console.print(early_check_table(report))
    if "mixture" in report:
        console.print(mixture_table(report))


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
        more = "" if config.mixture is None else f", a mixture search of {config.mixture.runs} runs"
        more += "" if config.early_stop is None else f", early stopping (patience {config.early_stop.patience})"
        print(f"{words[1]}: {len(config.names)} variants, {len(config.seeds)} seeds, {config.proxy.steps} steps "
              f"each{more}: valid")
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
