"""Parser for the Go text/template subset used in alert labels and annotations.

Covers what alert rules use: text, `{{ pipeline }}` with `|` stages, fields
(`.Labels.x`), variables (`$labels.x`, `$x := ...`, `$x = ...`), string,
raw-string, char, number and bool literals, parenthesised pipelines,
comments, `{{-`/`-}}` trimming, `if`/`else if`/`else`, `with`, `range`.
Errors read like Go's (`template: NAME:LINE: undefined variable "$foo"`) so
`sentinel rules check` and `promtool check rules` say the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass

from sentinel.rules.template_lex import TemplateSyntaxError, Tok, lex, number, unquote

# Functions Go or Prometheus define that Sentinel does not implement: a clear
# load-time error instead of Go's "not defined", since promtool accepts them.
UNSUPPORTED_FUNCS = frozenset({"call", "slice"})


@dataclass(frozen=True)
class Node:
    """Base of the template syntax tree; `pos` is the byte offset in the template text."""

    pos: int


@dataclass(frozen=True)
class Text(Node):
    text: str


@dataclass(frozen=True)
class Operand(Node):
    """One term: kind is field|var|dot|str|num|bool|nil|func|pipe; then a field chain."""

    kind: str
    value: object = None
    chain: tuple[str, ...] = ()


@dataclass(frozen=True)
class Command(Node):
    args: tuple[Operand, ...]
    source: str  # the command as written, for error messages ("at <gt $value 1>")


@dataclass(frozen=True)
class Pipeline(Node):
    decl: tuple[str, ...]
    is_assign: bool
    cmds: tuple[Command, ...]


@dataclass(frozen=True)
class Action(Node):
    pipe: Pipeline


@dataclass(frozen=True)
class Control(Node):
    """if / with / range: run `body` when the pipeline is true (non-empty), else `orelse`."""

    kind: str
    pipe: Pipeline
    body: tuple[Node, ...]
    orelse: tuple[Node, ...] = ()


def _describe(tok: Tok) -> str:
    """A token as Go's parse errors name it."""
    if tok.kind == "eof":
        return "EOF"
    if tok.kind in ("left", "right"):
        return f'"{tok.val}"'
    if tok.kind in ("keyword", "dot", "field", "nil", "bool"):
        return f"<{tok.val}>"
    return f'"{tok.val}"' if tok.kind not in ("string", "rawstring", "charconst") else tok.val


class _Parser:
    def __init__(self, text: str, funcs: frozenset[str], predeclared: tuple[str, ...]) -> None:
        self.src = text
        self.toks = lex(text)
        self.k = 0
        self.funcs = funcs
        self.vars = ["$", *predeclared]

    # -- token stream ---------------------------------------------------------
    def peek(self) -> Tok:
        return self.toks[self.k]

    def next(self) -> Tok:
        tok = self.toks[self.k]
        if tok.kind != "eof":
            self.k += 1
        return tok

    def peek_nonspace(self) -> Tok:
        while self.peek().kind == "space":
            self.k += 1
        return self.peek()

    def next_nonspace(self) -> Tok:
        self.peek_nonspace()
        return self.next()

    def err(self, tok: Tok, msg: str) -> TemplateSyntaxError:
        return TemplateSyntaxError(f"{tok.line}: {msg}")

    def expect_right(self, context: str) -> None:
        tok = self.next_nonspace()
        if tok.kind != "right":
            raise self.err(tok, f"unexpected {_describe(tok)} in {context}")

    # -- structure ------------------------------------------------------------
    def parse(self) -> tuple[Node, ...]:
        nodes, _ = self.item_list(top=True)
        return nodes

    def item_list(self, top: bool) -> tuple[tuple[Node, ...], str | None]:
        """Nodes up to EOF (top level) or up to `{{end}}` / `{{else`, which it returns."""
        nodes: list[Node] = []
        while True:
            tok = self.next()
            if tok.kind == "text":
                nodes.append(Text(tok.pos, tok.val))
                continue
            if tok.kind == "eof":
                if not top:
                    raise self.err(tok, "unexpected EOF")
                return tuple(nodes), None
            word = self.peek_nonspace()
            if word.kind != "keyword":
                nodes.append(Action(tok.pos, self.pipeline("command", "right")))
                continue
            self.next()
            if word.val in ("end", "else"):
                if top:
                    raise self.err(word, f"unexpected {{{{{word.val}}}}}")
                if word.val == "end":
                    self.expect_right("end")
                return tuple(nodes), word.val
            if word.val not in ("if", "with", "range"):
                raise self.err(word, f"{{{{{word.val}}}}} is not supported by Sentinel")
            nodes.append(self.control(word.val, tok.pos))

    def control(self, kind: str, pos: int) -> Control:
        mark = len(self.vars)
        pipe = self.pipeline(kind, "right")
        body, term = self.item_list(top=False)
        orelse: tuple[Node, ...] = ()
        if term == "else":
            nxt = self.peek_nonspace()
            if kind == "if" and nxt.kind == "keyword" and nxt.val == "if":
                self.next()
                # `{{else if}}` is an `if` nested in the else branch sharing our {{end}}.
                orelse = (self.control("if", nxt.pos),)
            else:
                self.expect_right("else")
                orelse, term = self.item_list(top=False)
                if term != "end":
                    raise self.err(self.peek(), "expected end; found {{else}}")
        del self.vars[mark:]
        return Control(pos, kind, pipe, body, orelse)

    # -- pipelines --------------------------------------------------------------
    def pipeline(self, context: str, end: str) -> Pipeline:
        start = self.peek_nonspace()
        decl, is_assign = self.declarations(context)
        cmds: list[Command] = []
        while True:
            tok = self.peek_nonspace()
            if tok.kind == end:
                self.next()
                break
            if tok.kind == "right" and end == "rparen":
                raise self.err(tok, "unclosed left paren")
            if tok.kind not in _OPERAND_START:
                raise self.err(tok, f"unexpected {_describe(tok)} in {context}")
            cmds.append(self.command(end))
            if self.peek().kind == "pipe":
                self.next()
        if not cmds:
            raise self.err(start, f"missing value for {context}")
        for i, cmd in enumerate(cmds[1:]):
            if cmd.args[0].kind in ("bool", "dot", "nil", "num", "str"):
                raise self.err(start, f"non executable command in pipeline stage {i + 2}")
        return Pipeline(start.pos, decl, is_assign, tuple(cmds))

    def declarations(self, context: str) -> tuple[tuple[str, ...], bool]:
        """`$x :=`, `$x =` or (range) `$k, $v :=` at the start of a pipeline."""
        save = self.k
        names: list[str] = []
        while self.peek_nonspace().kind == "var":
            names.append(self.next().val)
            nxt = self.peek_nonspace()
            if nxt.kind in ("declare", "assign"):
                self.next()
                if nxt.kind == "assign":
                    for n in names:
                        if n not in self.vars:
                            raise self.err(nxt, f'undefined variable "{n}"')
                else:
                    self.vars.extend(names)
                return tuple(names), nxt.kind == "assign"
            if not (nxt.kind == "char" and context == "range" and len(names) == 1):
                break
            self.next()
        self.k = save
        return (), False

    def command(self, end: str) -> Command:
        first = self.peek_nonspace()
        args: list[Operand] = []
        while True:
            tok = self.peek_nonspace()
            if tok.kind in (end, "pipe") or (tok.kind == "right" and end == "rparen"):
                break
            args.append(self.operand())
            after = self.peek()
            if after.kind not in ("space", "pipe", end, "right"):
                raise self.err(after, f"unexpected {_describe(after)} in operand")
        stop = self.peek().pos
        return Command(first.pos, tuple(args), self.src[first.pos : stop].strip())

    def operand(self) -> Operand:
        tok = self.next_nonspace()
        op = self.term(tok)
        chain = list(op.chain)
        while self.peek().kind == "field":
            if op.kind not in ("field", "var", "pipe", "dot"):
                raise self.err(self.peek(), f"unexpected . after term {tok.val!r}")
            chain.append(self.next().val[1:])
        return Operand(op.pos, op.kind, op.value, tuple(chain))

    def term(self, tok: Tok) -> Operand:
        kind = tok.kind
        if kind == "ident":
            if tok.val in UNSUPPORTED_FUNCS and tok.val not in self.funcs:
                raise self.err(tok, f'function "{tok.val}" is not supported by Sentinel')
            if tok.val not in self.funcs:
                raise self.err(tok, f'function "{tok.val}" not defined')
            return Operand(tok.pos, "func", tok.val)
        if kind == "var":
            if tok.val not in self.vars:
                raise self.err(tok, f'undefined variable "{tok.val}"')
            return Operand(tok.pos, "var", tok.val)
        if kind == "field":
            return Operand(tok.pos, "field", None, (tok.val[1:],))
        if kind == "dot":
            return Operand(tok.pos, "dot")
        if kind == "nil":
            return Operand(tok.pos, "nil")
        if kind == "bool":
            return Operand(tok.pos, "bool", tok.val == "true")
        if kind == "number":
            return Operand(tok.pos, "num", number(tok))
        if kind in ("string", "rawstring"):
            return Operand(tok.pos, "str", unquote(tok))
        if kind == "charconst":
            return Operand(tok.pos, "num", ord(unquote(tok)[:1] or "\0"))
        if kind == "lparen":
            return Operand(tok.pos, "pipe", self.pipeline("parenthesized pipeline", "rparen"))
        raise self.err(tok, f"unexpected {_describe(tok)} in operand")


_OPERAND_START = frozenset(
    "ident var field dot nil bool number string rawstring charconst lparen".split()
)


def parse_template(
    text: str, funcs: frozenset[str], predeclared: tuple[str, ...] = ()
) -> tuple[Node, ...]:
    """The syntax tree of a template; TemplateSyntaxError("LINE: message") when invalid."""
    return _Parser(text, funcs, predeclared).parse()
