"""Rule files: Prometheus's rulefmt, validated like `promtool check rules`.

    groups:
    - name: vllm
      interval: 15s          # optional; the manager's default otherwise
      limit: 0               # optional; max alerts per rule, 0 = no limit
      rules:
      - alert: VLLMTargetDown
        expr: up == 0
        for: 1m
        keep_firing_for: 0s
        labels: {severity: page}
        annotations: {summary: "{{ $labels.target }} is down"}

Every problem in every file is collected, then one `RuleFileError` lists
them all as `file:line:col: message`, positions 1-based from the YAML nodes
(plus the offset PromQL reports inside an expression). Expressions and
templates are compiled here, so a rule that loads can always be evaluated.

Recording rules (`record:`) are rejected with a clear error: Sentinel
evaluates alerting rules only; compute the recorded expression inside the
alert's expression instead.

Paths given to `load_rule_files` may be glob patterns (expanded here, like
Prometheus's `rule_files`); a pattern matching nothing is not an error, a
plain path that does not exist is.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sentinel import yamlpos
from sentinel.durations import parse_duration
from sentinel.promql.compile import compile_expr
from sentinel.promql.errors import PromQLError
from sentinel.rules.template import Template, TemplateSyntaxError, compile_template

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_GROUP_KEYS = ("name", "interval", "limit", "rules")
_RULE_KEYS = ("record", "alert", "expr", "for", "keep_firing_for", "labels", "annotations")


class RuleFileError(Exception):
    """Rule files that do not load; `problems` holds one `file:line:col: message` each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class AlertingRule:
    """One alerting rule as written, with its expression and templates compiled."""

    name: str
    expr: str
    for_ms: int = 0
    keep_firing_for_ms: int = 0
    labels: tuple[tuple[str, str], ...] = ()  # name → template text, sorted by name
    annotations: tuple[tuple[str, str], ...] = ()
    query: Any = field(default=None, compare=False, repr=False)  # compiled Expr (or the text)
    label_templates: tuple[tuple[str, Template], ...] = field(
        default=(), compare=False, repr=False
    )
    annotation_templates: tuple[tuple[str, Template], ...] = field(
        default=(), compare=False, repr=False
    )


@dataclass(frozen=True)
class RuleGroup:
    """A named group of rules evaluated together every `interval_ms` (None: the default)."""

    name: str
    rules: tuple[AlertingRule, ...]
    interval_ms: int | None = None
    limit: int = 0
    file: str = ""


def make_rule(
    name: str,
    expr: str,
    for_ms: int = 0,
    keep_firing_for_ms: int = 0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> AlertingRule:
    """Build a rule in code (tests, built-in rules); raises on bad expressions or templates."""
    labels, annotations = labels or {}, annotations or {}
    tname = "__alert_" + name
    return AlertingRule(
        name=name,
        expr=expr,
        for_ms=for_ms,
        keep_firing_for_ms=keep_firing_for_ms,
        labels=tuple(sorted(labels.items())),
        annotations=tuple(sorted(annotations.items())),
        query=compile_expr(expr),
        label_templates=tuple((k, compile_template(v, tname)) for k, v in sorted(labels.items())),
        annotation_templates=tuple(
            (k, compile_template(v, tname)) for k, v in sorted(annotations.items())
        ),
    )


def expand_paths(paths: list[str]) -> list[str]:
    """Glob patterns expanded (sorted); plain paths kept even when missing, to report them."""
    out: list[str] = []
    for p in paths:
        if glob.has_magic(p):
            out.extend(sorted(glob.glob(p)))
        else:
            out.append(p)
    return out


def load_rule_files(paths: list[str]) -> list[RuleGroup]:
    """All groups of all files; RuleFileError listing every problem found."""
    problems: list[str] = []
    groups: list[RuleGroup] = []
    seen: dict[str, str] = {}
    for path in expand_paths([str(p) for p in paths]):
        file_groups, file_problems = parse_rule_file(path)
        problems += file_problems
        for g, where in file_groups:
            if g.name in seen and seen[g.name].split(":")[0] != path:
                problems.append(
                    f'{where}: group name "{g.name}" is already used in {seen[g.name]} '
                    "(Sentinel needs group names unique across files)"
                )
            seen.setdefault(g.name, where)
            groups.append(g)
    if problems:
        raise RuleFileError(problems)
    return groups


def parse_rule_file(path: str) -> tuple[list[tuple[RuleGroup, str]], list[str]]:
    """The groups of one file (each with its `file:line:col`) and the problems found."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return [], [f"{path}:0:0: cannot read rule file: {e}"]
    try:
        # Checked composition: control characters, deep nesting and alias
        # bombs are refused with their position (yamlpos).
        root = yamlpos.compose(text)
    except yamlpos.YamlSyntaxError as e:
        problem = e.message.removeprefix("YAML syntax error: ")
        return [], [f"{path}:{e.line}:{e.column}: invalid YAML: {problem}"]
    return _FileParser(path, text).parse(root)


class _FileParser:
    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()
        self.problems: list[str] = []

    def at(self, node: yaml.Node, msg: str, ctx: str = "") -> None:
        m = node.start_mark
        self.report(m.line + 1, m.column + 1, msg, ctx)

    def report(self, line: int, col: int, msg: str, ctx: str = "") -> None:
        self.problems.append(f"{self.path}:{line}:{col}: {ctx}{msg}")

    def mapping(self, node: yaml.Node, allowed: tuple[str, ...], what: str, ctx: str = ""
                ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """A YAML mapping as key → (key node, value node); unknown and repeated keys reported."""
        if not isinstance(node, yaml.MappingNode):
            self.at(node, f"{what} must be a mapping", ctx)
            return {}
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for k, v in node.value:
            key = str(k.value)
            if key in out:
                self.at(k, f'key "{key}" is repeated', ctx)
            elif allowed and key not in allowed:
                self.at(k, f"field {key} not found in {what} (allowed: {', '.join(allowed)})", ctx)
            else:
                out[key] = (k, v)
        return out

    def scalar(self, node: yaml.Node, what: str, ctx: str = "") -> str | None:
        if not isinstance(node, yaml.ScalarNode):
            self.at(node, f"{what} must be a string", ctx)
            return None
        return "" if node.tag.endswith(":null") else str(node.value)

    def parse(self, root: yaml.Node | None) -> tuple[list[tuple[RuleGroup, str]], list[str]]:
        if root is None:
            return [], []  # an empty file has no groups, as in Prometheus
        top = self.mapping(root, ("groups",), "rule file")
        groups: list[tuple[RuleGroup, str]] = []
        if "groups" in top:
            seq = top["groups"][1]
            if not isinstance(seq, yaml.SequenceNode):
                self.at(seq, "groups must be a list")
            else:
                names: set[str] = set()
                for gnode in seq.value:
                    g = self.group(gnode, names)
                    if g is not None:
                        m = gnode.start_mark
                        groups.append((g, f"{self.path}:{m.line + 1}:{m.column + 1}"))
        return groups, self.problems

    def group(self, node: yaml.Node, names: set[str]) -> RuleGroup | None:
        before = len(self.problems)
        fields = self.mapping(node, _GROUP_KEYS, "rule group")
        name = self.scalar(fields["name"][1], "name") if "name" in fields else ""
        if not name:
            self.at(node, "Groupname must not be empty")
        elif name in names:
            self.at(node, f'groupname: "{name}" is repeated in the same file')
        names.add(name or "")
        interval = self.duration(fields.get("interval"), "")
        limit = 0
        if "limit" in fields:
            text = self.scalar(fields["limit"][1], "limit") or "0"
            if not text.isdigit():
                self.at(fields["limit"][1], f'limit must be a non-negative integer, not "{text}"')
            else:
                limit = int(text)
        rules: list[AlertingRule] = []
        if "rules" in fields:
            seq = fields["rules"][1]
            if not isinstance(seq, yaml.SequenceNode):
                self.at(seq, "rules must be a list")
            else:
                for i, rnode in enumerate(seq.value, start=1):
                    rule = self.rule(rnode, name or "", i)
                    if rule is not None:
                        rules.append(rule)
        if len(self.problems) > before:
            return None
        return RuleGroup(name or "", tuple(rules), interval, limit, self.path)

    def duration(self, kv: tuple[yaml.Node, yaml.Node] | None, ctx: str) -> int | None:
        if kv is None:
            return None
        text = self.scalar(kv[1], kv[0].value, ctx)
        if text is None:
            return None
        try:
            return parse_duration(text)
        except ValueError:
            self.at(kv[1], f'not a valid duration string: "{text}"', ctx)
            return None

    def rule(self, node: yaml.Node, group: str, index: int) -> AlertingRule | None:
        before = len(self.problems)
        raw = self.mapping(node, _RULE_KEYS, "rule")
        name_kv = raw.get("alert") or raw.get("record")
        rname = self.scalar(name_kv[1], name_kv[0].value) if name_kv else ""
        ctx = f'group "{group}", rule {index}, "{rname or ""}": '
        if "record" in raw:
            self.at(raw["record"][1], "recording rules are not supported by Sentinel; "
                    "use an alerting rule (compute the expression inside `expr`)", ctx)
        elif not rname:
            self.at(node, "one of 'record' or 'alert' must be set", ctx)
        for_ms = self.duration(raw.get("for"), ctx) or 0
        keep_ms = self.duration(raw.get("keep_firing_for"), ctx) or 0
        expr_text = self.scalar(raw["expr"][1], "expr", ctx) if "expr" in raw else ""
        query = None
        if not expr_text:
            self.at(raw["expr"][1] if "expr" in raw else node, "field 'expr' must be set in rule",
                    ctx)
        else:
            query = self.expression(raw["expr"][1], expr_text, ctx)
        tname = "__alert_" + (rname or "")
        labels = self.templates(raw.get("labels"), "label", tname, ctx)
        annotations = self.templates(raw.get("annotations"), "annotation", tname, ctx)
        if len(self.problems) > before:
            return None
        return AlertingRule(
            name=rname or "",
            expr=expr_text or "",
            for_ms=for_ms,
            keep_firing_for_ms=keep_ms,
            labels=tuple((k, t.text) for k, t in labels),
            annotations=tuple((k, t.text) for k, t in annotations),
            query=query,
            label_templates=labels,
            annotation_templates=annotations,
        )

    def expression(self, node: yaml.Node, text: str, ctx: str) -> Any:
        try:
            return compile_expr(text)
        except PromQLError as e:
            line, col = self.expr_position(node, text, e.position)
            msg = getattr(e, "message", str(e))
            self.report(line, col, f"could not parse expression: {msg}", ctx)
            return None

    def expr_position(self, node: yaml.Node, text: str, pos: int | None) -> tuple[int, int]:
        """File line and column of a character offset inside an expression scalar."""
        m = node.start_mark
        line, col = m.line + 1, m.column + 1
        if pos is None:
            return line, col
        before = text[:pos]
        k, c = before.count("\n"), pos - (before.rfind("\n") + 1)
        style = getattr(node, "style", None)
        if style in (None, "", "'", '"') and k == 0 and "\\" not in before and "''" not in before:
            return line, col + c + (1 if style in ("'", '"') else 0)
        if style == "|" and line + k < len(self.lines):
            # A literal block starts on the next line; its first line sets the indentation.
            first = self.lines[line]
            return line + 1 + k, len(first) - len(first.lstrip(" ")) + c + 1
        return line, col

    def templates(
        self, kv: tuple[yaml.Node, yaml.Node] | None, what: str, tname: str, ctx: str
    ) -> tuple[tuple[str, Template], ...]:
        if kv is None:
            return ()
        fields = self.mapping(kv[1], (), f"{what}s", ctx)
        out = []
        for key, (knode, vnode) in sorted(fields.items()):
            if not _LABEL_NAME.match(key) or (what == "label" and key == "__name__"):
                self.at(knode, f"invalid {what} name: {key}", ctx)
                continue
            value = self.scalar(vnode, f"{what} {key}", ctx)
            if value is None:
                continue
            try:
                out.append((key, compile_template(value, tname)))
            except TemplateSyntaxError as e:
                self.at(vnode, f'{what} "{key}": {e}', ctx)
        return tuple(out)
