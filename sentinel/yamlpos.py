"""Load YAML into plain Python values while remembering where every key sits.

Configuration errors must name `file:line: key.path`, but PyYAML's
`safe_load` forgets positions. Here the document is composed into nodes
(which carry marks) and built by hand, recording the 1-based line of every
mapping key and sequence item under its path, e.g.
`("targets", 0, "scrape_interval") -> 12`. Duplicate keys, which PyYAML
silently collapses to the last one, are reported instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class YamlProblem:
    """One problem found while reading YAML: where (1-based line), what path, and why."""

    line: int
    path: Path
    message: str


class YamlSyntaxError(Exception):
    """The text is not valid YAML; `line` is 1-based (0 when unknown)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
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
    loader = yaml.SafeLoader(text)
    builder = _Builder(loader)
    try:
        node = loader.get_single_node()
        data = builder.build(node, ()) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or str(exc)
        raise YamlSyntaxError(line, f"YAML syntax error: {problem}") from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(0, f"YAML syntax error: {exc}") from None
    finally:
        loader.dispose()
    return Positioned(data, builder.lines, tuple(builder.problems))


class _Builder:
    """Builds plain values from nodes, recording lines and duplicate keys."""

    def __init__(self, loader: yaml.SafeLoader) -> None:
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
