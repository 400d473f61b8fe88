"""`tokenmill manifest diff A B` and `tokenmill manifest show RUN`: the command bodies and their rich tables.

The parser is `tokenmill.cli`'s. The computations live in `diff.py` and `show.py` and return plain dicts; this module
only prints them, names from the run folder (stages, sources, files) and texts from documents escaped for rich.
`--json` prints that dict and nothing else on stdout. Exit codes: 0 identical / consistent, 1 different / stale,
2 (raised `TokenmillError`, printed by the CLI) for a path that is not a run or a manifest.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _out() -> Console:
    return Console(width=max(Console().width, 120))


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=1, ensure_ascii=False))


def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _d(value: int) -> str:
    """A delta: signed, coloured when not zero."""
    if not value:
        return "[dim]0[/]"
    return f"[green]+{value:,}[/]" if value > 0 else f"[red]{value:,}[/]"


def _mb(value: int) -> str:
    return f"{value / 1e6:.3f}"


def _dmb(value: int) -> str:
    if not value:
        return "[dim]0[/]"
    return f"[green]+{value / 1e6:.3f}[/]" if value > 0 else f"[red]{value / 1e6:.3f}[/]"


def _table(title: str, columns: list[str], left: tuple[str, ...]) -> Table:
    table = Table(title=title, title_justify="left", show_edge=False, min_width=len(title))
    for col in columns:
        table.add_column(col, justify="left" if col in left else "right", no_wrap=col in left)
    return table


def _value(v: Any) -> str:
    return escape(json.dumps(v, ensure_ascii=False)) if v is not None else "[dim](absent)[/]"


# ---------------------------------------------------------------------------------------------------------- diff


def manifest_diff(args: argparse.Namespace) -> int:
    from tokenmill.errors import TokenmillError
    from tokenmill.manifests.diff import diff_runs

    if args.examples < 0:
        raise TokenmillError("--examples: must be 0 or more")
    result = diff_runs(args.a, args.b, examples=args.examples)
    if args.json:
        _print_json(result)
    else:
        print_diff(result, _out())
    return 0 if result["identical"] else 1


def print_diff(result: dict[str, Any], out: Console) -> None:
    out.print(f"A: {escape(result['a'])}\nB: {escape(result['b'])}")
    for stage in result["stages"]:
        name, status = stage["stage"], stage["status"]
        if status != "different":
            colour = "green" if status == "identical" else "yellow"
            out.print(f"\n[bold]{escape(name)}[/]: [{colour}]{status}[/]")
            continue
        _print_stage_diff(stage, out)
    different = [s["stage"] for s in result["stages"] if s["status"] != "identical"]
    out.print("\n[green]identical[/]" if result["identical"] else f"\n[yellow]different:[/] {escape(', '.join(different))}")


def _print_stage_diff(stage: dict[str, Any], out: Console) -> None:
    name = escape(stage["stage"])  # a stage is a folder name: printed inside markup below
    why = _why_different(stage)
    out.print(f"\n[bold]{name}[/]: [yellow]different[/] ({'; '.join(why) or 'same config and input'})")
    for key in ("report", "config"):
        if stage.get(key):
            table = _table(f"{name}: {key}", ["key", "A", "B"], ("key", "A", "B"))
            for c in stage[key]:
                table.add_row(escape(c["key"]), _value(c["a"]), _value(c["b"]))
            out.print(table)
    _print_source_rows(name, stage, out)
    _print_changed_drops(name, stage, out)
    if stage.get("tokens"):
        _print_tokens(name, stage["tokens"], out)
    _print_shards(name, stage["shards"], out)
    if stage["documents"]:
        _print_documents(name, stage["documents"], out)


def _why_different(stage: dict[str, Any]) -> list[str]:
    """What makes a different stage different, as phrases: its config, its input, its schema, or only its report."""
    inp = stage["input"]
    why = []
    if stage["config"]:
        why.append(f"{len(stage['config'])} config key(s) changed")
    if inp["changed"]:
        why.append(f"its input ({escape(inp['b'])}) changed" if inp["a"] == inp["b"]
                   else f"input {escape(inp['a'])} -> {escape(inp['b'])}")
    if stage["schema_version"]["a"] != stage["schema_version"]["b"]:
        why.append(f"schema version {stage['schema_version']['a']} -> {stage['schema_version']['b']}")
    if stage.get("report") and not why:
        why.append(f"same config and input; {len(stage['report'])} report value(s) differ")
    return why


def _print_source_rows(name: str, stage: dict[str, Any], out: Console) -> None:
    table = _table(f"{name}: documents and bytes (sources, and subsets that changed)",
                   ["source", "subset", "in A", "in B", "Δ in", "kept A", "kept B", "Δ kept", "MB A",
                    "MB B", "Δ MB"], ("source", "subset"))
    rows = [r for r in stage["by_source"] if r["subset"] is None or any(r["delta"].values())]
    t = stage["totals"]
    for r in [{**r, "source": escape(r["source"])} for r in rows] + [{"source": "[bold]total[/]", "subset": None, **t}]:
        a, b, d = r["a"], r["b"], r["delta"]
        table.add_row(r["source"], escape(r["subset"] or ""),
                      _n(a["docs_in"]), _n(b["docs_in"]), _d(d["docs_in"]), _n(a["docs_out"]), _n(b["docs_out"]),
                      _d(d["docs_out"]), _mb(a["bytes_out"]), _mb(b["bytes_out"]), _dmb(d["bytes_out"]))
    out.print(table)


def _print_changed_drops(name: str, stage: dict[str, Any], out: Console) -> None:
    changed_drops = [r for r in stage["drops"] if r["delta"]]
    if changed_drops:
        table = _table(f"{name}: dropped documents that changed", ["source", "reason", "A", "B", "Δ"],
                       ("source", "reason"))
        for r in changed_drops:
            table.add_row(escape(r["source"]), escape(r["reason"]), _n(r["a"]), _n(r["b"]), _d(r["delta"]))
        out.print(table)


def _print_tokens(name: str, tok: dict[str, Any], out: Console) -> None:
    table = _table(f"{name}: tokens", ["split / source", "subset", "docs A", "docs B", "tokens A", "tokens B", "Δ tokens"],
                   ("split / source", "subset"))
    for r in tok["splits"]:
        table.add_row(f"[bold]{escape(r['split'])}[/]", "", "", "", _n(r["a"]), _n(r["b"]), _d(r["delta"]))
    for r in tok["by_source"]:
        if r["subset"] is None or any(r["delta"].values()):
            table.add_row(escape(r["source"]), escape(r["subset"] or ""), _n(r["a"]["documents"]),
                          _n(r["b"]["documents"]), _n(r["a"]["tokens"]), _n(r["b"]["tokens"]),
                          _d(r["delta"]["tokens"]))
    out.print(table)


def _print_shards(name: str, shards: dict[str, Any], out: Console) -> None:
    out.print(f"{name}: shards: {len(shards['changed'])} changed content, {len(shards['only_in_a'])} only in A, "
              f"{len(shards['only_in_b'])} only in B")
    if shards["changed"]:
        table = _table("", ["shard", "source", "kept A", "kept B"], ("shard", "source"))
        for s in shards["changed"][:10]:
            table.add_row(escape(s["path"]), escape(s["source"]), _n(s["a_docs"]), _n(s["b_docs"]))
        out.print(table)
        if len(shards["changed"]) > 10:
            out.print(f"  [dim]... {len(shards['changed']) - 10} more (--json lists all)[/]")


def _print_documents(name: str, documents: list[dict[str, Any]], out: Console) -> None:
    table = _table(f"{name}: documents that differ (kept in A only, in B only, or in both with another text)",
                   ["source", "removed (A only)", "added (B only)", "text changed (same id)"], ("source",))
    for r in documents:
        table.add_row(escape(r["source"]), _n(r["removed"]), _n(r["added"]), _n(r.get("changed", 0)))
    out.print(table)
    for r in documents:
        for kind in ("removed", "added"):
            for ex in r[f"{kind}_examples"]:
                reason = f" (dropped in {'B' if kind == 'removed' else 'A'}: {ex['other_run_drop_reason']})" \
                    if ex["other_run_drop_reason"] else ""
                out.print(f"  {'-' if kind == 'removed' else '+'} {escape(r['source'])} {escape(str(ex['id']))}"
                          f"{escape(reason)}: [dim]{escape(ex['preview'])}[/]", overflow="fold")
        for ex in r.get("changed_examples", []):
            out.print(f"  ~ {escape(r['source'])} {escape(str(ex['id']))}: text differs from character "
                      f"{ex['position']:,} (A {ex['a']['chars']:,} characters, B {ex['b']['chars']:,})",
                      overflow="fold")
            for side in ("a", "b"):
                lead = "..." if ex["start"] else ""
                out.print(f"      {side.upper()}: [dim]{lead}{escape(_excerpt(ex[side]['excerpt']))}[/]", overflow="fold")


def _excerpt(text: str) -> str:
    """An excerpt with its invisible differences shown: newlines, tabs and other non-printing characters escaped."""
    return repr(text)[1:-1]


# ---------------------------------------------------------------------------------------------------------- show


def manifest_show(args: argparse.Namespace) -> int:
    from tokenmill.manifests.show import show_run

    result = show_run(args.run, config_path=args.config)
    if args.json:
        _print_json(result)
    else:
        print_show(result, _out())
    return 0 if result["consistent"] else 1


_STATUS_COLOUR = {"ok": "green", "stale": "red", "input missing": "red", "stale upstream": "yellow",
                  "incomplete": "yellow", "missing": "yellow", "inconsistent": "red"}


def print_show(result: dict[str, Any], out: Console) -> None:
    table = Table(title=f"lineage of {escape(result['run'])}", title_justify="left")
    for col in ("stage", "status", "input", "docs in", "kept", "dropped", "tokens", "config", "seconds"):
        table.add_column(col, justify="left" if col in ("stage", "status", "input", "config") else "right",
                         no_wrap=True)
    for r in result["stages"]:
        status = f"[{_STATUS_COLOUR.get(r['status'], 'white')}]{r['status']}[/]"
        if "docs_in" not in r:
            table.add_row(escape(r["stage"]), status, escape(r["input"].get("stage") or "-"), *["-"] * 6)
            continue
        inp = r["input"]
        if inp["stage"] is None:
            where = f"{inp['source_files']['files']:,} source files"
            mark = {True: " ✓", False: " ✗", None: ""}[inp["matches"]]
        else:
            where, mark = inp["stage"], " ✓" if inp["matches"] else " ✗"
        table.add_row(escape(r["stage"]), status, escape(where + mark), _n(r["docs_in"]), _n(r["docs_out"]), _n(r["dropped"]),
                      _n(sum(r["tokens"].values())) if r["tokens"] else "", r["config_hash"][:10],
                      f"{r['seconds']:.1f}" if r.get("seconds") is not None else "-")
    out.print(table)
    out.print("[dim]input: the stage it read (✓: its recorded manifest hash is that stage's manifest now); "
              "config: the stage's config hash[/]")

    drops = _table("dropped by reason", ["stage", "reason", "docs", "% of stage input"], ("stage", "reason"))
    for r in result["stages"]:
        for reason, docs in sorted(r.get("drops", {}).items(), key=lambda kv: (-kv[1], kv[0])):
            drops.add_row(escape(r["stage"]), escape(reason), _n(docs), f"{100 * docs / r['docs_in']:.2f}" if r["docs_in"] else "-")
    if drops.row_count:
        out.print(drops)
    for r in result["stages"]:
        if r.get("tokens"):
            out.print(f"{escape(r['stage'])}: tokens " + escape(", ".join(f"{k} {v:,}" for k, v in r["tokens"].items())))

    stages = [r["stage"] for r in result["stages"] if "by_source" in r]
    has_tokens = any("tokens" in cell for cell in result["by_source"].values())
    lineage = _table("documents per source after each stage", ["source", "read", *map(escape, stages)] + (["tokens"] if has_tokens else []),
                     ("source",))
    for source, cell in result["by_source"].items():
        lineage.add_row(escape(source), _n(cell.get("read")), *(_n(cell.get(s)) for s in stages),
                        *([_n(cell.get("tokens"))] if has_tokens else []))
    out.print(lineage)

    for r in result["stages"]:
        for problem in r["problems"]:
            out.print(f"[{_STATUS_COLOUR.get(r['status'], 'white')}]{escape(r['stage'])}: {escape(problem)}[/]")
    for entry in result["superseded"]:
        out.print(f"[dim]_superseded/{escape(entry['time'])}: {escape(', '.join(entry['stages']))} moved aside[/]")
    if result["consistent"]:
        out.print("[green]every stage read the manifest of its input stage as it is now[/]")
