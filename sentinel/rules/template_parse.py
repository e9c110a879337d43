"""Parser for the Go text/template subset used in alert labels and annotations.

Covers what alert rules use: text, `{{ pipeline }}` with `|` stages, fields
(`.Labels.x`), variables (`$labels.x`, `$x := ...`, `$x = ...`), string,
raw-string, char, number and bool literals, parenthesised pipelines,
comments, `{{-`/`-}}` trimming, `if`/`else if`/`else`, `with`, `range`.
Errors read like Go's (`template: NAME:LINE: undefined variable "$foo"`) so
`sentinel rules check` and `promtool check rules` say the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Functions Go or Prometheus define that Sentinel does not implement: a clear
# load-time error instead of Go's "not defined", since promtool accepts them.
UNSUPPORTED_FUNCS = frozenset(
    "query first label value strvalue args safeHtml graphLink tableLink sortByLabel "
    "parseDuration toTime stripDomain html js call slice".split()
)


class TemplateSyntaxError(Exception):
    """A template that Go's text/template would refuse to parse."""


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


@dataclass
class _Tok:
    kind: str  # text, left, right, space, pipe, lparen, rparen, declare, assign, char,
    # string, rawstring, charconst, number, bool, nil, ident, field, var, dot, keyword, eof
    val: str
    pos: int
    line: int


_KEYWORDS = {"if", "else", "end", "range", "with", "define", "template", "block", "break",
             "continue"}


def _lex(text: str) -> list[_Tok]:
    """Tokens of a whole template; trim markers are applied to the text tokens."""
    return _Lexer(text).run()


@dataclass
class _Lexer:
    src: str
    i: int = 0
    toks: list[_Tok] = field(default_factory=list)

    def line(self, pos: int) -> int:
        return self.src.count("\n", 0, pos) + 1

    def err(self, msg: str, pos: int) -> TemplateSyntaxError:
        return TemplateSyntaxError(f"{self.line(pos)}: {msg}")

    def emit(self, kind: str, val: str, pos: int) -> None:
        self.toks.append(_Tok(kind, val, pos, self.line(pos)))

    def run(self) -> list[_Tok]:
        src = self.src
        trim_next = False
        while self.i <= len(src):
            j = src.find("{{", self.i)
            end = len(src) if j < 0 else j
            chunk = src[self.i : end]
            if trim_next:
                chunk = chunk.lstrip(" \t\r\n")
            left_trim = j >= 0 and src.startswith("{{-", j) and src[j + 3 : j + 4] in " \t\r\n"
            if left_trim:
                chunk = chunk.rstrip(" \t\r\n")
            if chunk:
                self.emit("text", chunk, self.i)
            if j < 0:
                break
            self.i = j + (4 if left_trim else 2)
            trim_next = self.action(j)
        self.emit("eof", "", len(src))
        return self.toks

    def _close(self, at: int) -> int:
        """Length of a right delimiter at `at` (3-4 with trim marker), or 0."""
        s = self.src
        if s.startswith("}}", at):
            return 2
        if s[at : at + 1] in (" ", "\t", "\r", "\n") and s.startswith("-}}", at + 1):
            return 4
        return 0

    def action(self, start: int) -> bool:
        """Lex one action; returns whether it ended with a right trim marker."""
        s = self.src
        if s.startswith("/*", self.i):
            k = s.find("*/", self.i)
            if k < 0:
                raise self.err("unclosed comment", start)
            n = self._close(k + 2)
            if not n:
                raise self.err("comment ends before closing delimiter", start)
            self.i = k + 2 + n
            return n == 4
        self.emit("left", "{{", start)
        depth = 0
        while True:
            n = self._close(self.i)
            if n:
                if depth:
                    raise self.err("unclosed left paren", start)
                self.emit("right", "}}", self.i)
                self.i += n
                return n == 4
            if self.i >= len(s):
                raise self.err("unclosed action", start)
            depth = self.token(depth)

    def token(self, depth: int) -> int:
        """Lex one token inside an action; returns the parenthesis depth."""
        s, i = self.src, self.i
        c = s[i]
        if c in " \t\r\n":
            k = i + 1
            while k < len(s) and s[k] in " \t\r\n" and not self._close(k):
                k += 1
            self.emit("space", " ", i)
            self.i = k
            return depth
        if c == "|":
            self.emit("pipe", c, i)
        elif c == "(":
            self.emit("lparen", c, i)
            depth += 1
        elif c == ")":
            if depth == 0:
                raise self.err(f"unexpected right paren {c!r}", i)
            self.emit("rparen", c, i)
            depth -= 1
        elif s.startswith(":=", i):
            self.emit("declare", ":=", i)
            self.i += 2
            return depth
        elif c == "=":
            self.emit("assign", c, i)
        elif c == ",":
            self.emit("char", c, i)
        elif c in "\"`'":
            self.quoted(c)
            return depth
        elif c == "$" or (c == "." and not s[i + 1 : i + 2].isdigit()):
            k = i + 1
            while k < len(s) and (s[k].isalnum() or s[k] == "_"):
                k += 1
            kind = "var" if c == "$" else ("field" if k > i + 1 else "dot")
            self.emit(kind, s[i:k], i)
            self.i = k
            return depth
        elif c.isdigit() or c in "+-.":
            k = i + 1
            while k < len(s) and (s[k].isalnum() or s[k] in "._" or
                                  (s[k] in "+-" and s[k - 1] in "eEpP")):
                k += 1
            self.emit("number", s[i:k], i)
            self.i = k
            return depth
        elif c.isalpha() or c == "_":
            k = i
            while k < len(s) and (s[k].isalnum() or s[k] == "_"):
                k += 1
            word = s[i:k]
            kind = ("bool" if word in ("true", "false") else "nil" if word == "nil"
                    else "keyword" if word in _KEYWORDS else "ident")
            self.emit(kind, word, i)
            self.i = k
            return depth
        else:
            raise self.err(f"unrecognized character in action: {c!r}", i)
        self.i = i + 1
        return depth

    def quoted(self, q: str) -> None:
        s, i = self.src, self.i
        k = i + 1
        while True:
            if k >= len(s) or (q != "`" and s[k] == "\n"):
                raise self.err(_UNTERMINATED[q], i)
            if s[k] == "\\" and q != "`":
                k += 2
                continue
            if s[k] == q:
                break
            k += 1
        kind = {"\"": "string", "`": "rawstring", "'": "charconst"}[q]
        self.emit(kind, s[i : k + 1], i)
        self.i = k + 1


_UNTERMINATED = {
    '"': "unterminated quoted string",
    "`": "unterminated raw quoted string",
    "'": "unterminated character constant",
}


def _unquote(tok: _Tok) -> str:
    body = tok.val[1:-1]
    if tok.kind == "rawstring":
        return body
    try:
        return body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError as e:
        raise TemplateSyntaxError(f"{tok.line}: bad string syntax: {tok.val}") from e


def _number(tok: _Tok) -> int | float:
    text = tok.val.replace("_", "")
    try:
        if text.lower().lstrip("+-").startswith(("0x", "0o", "0b")):
            return int(text, 0)
        if any(c in text for c in ".eEpP"):
            return float(text)
        return int(text, 10)
    except ValueError:
        raise TemplateSyntaxError(f"{tok.line}: bad number syntax: {tok.val!r}") from None


def _describe(tok: _Tok) -> str:
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
        self.toks = _lex(text)
        self.k = 0
        self.funcs = funcs
        self.vars = ["$", *predeclared]

    # -- token stream ---------------------------------------------------------
    def peek(self) -> _Tok:
        return self.toks[self.k]

    def next(self) -> _Tok:
        tok = self.toks[self.k]
        if tok.kind != "eof":
            self.k += 1
        return tok

    def peek_nonspace(self) -> _Tok:
        while self.peek().kind == "space":
            self.k += 1
        return self.peek()

    def next_nonspace(self) -> _Tok:
        self.peek_nonspace()
        return self.next()

    def err(self, tok: _Tok, msg: str) -> TemplateSyntaxError:
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

    def term(self, tok: _Tok) -> Operand:
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
            return Operand(tok.pos, "num", _number(tok))
        if kind in ("string", "rawstring"):
            return Operand(tok.pos, "str", _unquote(tok))
        if kind == "charconst":
            return Operand(tok.pos, "num", ord(_unquote(tok)[:1] or "\0"))
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
