"""Parse .bench text with the Lark grammar into the typed syntax tree, with friendly parse errors."""

from __future__ import annotations

import io
import json
import math
import re
from functools import lru_cache
from importlib import resources

import lark
from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken, VisitError

from .. import cache
from ..diagnostics import BenchError, Source, Span, error
from . import syntax as ast

KEYWORDS = ("experiment", "include", "sweep", "true", "false")

# How the parser's terminal names read in a message.
_TERMINAL_WORDS = {
    "NAME": "a name",
    "STRING": "a string",
    "NUMBER": "a number",
    "TRUE": "true",
    "FALSE": "false",
    "$END": "end of file",
}


MAX_KEY_PARTS = 16
MAX_INTEGER = 2**63 - 1  # what a 64-bit counter holds; Python refuses past 4,300 digits
MAX_INTEGER_DIGITS = len(str(MAX_INTEGER))


def _abbreviated(text: str, keep: int = 24) -> str:
    return text if len(text) <= keep else f"{text[:keep]}... ({len(text)} characters)"


_LARK_OPTIONS = {"parser": "lalr", "propagate_positions": True, "maybe_placeholders": True}


@lru_cache(maxsize=1)
def _lark() -> Lark:
    """The LALR parser of the grammar. Building its tables takes about 0.1 s, so a built one
    is kept in benchc's cache folder (compiler/cache.py), keyed by the grammar text, the
    options and the lark version; an entry that cannot be read is rebuilt, never an error."""
    grammar = resources.files("benchc.grammar").joinpath("bench.lark").read_text("utf-8")
    name = "lark-" + cache.key(grammar, repr(sorted(_LARK_OPTIONS.items())), lark.__version__) + ".pickle"
    saved = cache.read_bytes(name)
    if saved is not None:
        try:
            return Lark.load(io.BytesIO(saved))
        except Exception:  # noqa: BLE001 - damaged, truncated or foreign: build it anew
            pass
    parser = Lark(grammar, **_LARK_OPTIONS)
    if cache.cache_dir() is not None:
        data = io.BytesIO()
        parser.save(data)
        cache.write_bytes(name, data.getvalue())
    return parser


def terminal_regexp(name: str) -> str:
    """A terminal of the grammar as a regular expression (the formatter scans for comments
    with the grammar's own STRING and COMMENT)."""
    return _lark().get_terminal(name).pattern.to_regexp()


def parse_text(source: Source, start: str = "start") -> ast.File:
    """Parse a whole file. Raises BenchError with the location of the first syntax error."""
    try:
        tree = _lark().parse(source.text)
    except UnexpectedInput as exc:
        raise _syntax_error(source, exc) from None
    try:
        return ast.File(source, tuple(_Builder(source).transform(tree).children))
    except VisitError as exc:  # a located error raised while building a node
        if isinstance(exc.orig_exc, BenchError):
            raise exc.orig_exc from None
        raise


def parse_value(source: Source) -> ast.Value:
    """Parse a lone value (the right-hand side of a `--set key=value`)."""
    file = parse_text(Source(source.name, f"__value__ = {source.text}"))
    statement = file.statements[0] if len(file.statements) == 1 else None
    if not isinstance(statement, ast.Assignment):
        raise error("expected a single value", Span.start_of(source))
    return _shift(statement.value, source, len("__value__ = "))


def _shift(value: ast.Value, source: Source, by: int) -> ast.Value:
    """Move a value parsed from a prefixed text back onto the user's own text."""

    def move(span: Span) -> Span:
        return Span(source, span.line, span.column - by, span.end_line, span.end_column - by)

    if isinstance(value, ast.ListValue):
        return ast.ListValue(tuple(_shift(i, source, by) for i in value.items), move(value.span))
    if isinstance(value, ast.Call):
        arguments = tuple(
            ast.Argument(a.name, move(a.name_span), _shift(a.value, source, by), move(a.span))
            for a in value.arguments
        )
        return ast.Call(value.name, move(value.name_span), arguments, move(value.span))
    return type(value)(value.value, move(value.span))


# ------------------------------------------------------------------ tree -> nodes


class _Builder(Transformer):
    def __init__(self, source: Source):
        super().__init__()
        self.source = source

    def _span(self, meta) -> Span:
        return Span(self.source, meta.line, meta.column, meta.end_line, meta.end_column)

    def _token_span(self, token: Token) -> Span:
        return Span(self.source, token.line, token.column, token.end_line, token.end_column)

    @v_args(meta=True)
    def number(self, meta, children):
        token = children[0]
        text = token.replace("_", "")
        span = self._token_span(token)
        if any(c in text for c in ".eE"):
            value = float(text)
            if not math.isfinite(value):
                raise error(f"number {token} is too large", span)
            if value.is_integer() and abs(value) < 2**53 and "." not in text:
                value = int(value)  # 1e3 is the integer 1000, as a reader would expect
            return ast.Number(value, span)
        digits = text.lstrip("+-")
        if len(digits.lstrip("0")) > MAX_INTEGER_DIGITS or int(text) > MAX_INTEGER:
            raise error(
                f"integer {_abbreviated(token)} is too large",
                span,
                hint=f"integers in a spec are at most {MAX_INTEGER:,} (2**63 - 1)",
            )
        return ast.Number(int(text), span)

    @v_args(meta=True)
    def string(self, meta, children):
        token = children[0]
        span = self._token_span(token)
        try:
            value = json.loads(token, strict=False)
        except json.JSONDecodeError:
            raise error(
                "invalid escape sequence in string",
                span,
                hint=r"strings use JSON escapes: \" \\ \n \t \uXXXX",
            ) from None
        lone = next((char for char in value if "\ud800" <= char <= "\udfff"), None)
        if lone is not None:  # no UTF-8 output (a plan, a program) could hold it
            raise error(
                f"string holds \\u{ord(lone):04x}, half of a surrogate pair: not a character",
                span,
                hint=r"write the character itself, or both halves of its pair, e.g. \ud83d\ude00",
            )
        return ast.String(value, span)

    @v_args(meta=True)
    def true(self, meta, children):
        return ast.Bool(True, self._token_span(children[0]))

    @v_args(meta=True)
    def false(self, meta, children):
        return ast.Bool(False, self._token_span(children[0]))

    @v_args(meta=True)
    def name(self, meta, children):
        return ast.Name(str(children[0]), self._token_span(children[0]))

    @v_args(meta=True)
    def list(self, meta, children):
        return ast.ListValue(tuple(c for c in children if c is not None), self._span(meta))

    @v_args(meta=True)
    def argument(self, meta, children):
        name, value = children
        return ast.Argument(str(name), self._token_span(name), value, self._span(meta))

    @v_args(meta=True)
    def call(self, meta, children):
        name, *arguments = children
        arguments = tuple(a for a in arguments if a is not None)
        seen: dict[str, ast.Argument] = {}
        for argument in arguments:
            if argument.name in seen:
                raise error(f"argument '{argument.name}' given twice", argument.name_span)
            seen[argument.name] = argument
        return ast.Call(str(name), self._token_span(name), arguments, self._span(meta))

    @v_args(meta=True)
    def key(self, meta, children):
        if len(children) > MAX_KEY_PARTS:  # each part is a level of the settings: keep it shallow
            raise error(
                f"a dotted key of {len(children):,} parts; keys have at most {MAX_KEY_PARTS}",
                self._span(meta),
                hint="the deepest setting is a few levels down, e.g. on.h100.train.batch",
            )
        return ast.Key(tuple(str(c) for c in children), self._span(meta))

    @v_args(meta=True)
    def label(self, meta, children):
        token = children[0]
        if token.type == "STRING":
            return self.string(meta, children).value, self._token_span(token)
        return str(token), self._token_span(token)

    @v_args(meta=True)
    def assignment(self, meta, children):
        key, value = children
        return ast.Assignment(key, value, self._span(meta))

    @v_args(meta=True)
    def block(self, meta, children):
        name, label, *body = children
        label_value, label_span = label if label is not None else (None, None)
        return ast.Block(
            str(name), self._token_span(name), label_value, label_span, tuple(body),
            self._span(meta),
        )  # fmt: skip

    @v_args(meta=True)
    def sweep(self, meta, children):
        key, values = children
        return ast.Sweep(key, values, self._span(meta))

    @v_args(meta=True)
    def include(self, meta, children):
        return ast.Include(self.string(meta, children), self._span(meta))

    @v_args(meta=True)
    def experiment(self, meta, children):
        name, *body = children
        if str(name) in KEYWORDS:
            raise error(
                f"'{name}' is a keyword; it cannot name an experiment",
                self._token_span(name),
                hint="name the experiment after what it measures, e.g. sd3_mmdit_train",
            )
        return ast.Experiment(str(name), self._token_span(name), tuple(body), self._span(meta))


# ------------------------------------------------------------------ syntax errors


def _describe_expected(names: set[str]) -> str:
    parser = _lark()
    words = []
    for name in sorted(names):
        if name in _TERMINAL_WORDS:
            words.append(_TERMINAL_WORDS[name])
            continue
        try:
            pattern = parser.get_terminal(name).pattern
        except KeyError:
            words.append(name.lower())
            continue
        words.append(f"'{pattern.value}'" if pattern.type == "str" else name.lower())
    words = sorted(set(words))
    if len(words) > 1:
        return ", ".join(words[:-1]) + " or " + words[-1]
    return words[0] if words else "something else"


def _describe_token(token: Token) -> str:
    if token.type == "$END":
        return "end of file"
    kind = {"NAME": "name", "STRING": "string", "NUMBER": "number"}.get(token.type)
    return f"{kind} {token}" if kind == "string" else f"{kind} '{token}'" if kind else f"'{token}'"


def _syntax_error(source: Source, exc: UnexpectedInput) -> BenchError:
    if isinstance(exc, UnexpectedCharacters):
        span = Span.point(source, exc.line, exc.column)
        char = source.text[exc.pos_in_stream]
        if char == '"':
            line_end = source.text.find("\n", exc.pos_in_stream)
            line_end = len(source.text) if line_end < 0 else line_end
            width = max(1, line_end - exc.pos_in_stream)
            span = Span(source, exc.line, exc.column, exc.line, exc.column + width)
            return error(
                "unterminated string",
                span,
                hint='close the string with " on the same line (write \\n for a line break)',
            )
        if char in "+-0123456789":
            end = exc.pos_in_stream + 1
            while end < len(source.text) and (source.text[end].isalnum() or source.text[end] in "_.+-"):
                end += 1
            word = source.text[exc.pos_in_stream : end]
            return error(
                f"malformed number '{word}'",
                Span(source, exc.line, exc.column, exc.line, exc.column + len(word)),
                hint='numbers look like 16, 1_024, -3, 2.5 or 1e-4; write text as a "string"',
            )
        shown = repr(char) if not char.isprintable() or char.isspace() else f"'{char}'"
        return error(
            f"unexpected character {shown}",
            span,
            hint=f"expected {_describe_expected(set(exc.allowed or ()))}",
        )
    if isinstance(exc, UnexpectedToken) and exc.token.type != "$END":
        token = exc.token
        span = Span(source, token.line, token.column, token.end_line, token.end_column)
        expected = _describe_expected(set(exc.expected))
        hint = f"expected {expected}"
        previous = _name_before(source.text, token.start_pos)
        if token.type == "NAME" and token in KEYWORDS:
            hint += f"; '{token}' is a keyword and cannot be used as a name"
        elif previous == "experiment" and token.type == "STRING":
            bare = re.sub(r"[^A-Za-z0-9_]", "_", token[1:-1]) or "name"
            bare = bare if bare[0].isalpha() or bare[0] == "_" else f"_{bare}"
            hint = f"an experiment's name is a bare identifier, not a string: experiment {bare} {{ ... }}"
        elif previous in KEYWORDS:
            hint += f"; '{previous}' is a keyword and cannot be used as a name"
        elif "LSQB" in exc.expected and "NAME" not in exc.expected and "EQUAL" not in exc.expected:
            hint += "; a sweep takes a list of values, e.g. sweep train.batch = [16, 32]"
        return error(f"unexpected {_describe_token(token)}", span, hint=hint)
    # End of input: lark gives no usable position. A block or list left open is reported at
    # its opening bracket; anything else at the last character.
    expected = set(getattr(exc, "expected", ()) or ())
    opened = _unclosed(source.text)
    if opened is not None and ({"RBRACE", "RSQB"} & expected or not expected):
        offset, bracket = opened
        line, column = source.position(offset)
        what, closing = ("block", "}") if bracket == "{" else ("list", "]")
        end_line = source.last_position[0]
        return error(f"this {what} is not closed", Span.point(source, line, column),
                     hint=f"add the missing '{closing}' (the file ends at line {end_line})")  # fmt: skip
    hint = f"expected {_describe_expected(expected)}" if expected else None
    return error("unexpected end of file", Span.end_of(source), hint=hint)


def _name_before(text: str, end: int) -> str | None:
    """The name that ends just before offset `end` (whitespace between allowed), or None.
    Found by walking back from `end`: a regex search for it would try every start on the
    line, quadratic on a long one (a 100,000-character name took minutes)."""
    stop = end
    while stop > 0 and text[stop - 1].isspace():
        stop -= 1
    start = stop
    while start > 0 and (text[start - 1] == "_" or (text[start - 1].isascii() and text[start - 1].isalnum())):
        start -= 1
    return text[start:stop].lstrip("0123456789") or None


def _unclosed(text: str) -> tuple[int, str] | None:
    """The innermost '{' or '[' left open at the end of `text` (offset, bracket), skipping
    strings and comments as the grammar does; None when every bracket is closed."""
    stack: list[tuple[int, str]] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == "#" or text.startswith("//", i):
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
            continue
        if char == '"':
            i += 1
            while i < n and text[i] not in '"\n':
                i += 2 if text[i] == "\\" else 1
        elif char in "{[":
            stack.append((i, char))
        elif char in "}]" and stack:
            stack.pop()
        i += 1
    return stack[-1] if stack else None
