"""The package's modules form no import cycle (issue 22): every import counts, lazy ones inside
functions and those under ``TYPE_CHECKING`` too (a module that names another's types depends on it).

Plugin discovery (``plugins/target_registry.py`` importing every target module by its computed name) is not
an import statement and is not counted: it is how targets register, from the bottom up.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "edge_export"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module of the package ``name`` imports, wherever the import statement is."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # "from pkg import mod" depends on pkg.mod when that is a module, else on pkg
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_walk_sees_lazy_and_type_checking_imports():
    """The check can fail: a cycle made of a lazy import and a TYPE_CHECKING one is found."""
    graph = import_graph()
    assert "edge_export.options" in graph["edge_export.api"]  # a module-level import
    assert "edge_export.stages.test_vectors" in graph["edge_export.api"]  # a lazy one
    graph["edge_export.options"] = {*graph["edge_export.options"], "edge_export.api"}
    assert any({"edge_export.api", "edge_export.options"} <= set(c) for c in cycles(graph))


def test_no_module_below_api_imports_api():
    above = {"edge_export", "edge_export.cli", "edge_export.__main__"}  # the public facade and the shell over it
    importers = sorted(name for name, deps in import_graph().items() if "edge_export.api" in deps and name not in above)
    assert not importers, importers
