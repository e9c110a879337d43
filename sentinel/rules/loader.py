"""Rule files: Prometheus's rulefmt, validated like `promtool check rules`.

    groups:
    - name: vllm
      interval: 15s          # optional; the manager's default otherwise
      limit: 0               # optional; max alerts (series) per rule, 0 = no limit
      query_offset: 0s       # optional (Prometheus 2.53+); queries run this far in the past
      labels: {team: a}      # optional (Prometheus 3); added to every rule's labels
      rules:
      - record: job:up:sum   # recording rule: the result is written back to the store
        expr: sum by (job) (up)
        labels: {source: recorded}
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

Recording rules (`record:`) give `RecordingRule`s, evaluated by
`recording.RecordingRuleState` and written back to the store by the manager.

Paths given to `load_rule_files` may be glob patterns (expanded here, like
Prometheus's `rule_files`); a pattern matching nothing is not an error, a
plain path that does not exist is.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from sentinel.config import yamlpos
from sentinel.config.durations import parse_duration
from sentinel.promql import durexpr
from sentinel.promql.compile import compile_expr
from sentinel.promql.errors import PromQLError
from sentinel.promql.features import DURATION_EXPR
from sentinel.rules.template import Template, TemplateSyntaxError, compile_template

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_GROUP_KEYS = ("name", "interval", "limit", "query_offset", "labels", "rules")
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
class RecordingRule:
    """One `record:` rule as written, with its expression compiled."""

    name: str
    expr: str
    labels: tuple[tuple[str, str], ...] = ()  # sorted by name; not templated (as in 2.42)
    query: Any = field(default=None, compare=False, repr=False)
    for_ms: int = 0  # recording rules have no `for`; kept so a reload keys all rules alike


Rule = AlertingRule | RecordingRule


@dataclass(frozen=True)
class RuleGroup:
    """A named group of rules evaluated together every `interval_ms` (None: the default)."""

    name: str
    rules: tuple[Rule, ...]
    interval_ms: int | None = None
    limit: int = 0
    file: str = ""
    query_offset_ms: int = 0


def make_recording_rule(name: str, expr: str, labels: dict[str, str] | None = None
                        ) -> RecordingRule:
    """Build a recording rule in code (tests, benchmarks); raises on a bad expression."""
    return RecordingRule(name, expr, tuple(sorted((labels or {}).items())), compile_expr(expr))


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


def load_rule_files(paths: list[str], features: frozenset[str] = frozenset()
                    ) -> list[RuleGroup]:
    """All groups of all files; RuleFileError listing every problem found.

    `features`: Prometheus's experimental PromQL flags the expressions may use
    (sentinel/promql/features.py; the configuration's `promql_features`).
    """
    problems: list[str] = []
    groups: list[RuleGroup] = []
    seen: dict[str, str] = {}
    for path in expand_paths([str(p) for p in paths]):
        file_groups, file_problems = parse_rule_file(path, features)
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


def parse_rule_file(path: str, features: frozenset[str] = frozenset()
                    ) -> tuple[list[tuple[RuleGroup, str]], list[str]]:
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
    return _FileParser(path, text, features).parse(root)


class _FileParser:
    def __init__(self, path: str, text: str, features: frozenset[str] = frozenset()) -> None:
        self.features = features
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
        offset = self.duration(fields.get("query_offset"), "") or 0
        group_labels = self.group_labels(fields.get("labels"))
        rules: list[Rule] = []
        if "rules" in fields:
            seq = fields["rules"][1]
            if not isinstance(seq, yaml.SequenceNode):
                self.at(seq, "rules must be a list")
            else:
                for i, rnode in enumerate(seq.value, start=1):
                    rule = self.rule(rnode, name or "", i)
                    if rule is not None:
                        rules.append(_with_group_labels(rule, group_labels))
        if len(self.problems) > before:
            return None
        return RuleGroup(name or "", tuple(rules), interval, limit, self.path, offset)

    def group_labels(self, kv: tuple[yaml.Node, yaml.Node] | None) -> dict[str, str]:
        """Group-level `labels` (Prometheus 3): plain names and values."""
        if kv is None:
            return {}
        out = {}
        for key, (knode, vnode) in self.mapping(kv[1], (), "group labels").items():
            if not _LABEL_NAME.match(key) or key == "__name__":
                self.at(knode, f"invalid label name: {key}")
            value = self.scalar(vnode, f"label {key}")
            if value is not None:
                out[key] = value
        return out

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

    def rule(self, node: yaml.Node, group: str, index: int) -> Rule | None:
        before = len(self.problems)
        raw = self.mapping(node, _RULE_KEYS, "rule")
        name_kv = raw.get("alert") or raw.get("record")
        rname = self.scalar(name_kv[1], name_kv[0].value) if name_kv else ""
        ctx = f'group "{group}", rule {index}, "{rname or ""}": '
        if "record" in raw:
            return self.recording_rule(node, raw, rname or "", ctx)
        if not rname:
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

    def recording_rule(self, node: yaml.Node, raw: dict[str, tuple[yaml.Node, yaml.Node]],
                       name: str, ctx: str) -> RecordingRule | None:
        """A `record:` rule, checked as rulefmt does."""
        before = len(self.problems)
        if "alert" in raw:
            self.at(node, "only one of 'record' and 'alert' must be set", ctx)
        for key in ("for", "keep_firing_for", "annotations"):
            if key in raw:
                self.at(raw[key][0], f"invalid field '{key}' in recording rule", ctx)
        if not _METRIC_NAME.match(name):
            self.at(raw["record"][1], f"invalid recording rule name: {name}", ctx)
        expr_text = self.scalar(raw["expr"][1], "expr", ctx) if "expr" in raw else ""
        query = None
        if not expr_text:
            self.at(raw["expr"][1] if "expr" in raw else node, "field 'expr' must be set in rule",
                    ctx)
        else:
            query = self.expression(raw["expr"][1], expr_text, ctx)
        labels: dict[str, str] = {}
        if "labels" in raw:
            for key, (knode, vnode) in self.mapping(raw["labels"][1], (), "labels", ctx).items():
                if not _LABEL_NAME.match(key) or key == "__name__":
                    self.at(knode, f"invalid label name: {key}", ctx)
                value = self.scalar(vnode, f"label {key}", ctx)
                if value is not None:
                    labels[key] = value
        if len(self.problems) > before:
            return None
        return RecordingRule(name, expr_text or "", tuple(sorted(labels.items())), query)

    def expression(self, node: yaml.Node, text: str, ctx: str) -> Any:
        try:
            if DURATION_EXPR in self.features:
                # A rule is an instant query: step() and range() are 0 (positions of
                # errors refer to the folded text).
                text = durexpr.rewrite(text, 0, 0)
            return compile_expr(text, self.features)
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


def _with_group_labels(rule: Rule, group_labels: dict[str, str]) -> Rule:
    """A rule with the group's labels added; the rule's own labels win on a clash."""
    if not group_labels:
        return rule
    own = dict(rule.labels)
    merged = {**group_labels, **own}
    labels = tuple(sorted(merged.items()))
    if isinstance(rule, RecordingRule):
        return replace(rule, labels=labels)
    extra = tuple((k, compile_template(v, "__alert_" + rule.name))
                  for k, v in group_labels.items() if k not in own)
    templates = tuple(sorted(rule.label_templates + extra, key=lambda kv: kv[0]))
    return replace(rule, labels=labels, label_templates=templates)
