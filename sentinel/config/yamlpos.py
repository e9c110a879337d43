"""Load YAML into plain Python values while remembering where every key sits.

Configuration errors must name `file:line: key.path`, but PyYAML's
`safe_load` forgets positions. Here the document is composed into nodes
(which carry marks) and built by hand, recording the 1-based line of every
mapping key and sequence item under its path, e.g.
`("targets", 0, "scrape_interval") -> 12`. Duplicate keys, which PyYAML
silently collapses to the last one, are reported instead.

Hostile or broken files end in a YamlSyntaxError with a line, never a
traceback or a stall: control characters (PyYAML's reader refuses them
before parsing starts), nesting too deep for the recursive composer, and
alias bombs ("billion laughs": nine aliases of nine aliases of ... expand a
1 KB file to 10^9 nodes). Aliases are counted as they would expand, on the
composed graph and in time linear in its size, and a document expanding to
more than MAX_EXPANDED_NODES nodes is refused before anything walks it,
like go-yaml's "document contains excessive aliasing" that Prometheus's
own config and rule loading rely on. `compose` gives the checked node tree
to loaders that walk nodes themselves (the rule loader).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import yaml

Path = tuple[str | int, ...]

# Far above any real config or rule file (a thousand targets or rules are a
# few tens of thousands of nodes), far below what takes seconds to build.
MAX_EXPANDED_NODES = 250_000
# PyYAML's composer recurses per level; this stays far from Python's limit.
MAX_DEPTH = 100


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses nesting deeper than MAX_DEPTH, at the line where it goes too deep."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nesting deeper than {MAX_DEPTH} levels",
                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


@dataclass(frozen=True, slots=True)
class YamlProblem:
    """One problem found while reading YAML: where (1-based line), what path, and why."""

    line: int
    path: Path
    message: str


class YamlSyntaxError(Exception):
    """The text is not valid YAML; `line` and `column` are 1-based (0 when unknown)."""

    def __init__(self, line: int, message: str, column: int = 0) -> None:
        super().__init__(message)
        self.line = line
        self.column = column
        self.message = message


@dataclass(frozen=True, slots=True)
class Positioned:
    """A loaded document: plain values, key/item lines by path, and non-fatal problems."""

    data: Any
    lines: dict[Path, int]
    problems: tuple[YamlProblem, ...]

    def line_of(self, path: Path) -> int:
        """The line of `path`, or of its nearest ancestor that has one (1 for the root)."""
        for n in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:n]))
            if line is not None:
                return line
        return 1


def load_positioned(text: str) -> Positioned:
    """Parse one YAML document; raise YamlSyntaxError with the line on malformed text."""
    with _errors_with_lines(text):
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                check_expansion(node)
            builder = _Builder(loader)
            data = builder.build(node, ()) if node is not None else None
        finally:
            loader.dispose()
    return Positioned(data, builder.lines, tuple(builder.problems))


def compose(text: str) -> yaml.Node | None:
    """The node tree of one YAML document, checked like `load_positioned`'s."""
    with _errors_with_lines(text):
        node = yaml.compose(text, Loader=_Loader)
        if node is not None:
            check_expansion(node)
    return node


@contextmanager
def _errors_with_lines(text: str) -> Iterator[None]:
    """Turns every way PyYAML fails on bad text into a YamlSyntaxError with a position."""
    try:
        yield
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or str(exc)
        raise YamlSyntaxError(mark.line + 1 if mark else 0, f"YAML syntax error: {problem}",
                              mark.column + 1 if mark else 0) from None
    except yaml.reader.ReaderError as exc:
        # Raised before parsing, by position in the text: a control character.
        line, column = _line_col(text, exc.position)
        raise YamlSyntaxError(line, f"YAML syntax error: control character "
                                    f"{exc.character:#04x} is not allowed", column) from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(0, f"YAML syntax error: {exc}") from None
    except RecursionError:
        raise YamlSyntaxError(0, "YAML syntax error: nesting too deep") from None


def _line_col(text: str, position: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    line_start = text.rfind("\n", 0, position) + 1
    return text.count("\n", 0, position) + 1, position - line_start + 1


def check_expansion(root: yaml.Node, limit: int = MAX_EXPANDED_NODES) -> None:
    """Raise YamlSyntaxError when aliases would expand `root` past `limit` nodes.

    PyYAML composes an alias as a second reference to the anchored node, so
    the graph is small; the size it would have as a tree is counted here by
    memo over distinct nodes (each visited once, iteratively: no recursion
    limit). A node that contains itself (`&a [*a]`) is refused too.
    """
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            total = 1 + sum(size[id(c)] for c in _children(node))
            size[key] = total
            if total > limit:
                line, column = node.start_mark.line + 1, node.start_mark.column + 1
                raise YamlSyntaxError(line, f"YAML aliases expand this node to more than "
                                            f"{limit} nodes (an alias bomb?)", column)
            continue
        if key in size:
            continue
        if key in on_path:
            raise YamlSyntaxError(node.start_mark.line + 1, "YAML alias refers to a node "
                                  "that contains it", node.start_mark.column + 1)
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


class _Builder:
    """Builds plain values from nodes, recording lines and duplicate keys."""

    def __init__(self, loader: _Loader) -> None:
        self.loader = loader
        self.lines: dict[Path, int] = {(): 1}
        self.problems: list[YamlProblem] = []

    def build(self, node: yaml.Node, path: Path) -> Any:
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            out = []
            for i, item in enumerate(node.value):
                self.lines[path + (i,)] = item.start_mark.line + 1
                out.append(self.build(item, path + (i,)))
            return out
        return self.loader.construct_object(node, deep=True)

    def _mapping(self, node: yaml.MappingNode, path: Path) -> dict[Any, Any]:
        # Resolves `<<: *anchor` merge keys the way SafeLoader would.
        self.loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.loader.construct_object(key_node, deep=True)
            if not isinstance(key, str | int | float | bool) and key is not None:
                line = key_node.start_mark.line + 1
                self.problems.append(YamlProblem(line, path, "mapping keys must be scalars"))
                continue
            line = key_node.start_mark.line + 1
            key_path: Path = path + (key,)  # type: ignore[operator]
            if key in out:
                first = self.lines.get(key_path, 0)
                self.problems.append(YamlProblem(
                    line, key_path, f"duplicate key (first defined on line {first})"))
                continue
            self.lines[key_path] = line
            out[key] = self.build(value_node, key_path)
        return out
