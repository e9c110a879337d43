"""Lexer for Go text/template: text, `{{ }}` actions with trim markers, comments, tokens.

Kept apart from the parser (template_parse.py) as Go's text/template/parse
keeps lex.go; error messages match Go's ("unclosed action", ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field


class TemplateSyntaxError(Exception):
    """A template that Go's text/template would refuse to parse."""


@dataclass
class Tok:
    kind: str  # text, left, right, space, pipe, lparen, rparen, declare, assign, char,
    # string, rawstring, charconst, number, bool, nil, ident, field, var, dot, keyword, eof
    val: str
    pos: int
    line: int


_KEYWORDS = {"if", "else", "end", "range", "with", "define", "template", "block", "break",
             "continue"}


def lex(text: str) -> list[Tok]:
    """Tokens of a whole template; trim markers are applied to the text tokens."""
    return _Lexer(text).run()


@dataclass
class _Lexer:
    src: str
    i: int = 0
    toks: list[Tok] = field(default_factory=list)

    def line(self, pos: int) -> int:
        return self.src.count("\n", 0, pos) + 1

    def err(self, msg: str, pos: int) -> TemplateSyntaxError:
        return TemplateSyntaxError(f"{self.line(pos)}: {msg}")

    def emit(self, kind: str, val: str, pos: int) -> None:
        self.toks.append(Tok(kind, val, pos, self.line(pos)))

    def run(self) -> list[Tok]:
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


def unquote(tok: Tok) -> str:
    body = tok.val[1:-1]
    if tok.kind == "rawstring":
        return body
    try:
        return body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError as e:
        raise TemplateSyntaxError(f"{tok.line}: bad string syntax: {tok.val}") from e


def number(tok: Tok) -> int | float:
    text = tok.val.replace("_", "")
    try:
        if text.lower().lstrip("+-").startswith(("0x", "0o", "0b")):
            return int(text, 0)
        if any(c in text for c in ".eEpP"):
            return float(text)
        return int(text, 10)
    except ValueError:
        raise TemplateSyntaxError(f"{tok.line}: bad number syntax: {tok.val!r}") from None
