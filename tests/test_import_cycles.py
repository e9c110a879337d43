"""No import circle inside sentinel/ (issue 38): the layout is a tree of stages, not a knot.

Every module's imports are read with `ast` (module level and inside functions,
`if TYPE_CHECKING:` blocks included: a function-level import is a circle that
only waits for its first call). An import names the module it loads:
`from sentinel.a import b` is `sentinel.a.b` when that is a module, else
`sentinel.a` (its `__init__`). The strongly connected components of that
graph with more than one module are the circles; there must be none.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "sentinel"

# Circles being untied on another branch this round; each entry is the exact set of
# modules in one circle. Remove the entry when that branch lands (the test then keeps
# it from coming back). daemon/app.py ⇄ daemon/takeover.py: helper `reliab`, issue 38.
def module_name(path: Path) -> str:
    """`sentinel/a/b.py` → `sentinel.a.b`; `sentinel/a/__init__.py` → `sentinel.a`."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _absolute(node: ast.ImportFrom, here: str, is_package: bool) -> str:
    """The absolute module an ImportFrom names (relative imports resolved against `here`)."""
    if node.level == 0:
        return node.module or ""
    base = here.split(".") if is_package else here.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imported_modules(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """The sentinel modules `name` imports, anywhere in its body."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            mod = _absolute(node, name, path.name == "__init__.py")
            for alias in node.names:
                if f"{mod}.{alias.name}" in known:
                    yield f"{mod}.{alias.name}"
                elif mod in known:
                    yield mod


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module → the sentinel modules it imports (self-imports left out); read once a session."""
    mods = all_modules()
    known = set(mods)
    return {name: set(imported_modules(name, path, known)) - {name}
            for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
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
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
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


def test_the_graph_sees_function_level_and_relative_imports() -> None:
    graph = import_graph()
    assert len(graph) > 200  # every module was read
    # a function-level import (the CLI loads SQLAlchemy-backed modules late)
    cli_imports = set().union(*(v for k, v in graph.items() if k.startswith("sentinel.cli")))
    assert any(m.startswith("sentinel.incidents") for m in cli_imports)


def test_cycles_finds_a_circle_and_nothing_else() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_sentinel() -> None:
    found = [sorted(c) for c in cycles(import_graph())]
    assert found == [], f"import circles: {found}"
