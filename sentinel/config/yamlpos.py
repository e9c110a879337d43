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
composed graph and in time linear in its size, and a document whose aliases
add more than MAX_EXPANDED_NODES nodes to it is refused before anything
walks it, like go-yaml's "document contains excessive aliasing" that
Prometheus's own config and rule loading rely on. The budget is for what
aliases add, not for the nodes written out in the file (those cost their
bytes): a 50,000-target file without an alias has ~150,000 nodes and was
refused as a bomb when the budget counted every node (issue 49). `compose`
gives the checked node tree to loaders that walk nodes themselves (the rule
loader). libyaml scans and parses where PyYAML has it (`_CLoader`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import yaml

Path = tuple[str | int, ...]

# The nodes aliases may add to a document: far above any real use of anchors (shared
# defaults), far below what takes seconds to build. Nodes written out in the file do
# not count against it.
MAX_EXPANDED_NODES = 250_000
# PyYAML's composer recurses per level; this stays far from Python's limit.
MAX_DEPTH = 100


class _Depth:
    """A composer that refuses nesting deeper than MAX_DEPTH, at the line where it goes too deep."""

    _depth = 0
    aliased = False  # whether the document uses an alias: only then can it be a bomb

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        if self.check_event(yaml.AliasEvent):  # type: ignore[attr-defined]
            self.aliased = True
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nesting deeper than {MAX_DEPTH} levels",
                    self.peek_event().start_mark)  # type: ignore[attr-defined]
            return super().compose_node(parent, index)  # type: ignore[misc, no-any-return]
        finally:
            self._depth -= 1


class _PyLoader(_Depth, yaml.SafeLoader):
    """Pure-Python PyYAML, where libyaml is not installed."""


# libyaml's scanner and parser, when PyYAML was built with it (its wheels are).
_CParser: Any = getattr(getattr(yaml, "cyaml", None), "CParser", None)

if _CParser is not None:
    class _CLoader(_Depth, yaml.composer.Composer, _CParser,  # type: ignore[misc, valid-type]
                   yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
        """libyaml scans and parses (issue 49: pure-Python scanning was ~5 CPU-s per
        10,000 targets); composing stays in Python, so the depth check and the marks
        are the same, and the reader's check for control characters runs first
        (`_check_characters`), by character position, as PyYAML's own reader does."""

        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

    _Loader: Any = _CLoader
else:  # pragma: no cover (PyYAML wheels ship libyaml)
    _Loader = _PyLoader


def _check_characters(text: str) -> None:
    """PyYAML's reader check for characters YAML does not allow, on the whole text."""
    found = yaml.reader.Reader.NON_PRINTABLE.search(text)
    if found is not None:
        raise yaml.reader.ReaderError("<text>", found.start(), ord(found.group()), "unicode",
                                      "special characters are not allowed")


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
        _check_characters(text)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is not None and loader.aliased:
                check_expansion(node)
            builder = _Builder(loader)
            data = builder.build(node, ()) if node is not None else None
        finally:
            loader.dispose()
    return Positioned(data, builder.lines, tuple(builder.problems))


def compose(text: str) -> yaml.Node | None:
    """The node tree of one YAML document, checked like `load_positioned`'s."""
    with _errors_with_lines(text):
        _check_characters(text)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
        if node is not None and loader.aliased:
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
    """Raise YamlSyntaxError when aliases would add more than `limit` nodes to `root`.

    PyYAML composes an alias as a second reference to the anchored node, so
    the graph is small; the size it would have as a tree is counted here by
    memo over distinct nodes (each visited once, iteratively: no recursion
    limit). A node is refused as soon as its tree is more than `limit` larger
    than the distinct nodes seen so far (which include all of its own): only
    aliases can make up the difference, so a file without any is never
    refused, and a bomb is refused at the first anchor that crosses the line.
    A node that contains itself (`&a [*a]`) is refused too.
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
            if total - len(size) > limit:
                line, column = node.start_mark.line + 1, node.start_mark.column + 1
                raise YamlSyntaxError(line, f"YAML aliases add more than {limit} nodes "
                                            f"to this node (an alias bomb?)", column)
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
