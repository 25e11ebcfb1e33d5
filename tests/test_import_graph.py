"""No import cycle inside ``appliance``, counting the imports made inside functions too.

import-linter's layer contracts (``make lint``) hold the packages in order; a cycle between modules of
one package can still hide behind a deferred (function-level) import, as ``vector/sources.py`` and
``vector/gymvec.py`` once did. This builds the module graph from the source with ``ast``: every
``import`` and ``from ... import`` anywhere in a module (a function body, a ``try``), except those under
``if TYPE_CHECKING:``, which run nothing. An import names its deepest module that exists
(``from appliance.measure import noise`` is ``appliance.measure.noise``); the parent packages Python
imports on the way are not edges, or every package's ``__init__`` that re-exports a submodule would
make one.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its ``__init__.py``)."""
    out = {}
    for path in sorted((root / "appliance").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def deepest(dotted: str) -> str:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted

    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:
                    visit_one(other)
            else:
                visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(deepest(a.name) for a in node.names if a.name.split(".")[0] == "appliance")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "appliance":
                return
            for alias in node.names:
                full = f"{module}.{alias.name}"
                found.add(full if full in known else deepest(module))
        else:
            visit(node)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    found.discard(name)
    found.discard("")
    return found


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in edges:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_cycle_finder_sees_a_cycle_behind_a_deferred_import(tmp_path):
    """The checker itself: two modules that import each other, one of them inside a function, are a
    cycle; an import under TYPE_CHECKING is not an edge."""
    package = tmp_path / "appliance"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from appliance.b import g\n\ndef f():\n    return g()\n")
    (package / "b.py").write_text("def g():\n    from appliance import a\n    return a\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from appliance import d\n"
    )
    (package / "d.py").write_text("from appliance import c\n")
    assert cycles(graph(tmp_path)) == [frozenset({"appliance.a", "appliance.b"})]


def test_no_import_cycle_in_the_package_deferred_imports_included():
    found = sorted(sorted(c) for c in cycles(graph()))
    assert not found, f"import cycles (deferred imports included): {found}"
