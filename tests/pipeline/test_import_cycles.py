"""No import cycle between tokenmill's modules, lazy imports inside functions included (read from the AST).

A lazy import hides a cycle from Python but not from the reader: two modules that need each other are one module
in two files. Imports under `if TYPE_CHECKING:` are left out (they never run). An edge goes to the module an
import names (`from tokenmill.pipeline import storage` -> `tokenmill.pipeline.storage`), not to its parent
packages, which Python imports first but which are not what the importer depends on.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def module_names() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "tokenmill").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import and ImportFrom node, at any depth, except under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = name.split(".")
                    base = base[: len(base) - node.level + (1 if is_package else 0)]
                    parent = ".".join(base + ([node.module] if node.module else []))
                else:
                    parent = node.module or ""
                targets = [f"{parent}.{alias.name}" if f"{parent}.{alias.name}" in modules else parent
                           for alias in node.names]
            for target in targets:
                while target and target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]  # `import a.b.c` of a name inside a module
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a path back to its start) per strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan; the graph is small enough for recursion
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    out = []
    for component in components:
        members = set(component)
        start = component[0]
        # Breadth-first from start, inside the component, back to start: the shortest cycle through it.
        paths = {start: [start]}
        queue = [start]
        found = None
        while queue and found is None:
            v = queue.pop(0)
            for w in sorted(graph[v] & members):
                if w == start:
                    found = paths[v] + [start]
                    break
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    queue.append(w)
        out.append(found or component)
    return out


def test_the_graph_sees_lazy_imports_and_skips_type_checking_ones():
    graph = import_graph()
    assert "tokenmill.pipeline.contract" in graph["tokenmill.pipeline.map_phase"]
    # registry.py imports RunConfig under TYPE_CHECKING only; the config imports the registry.
    assert "tokenmill.pipeline.config" not in graph["tokenmill.pipeline.registry"]
    # runfolder imports the registry inside a function.
    assert "tokenmill.pipeline.registry" in graph["tokenmill.pipeline.runfolder"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_cycle_between_tokenmill_modules():
    found = cycles(import_graph())
    assert not found, "import cycles (lazy imports included):\n" + "\n".join(" -> ".join(c) for c in found)
