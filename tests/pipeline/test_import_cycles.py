"""No import cycle between tokenmill's modules or between its packages, lazy and type-only imports included (read
from the AST), and every package edge pointing down the layers drawn in docs/architecture.md.

A lazy import hides a cycle from Python, and an import under `if TYPE_CHECKING:` hides one from the interpreter
altogether, but neither from the reader: two modules that need each other are one module in two files. An edge goes
to the module an import names (`from tokenmill.pipeline import storage` -> `tokenmill.pipeline.storage`), not to
its parent packages, which Python imports first but which are not what the importer depends on.
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


def _imports(tree: ast.AST, type_checking: bool = True):
    """Every Import and ImportFrom node, at any depth (under `if TYPE_CHECKING:` too, unless `type_checking` is off)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if not type_checking and isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph(type_checking: bool = True) -> dict[str, set[str]]:
    modules = module_names()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path)), type_checking):
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
    return [shortest_cycle(graph, component) or component for component in components]


def shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str] | None:
    """Breadth-first from the component's first module, inside the component, back to it: the shortest cycle
    through it (None if there is none)."""
    members = set(component)
    start = component[0]
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
    return found


def test_the_graph_sees_lazy_and_type_checking_imports():
    graph = import_graph()
    assert "tokenmill.pipeline.contract" in graph["tokenmill.pipeline.map_phase"]
    # The config imports the registry; the registry no longer imports the config, even for its types.
    assert "tokenmill.pipeline.config" not in graph["tokenmill.pipeline.registry"]

    # runfolder imports the registry inside a function.
    assert "tokenmill.pipeline.registry" in graph["tokenmill.pipeline.runfolder"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_cycle_between_tokenmill_modules():
    found = cycles(import_graph())
    assert not found, "import cycles (lazy imports included):\n" + "\n".join(" -> ".join(c) for c in found)


def test_type_checking_imports_are_edges_unless_left_out():
    """An import under `if TYPE_CHECKING:` is an edge by default, none when left out."""
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a import b\nimport c\n")

    def names(nodes):
        return sorted(n.module if isinstance(n, ast.ImportFrom) else n.names[0].name for n in nodes)

    assert names(_imports(tree)) == ["a", "c", "typing"]
    assert names(_imports(tree, type_checking=False)) == ["c", "typing"]


LAYERS = [
    ["commands"],
    ["inspect", "manifests", "demo", "train", "ablate"],
    ["stages"],
    ["classifier"],
    ["pipeline"],
    ["readers", "loader"],
    ["sources"],
    ["text", "dedup", "subdoc", "fasttext", "sampling"],
    ["tokenize", "documents", "config_base", "json_diff", "digest", "markers", "discovery", "errors", "tokenmill"],
]
"""The packages from commands down to formats, as docs/architecture.md draws them: an import goes down, or stays in
its package. `commands` is every `*/commands.py` (a command's wiring, wherever it lives), `cli` and `__main__`."""


def package_of(module: str) -> str:
    parts = module.split(".")
    if parts[-1] == "commands" or module in ("tokenmill.cli", "tokenmill.__main__"):
        return "commands"
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        edges = out.setdefault(package_of(module), set())
        edges.update(package_of(t) for t in targets if package_of(t) != package_of(module))
    return out


def test_no_import_cycle_between_packages():
    """Package edges (tokenize <-> inspect, classifier <-> stages were cycles no module cycle showed)."""
    found = cycles(package_graph(import_graph()))
    assert not found, "package cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_every_package_edge_points_down_the_layers():
    """An import goes to a package of the same layer or one below (same-layer edges are kept acyclic above)."""
    layer = {name: i for i, names in enumerate(LAYERS) for name in names}
    packages = package_graph(import_graph())
    assert set(packages) <= set(layer), f"packages missing from LAYERS (and docs/architecture.md): {set(packages) - set(layer)}"
    upward = [f"{a} -> {b}" for a, targets in sorted(packages.items()) for b in sorted(targets) if layer[b] < layer[a]]
    assert not upward, "imports pointing up the layers:\n" + "\n".join(upward)
    assert package_graph({"tokenmill.text.x": {"tokenmill.stages.y"}}) == {"text": {"stages"}}  # what the check reads


def test_the_architecture_doc_draws_the_layers_the_test_checks():
    doc = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    for names in LAYERS:
        row = next((line for line in doc.splitlines() if line.startswith("| ") and all(f"`{n}`" in line for n in names)),
                   None)
        assert row is not None, f"docs/architecture.md has no layer row naming {names}"
