"""The reader registry: each reader module declares its formats, the sources side finds them by name and imports none."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tokenmill.errors import ConfigError
from tokenmill.pipeline.config import parse_config
from tokenmill.sources import reader as reader_module
from tokenmill.sources.formats import READERS, reader_drop_reasons
from tokenmill.sources.reader import COMMON_DROP_REASONS, Reader, Record

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "tokenmill"


def _documented_formats() -> set[str]:
    """The format names in the first column of docs/readers.md's table (`csv`, `tsv` share a row)."""
    names = set()
    for line in (ROOT / "docs" / "readers.md").read_text(encoding="utf-8").splitlines():
        cells = line.split("|")
        if line.startswith("| `") and len(cells) > 2:
            names |= set(re.findall(r"`([a-z0-9_]+)`", cells[1]))
    return names


def test_every_reader_module_registers_its_formats_and_each_is_documented():
    assert set(READERS) == _documented_formats()
    assert list(READERS) == sorted(READERS)
    for name, reader in READERS.items():
        assert reader.format == name
        assert reader.read.__wrapped__.__module__.startswith("tokenmill.readers.")  # declared by a reader module
    reasons = reader_drop_reasons()
    assert reasons[: len(COMMON_DROP_REASONS)] == COMMON_DROP_REASONS and len(set(reasons)) == len(reasons)
    assert {r for reader in READERS.values() for r in reader.drop_reasons} <= set(reasons)


def test_a_format_name_is_taken_once():
    def read_a(path, source, display):
        yield Record(0, "a")

    def read_b(path, source, display):
        yield Record(0, "b")

    try:
        first = Reader("test_only_format", read_a)
        assert READERS["test_only_format"] is first
        again = Reader("test_only_format", read_a)  # the same declaration imported again (a module reloaded)
        assert READERS["test_only_format"] is again
        with pytest.raises(TypeError, match=r"'test_only_format' is taken by the reader .*test_formats\..*read_a"):
            Reader("test_only_format", read_b)
        assert READERS["test_only_format"] is again
        with pytest.raises(TypeError, match=r"'jsonl' is taken by the reader tokenmill\.readers\.jsonl\.read_jsonl"):
            Reader("jsonl", read_b)
        assert READERS["jsonl"].read.__wrapped__.__module__ == "tokenmill.readers.jsonl"
    finally:
        reader_module._REGISTRY.pop("test_only_format", None)


def test_an_unknown_format_lists_the_registered_ones(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    with pytest.raises(ConfigError) as err:
        parse_config({"output": "out", "sources": [{"name": "a", "format": "xml", "paths": ["a.jsonl"]}]}, tmp_path)
    assert f"sources[0].format: unknown format 'xml'; known: {', '.join(sorted(READERS))}" in str(err.value)


def test_a_source_config_imports_no_reader_until_a_format_is_looked_up():
    """Loading the config models imports no reader (and none of their libraries); validating a source finds them
    all, by name, with no `import` of a reader anywhere on the sources' or pipeline's side."""
    code = ("import sys, tokenmill.pipeline.config as c; from tokenmill.sources.config import SourceConfig; "
            "before = sorted(m for m in sys.modules if m.startswith('tokenmill.readers.')); "
            "SourceConfig(name='s', format='jsonl', paths=['x']); "
            "print(before, sorted(m for m in sys.modules if m.startswith('tokenmill.readers.')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    before, after = result.stdout.strip().split("] [")
    assert before == "["
    modules = {f"tokenmill.readers.{p.stem}" for p in (SRC / "readers").glob("*.py") if p.stem != "__init__"}
    assert set(re.findall(r"'([\w.]+)'", after)) == modules


def _imported_modules(path: Path) -> set[str]:
    """Every module an import statement in `path` names, at any depth, `if TYPE_CHECKING:` blocks included."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return out


def test_neither_the_sources_nor_the_pipeline_import_a_reader():
    """Readers depend on the sources side (config, registry, URIs), never the reverse: the registry finds them by
    name, so the source config, the globbing and the pipeline form no circle with them (type-only imports too)."""
    found = {str(path.relative_to(SRC)): sorted(m for m in _imported_modules(path)
                                                if m == "tokenmill.readers" or m.startswith("tokenmill.readers."))
             for folder in ("sources", "pipeline") for path in sorted((SRC / folder).rglob("*.py"))}
    assert {path: names for path, names in found.items() if names} == {}
    # Of the pipeline, readers and sources use only the config base classes (the run config imports them).
    upward = {str(path.relative_to(SRC)): sorted(m for m in _imported_modules(path) if m.startswith("tokenmill.pipeline")
                                                 and not m.startswith("tokenmill.config_base"))
              for folder in ("sources", "readers") for path in sorted((SRC / folder).rglob("*.py"))}
    assert {path: names for path, names in upward.items() if names} == {}
