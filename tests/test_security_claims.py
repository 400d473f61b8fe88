"""Every test docs/security.md names as evidence exists: a claim whose test was renamed or removed checks nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `tests/a/test_x.py::test_name` names a file and a test; a following `::test_other` names another test of that file.
NODE = re.compile(r"`(tests/[\w/]+\.py)?::(test_\w+)")


def named_tests(text: str) -> list[tuple[str, str]]:
    out, current = [], None
    for file, test in NODE.findall(text):
        current = file or current
        assert current, f"::{test} is named before any test file"
        out.append((current, test))
    return out


def test_every_test_named_in_the_security_doc_exists():
    named = named_tests((ROOT / "docs" / "security.md").read_text(encoding="utf-8"))
    assert len(named) > 40  # the parser still reads the doc's way of naming tests
    missing = []
    for file, test in named:
        path = ROOT / file
        tree = ast.parse(path.read_text(encoding="utf-8")) if path.exists() else None
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)} if tree else set()
        if test not in names:
            missing.append(f"{file}::{test}")
    assert not missing, "docs/security.md names tests that do not exist:\n" + "\n".join(missing)


def test_the_parser_carries_the_file_to_the_next_test():
    assert named_tests("`tests/a.py::test_x`, `::test_y` and `tests/b.py::test_z`") == [
        ("tests/a.py", "test_x"), ("tests/a.py", "test_y"), ("tests/b.py", "test_z")]
