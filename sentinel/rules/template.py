"""Alert label and annotation templates, expanded as Prometheus 2.42 does.

Prometheus prepends `{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}
{{$externalURL := .ExternalURL}}{{$value := .Value}}` to every template and
runs it through Go's text/template with `missingkey=zero`, so a missing label
prints "". Templates are parsed when rules load (`compile_template`); an
expansion error does not fail the evaluation, it becomes the text
`<error expanding template: ...>`, as in Prometheus.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sentinel.rules.gofmt import go_str
from sentinel.rules.template_funcs import (
    CONTEXT_FUNCS,
    FUNCS,
    FuncError,
    path_prefix,
    truth,
)
from sentinel.rules.template_parse import (
    Action,
    Command,
    Control,
    Node,
    Operand,
    Pipeline,
    TemplateSyntaxError,
    Text,
    parse_template,
)
from sentinel.rules.template_query import QUERY_FUNCS, QueryRunner, query_result

# The variables Prometheus declares in front of every alert template.
_DEFS = (
    "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}"
    "{{$externalURL := .ExternalURL}}{{$value := .Value}}"
)
_PREDECLARED = ("$labels", "$externalLabels", "$externalURL", "$value")
_STRUCT_TYPE = (
    "struct { Labels map[string]string; ExternalLabels map[string]string; "
    "ExternalURL string; Value float64 }"
)
_MISSING = object()

__all__ = [
    "Template",
    "TemplateData",
    "TemplateError",
    "TemplateSyntaxError",
    "compile_template",
    "expand_alert_template",
]


class TemplateError(Exception):
    """A template failed while expanding (Go's "error executing template")."""


@dataclass(frozen=True, slots=True)
class TemplateData:
    """What an alert template sees: the sample's labels and value, and the manager's settings."""

    labels: Mapping[str, str]
    value: float
    external_labels: Mapping[str, str] = field(default_factory=dict)
    external_url: str = ""
    # `query` in templates: PromQL text → result at the alert's evaluation time.
    query: QueryRunner | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed alert template; `expand` runs it."""

    name: str
    text: str
    nodes: tuple[Node, ...]

    def expand(self, data: TemplateData) -> str:
        """The expanded text; TemplateError with Go's message when execution fails."""
        return _Exec(self, data).run()


def compile_template(text: str, name: str) -> Template:
    """Parse a template at load time; TemplateSyntaxError reads like Go's parse error."""
    funcs = frozenset(FUNCS) | CONTEXT_FUNCS | frozenset(QUERY_FUNCS) | {"query"}
    try:
        nodes = parse_template(text, funcs, _PREDECLARED)
    except TemplateSyntaxError as e:
        raise TemplateSyntaxError(f"template: {name}:{e}") from None
    return Template(name, text, nodes)


def expand_alert_template(tmpl: Template, data: TemplateData) -> str:
    """Expand, turning a failure into Prometheus's `<error expanding template: ...>` text."""
    try:
        return tmpl.expand(data)
    except TemplateError as e:
        return f"<error expanding template: error executing template {tmpl.name}: {e}>"


class _Root:
    """The data `.` starts as: Prometheus's anonymous struct."""

    def __init__(self, data: TemplateData) -> None:
        self.fields: dict[str, Any] = {
            "Labels": dict(data.labels),
            "ExternalLabels": dict(data.external_labels),
            "ExternalURL": data.external_url,
            "Value": float(data.value),
        }


class _Exec:
    def __init__(self, tmpl: Template, data: TemplateData) -> None:
        self.tmpl = tmpl
        self.data = data
        root = _Root(data)
        self.root = root
        self.vars: list[tuple[str, Any]] = [("$", root)]
        self.vars += [(n, root.fields[f]) for n, f in zip(_PREDECLARED, root.fields, strict=True)]

    def run(self) -> str:
        out: list[str] = []
        self.walk(self.root, self.tmpl.nodes, out)
        return "".join(out)

    def fail(self, cmd: Command, msg: str) -> TemplateError:
        """Go's `template: NAME:LINE:COL: executing "NAME" at <command>: msg`."""
        text = self.tmpl.text
        line = text.count("\n", 0, cmd.pos) + 1
        col = cmd.pos - (text.rfind("\n", 0, cmd.pos) + 1)
        if line == 1:
            col += len(_DEFS)  # Go counts the prepended variable definitions
        name = self.tmpl.name
        where = f'{name}:{line}:{col}: executing "{name}" at <{cmd.source}>'
        return TemplateError(f"template: {where}: {msg}")

    def walk(self, dot: Any, nodes: tuple[Node, ...], out: list[str]) -> None:
        for node in nodes:
            if isinstance(node, Text):
                out.append(node.text)
            elif isinstance(node, Action):
                value = self.pipeline(dot, node.pipe)
                if not node.pipe.decl:
                    out.append("<no value>" if value is None else go_str(value))
            elif isinstance(node, Control):
                mark = len(self.vars)
                self.control(dot, node, out)
                del self.vars[mark:]

    def control(self, dot: Any, node: Control, out: list[str]) -> None:
        value = self.pipeline(dot, node.pipe, bind=node.kind != "range")
        if node.kind == "range":
            self.range(value, node, out, dot)
        elif truth(value):
            self.walk(value if node.kind == "with" else dot, node.body, out)
        else:
            self.walk(dot, node.orelse, out)

    def range(self, value: Any, node: Control, out: list[str], dot: Any) -> None:
        if isinstance(value, dict):
            items = [(k, value[k]) for k in sorted(value)]
        elif isinstance(value, list | tuple):
            items = list(enumerate(value))
        elif value is None:
            items = []
        else:
            raise self.fail(node.pipe.cmds[0], f"range can't iterate over {go_str(value)}")
        if not items:
            self.walk(dot, node.orelse, out)
            return
        decl = node.pipe.decl
        for key, elem in items:
            mark = len(self.vars)
            if len(decl) == 1:
                self.vars.append((decl[0], elem))
            elif len(decl) == 2:
                self.vars += [(decl[0], key), (decl[1], elem)]
            self.walk(elem, node.body, out)
            del self.vars[mark:]

    def pipeline(self, dot: Any, pipe: Pipeline, bind: bool = True) -> Any:
        value: Any = _MISSING
        for cmd in pipe.cmds:
            value = self.command(dot, cmd, value)
        if bind and pipe.decl:
            if pipe.is_assign:
                self.assign(pipe.decl[0], value)
            else:
                self.vars.append((pipe.decl[0], value))
        return value

    def assign(self, name: str, value: Any) -> None:
        for i in range(len(self.vars) - 1, -1, -1):
            if self.vars[i][0] == name:
                self.vars[i] = (name, value)
                return

    def lookup(self, name: str) -> Any:
        for n, v in reversed(self.vars):
            if n == name:
                return v
        return None  # the parser rejects undefined variables

    def command(self, dot: Any, cmd: Command, final: Any) -> Any:
        first = cmd.args[0]
        if first.kind == "func":
            args = [self.arg(dot, a, cmd) for a in cmd.args[1:]]
            if final is not _MISSING:
                args.append(final)
            return self.call(str(first.value), args, cmd)
        if len(cmd.args) > 1 or final is not _MISSING:
            raise self.fail(cmd, f"can't give argument to non-function {first_text(cmd)}")
        if first.kind == "nil":
            raise self.fail(cmd, "nil is not a command")
        return self.operand(dot, first, cmd)

    def arg(self, dot: Any, op: Operand, cmd: Command) -> Any:
        return None if op.kind == "nil" else self.operand(dot, op, cmd)

    def operand(self, dot: Any, op: Operand, cmd: Command) -> Any:
        if op.kind in ("field", "dot"):
            value = dot
        elif op.kind == "var":
            value = self.lookup(str(op.value))
        elif op.kind == "pipe":
            assert isinstance(op.value, Pipeline)
            value = self.pipeline(dot, op.value)
        elif op.kind == "func":
            value = self.call(str(op.value), [], cmd)
        else:
            value = op.value
        for name in op.chain:
            value = self.field(value, name, cmd)
        return value

    def field(self, value: Any, name: str, cmd: Command) -> Any:
        if isinstance(value, _Root):
            if name not in value.fields:
                raise self.fail(cmd, f"can't evaluate field {name} in type {_STRUCT_TYPE}")
            return value.fields[name]
        if isinstance(value, dict):
            return value.get(name, "")  # missingkey=zero: the zero value of a string
        if hasattr(value, "go_field"):
            try:
                return value.go_field(name)
            except AttributeError:
                raise self.fail(cmd, f"can't evaluate field {name} in type "
                                f"{value.go_type_name()}") from None
        if value is None:
            raise self.fail(cmd, f"nil pointer evaluating interface {{}}.{name}")
        kind = type(value).__name__
        raise self.fail(cmd, f"can't evaluate field {name} in type {kind}")

    def call(self, name: str, args: list[Any], cmd: Command) -> Any:
        try:
            if name == "externalURL":
                return self.data.external_url
            if name == "pathPrefix":
                return path_prefix(self.data.external_url)
            if name == "query":
                return self.query(args)
            if name in QUERY_FUNCS:
                return QUERY_FUNCS[name](*args)
            return FUNCS[name](*args)
        except FuncError as e:
            msg = f"error calling {name}: {e}" if e.wrapped else str(e)
            raise self.fail(cmd, msg) from None
        except TypeError:
            msg = f"wrong number of args for {name}: got {len(args)}"
            raise self.fail(cmd, msg) from None


    def query(self, args: list[Any]) -> list[Any]:
        if len(args) != 1:
            raise TypeError("query takes one argument")
        if self.data.query is None:
            raise FuncError("query is not available here")
        try:
            return query_result(self.data.query(str(args[0])))
        except FuncError:
            raise
        except Exception as e:  # a PromQL error is the template's error, as in Prometheus
            raise FuncError(str(e) or type(e).__name__) from None


def first_text(cmd: Command) -> str:
    """The first word of a command, as Go names a non-function."""
    return cmd.source.split()[0] if cmd.source else ""
