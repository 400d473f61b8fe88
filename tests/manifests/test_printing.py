"""`manifest diff` and `manifest show` print names from the run folder and texts from documents as text: brackets in
them are not rich markup (`[/]` would raise, `[bold]x[/bold]` would vanish)."""

from __future__ import annotations

from rich.console import Console

from tokenmill.manifests.commands import print_diff, print_show

BOLD = "[bold]x[/bold]"
CLOSE = "[/]"


def _console() -> Console:
    return Console(record=True, width=300, color_system=None)


def _tally(n: int) -> dict:
    return {"docs_in": n, "docs_out": n, "bytes_in": 0, "bytes_out": 0}


def test_show_escapes_stage_source_reason_and_problem_names():
    stage = {"stage": f"{BOLD}stage", "status": "stale", "input": {"stage": f"{CLOSE}prev", "matches": False},
             "docs_in": 3, "docs_out": 2, "dropped": 1, "tokens": {f"{CLOSE}split": 5}, "config_hash": "0123456789ab",
             "seconds": 1.0, "drops": {f"{BOLD}reason": 1}, "by_source": {}, "problems": [f"input {CLOSE} changed"]}
    result = {"run": f"runs/{CLOSE}", "stages": [stage], "consistent": False,
              "by_source": {f"{CLOSE}source": {"read": 3, stage["stage"]: 2}},
              "superseded": [{"time": "20260101T000000", "stages": [f"{CLOSE}old"]}]}
    out = _console()
    print_show(result, out)
    text = out.export_text()
    for literal in (f"{BOLD}stage", f"{CLOSE}prev", f"{CLOSE}split", f"{BOLD}reason", f"input {CLOSE} changed",
                    f"runs/{CLOSE}", f"{CLOSE}source", f"{CLOSE}old"):
        assert literal in text, literal


def test_diff_escapes_stage_source_config_and_document_texts():
    different = {
        "stage": f"{CLOSE}dedup", "status": "different", "input": {"a": "[x]", "b": "[x]", "changed": True},
        "config": [{"key": f"k{CLOSE}", "a": 1, "b": BOLD}], "schema_version": {"a": 2, "b": 2}, "report": [],
        "totals": {"a": _tally(1), "b": _tally(1), "delta": _tally(0)},
        "by_source": [{"source": f"{BOLD}src", "subset": None, "a": _tally(1), "b": _tally(2), "delta": _tally(1)}],
        "drops": [], "tokens": None, "shards": {"changed": [], "only_in_a": [], "only_in_b": []},
        "documents": [{"source": f"{BOLD}src", "removed": 1, "added": 0, "changed": 0, "added_examples": [],
                       "removed_examples": [{"id": f"{CLOSE}id", "preview": f"{BOLD} text",
                                             "other_run_drop_reason": None}]}],
    }
    result = {"a": f"A{CLOSE}", "b": "B", "identical": False,
              "stages": [{"stage": f"{BOLD}only", "status": "only in a"}, different]}
    out = _console()
    print_diff(result, out)
    text = out.export_text()
    for literal in (f"A{CLOSE}", f"{BOLD}only", f"{CLOSE}dedup", "its input ([x]) changed", f"k{CLOSE}",
                    f'"{BOLD}"', f"{BOLD}src", f"{CLOSE}id", f"{BOLD} text"):
        assert literal in text, literal
