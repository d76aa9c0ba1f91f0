"""Format .bench text in benchc's one canonical style, keeping every comment (`benchc fmt`).

The style is documented in docs/language.md ("Formatting"). In short: two spaces per block;
`key = value`, `f(a = 1)`, `[a, b]`, `name { a = 1; b = 2 }` spacing; a list or call on one
line when it fits in WIDTH, else one item per line with a trailing comma; line breaks between
statements are the author's (statements on one line stay joined with `; `, a one-line block
stays one line, when it fits and holds no comment); adjacent lines at one depth align `=` and
the `{` of unlabelled blocks; a trailing comment keeps its author's spacing (two at least) and
shares the rightmost column with those of adjacent lines; blank lines at most one in a row;
numbers, strings and labels exactly as written; LF, no BOM, one final newline.

Comments, which the grammar ignores, are found by scanning the text with the grammar's own
STRING and COMMENT terminals and attached by position to the nearest statement, list item or
call argument: trailing, leading (own lines before it), opening (on a `{`, `[` or `(` line)
or closing (own lines before the closing bracket). One between the words of a statement moves
to its own line before it. The result is parsed again: a text whose syntax tree or comments
differ from the input's is refused as a bug instead of being written. It is one module of
about 400 lines because the comment attachment and the layout rules read the same positions.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field, fields, is_dataclass
from functools import lru_cache

from ..diagnostics import BenchError, Source
from ..records import frozen
from . import syntax as ast
from .parser import parse_text, terminal_regexp

WIDTH = 100
INDENT = "  "


@frozen
class Comment:
    start: int  # offset in the text
    line: int
    column: int  # 1-based
    text: str  # trailing white space removed
    own_line: bool  # nothing but white space before it on its line
    gap: int  # white space between the code before it and the comment


@dataclass
class Line:
    depth: int
    head: str = ""  # the part that alignment pads (a key, a block's name)
    rest: str = ""
    kind: str | None = None  # "=", "sweep" or "{": adjacent lines of one kind align
    comments: list[Comment] = field(default_factory=list)  # trailing, then continuations
    note: str | None = None  # a comment on a line of its own
    blank: bool = False
    column: int = 0  # where the trailing comment starts


class FormatError(RuntimeError):
    """The formatted text would not mean what the file means: a bug in benchc, not the user's."""


@lru_cache(maxsize=1)
def _scanner() -> re.Pattern:
    """The grammar's own STRING and COMMENT terminals. In a text that parses, a `"` outside a
    comment starts a string and a `#` or `//` outside a string starts a comment (no other
    terminal holds those characters), so scanning for the two finds every comment."""
    return re.compile("|".join(f"({terminal_regexp(name)})" for name in ("STRING", "COMMENT")))


def comments_of(text: str) -> list[Comment]:
    """Every comment of a text that parses, in order."""
    result = []
    line, counted = 1, 0  # the line number of offset `counted`
    for match in _scanner().finditer(text):
        if match.group(2) is None:
            continue  # a string
        start = match.start()
        line += text.count("\n", counted, start)
        counted = start
        before = text[text.rfind("\n", 0, start) + 1 : start]
        code = before.rstrip(" \t\f\r")
        column = len(before) + 1
        result.append(Comment(start, line, column, match.group().rstrip(), not code, len(before) - len(code)))
    return result


def format_source(source: Source) -> str:
    """The canonical text of `source`. Raises BenchError (located) when it does not parse."""
    tree = parse_text(source)
    comments = comments_of(source.text)
    text = _Formatter(source, comments).file(tree)
    try:
        same = _shape(parse_text(Source(source.name, text)).statements) == _shape(tree.statements)
    except BenchError:
        same = False
    if not same or [c.text for c in comments_of(text)] != [c.text for c in comments]:
        raise FormatError(f"formatting {source.name} would change its meaning; left as it is")
    return text


def _shape(node) -> object:
    """A node without its spans: what must not change when a file is formatted."""
    if isinstance(node, tuple):
        return tuple(_shape(n) for n in node)
    if is_dataclass(node):
        kept = (f.name for f in fields(node) if not f.name.endswith("span"))
        return (type(node).__name__, *(_shape(getattr(node, name)) for name in kept))
    return type(node).__name__, node


def _fits(depth: int, text: str) -> bool:
    return len(INDENT) * depth + len(text) <= WIDTH


@dataclass
class _Parts:
    """How a container's comments fall among its elements."""

    opening: list[Comment]
    leading: list[list[Comment]]
    inner: list[list[Comment]]
    trailing: list[list[Comment]]
    closing: list[Comment]


class _Formatter:
    def __init__(self, source: Source, comments: list[Comment]):
        self.text = source.text
        self.blank = [not line.strip(" \t\f\r") for line in self.text.split("\n")]
        self.starts = [0] + [m.end() for m in re.finditer("\n", self.text)]  # of each line
        self.comments = comments
        self.offsets = [c.start for c in comments]
        self.out: list[Line] = []

    # ------------------------------------------------------------ positions

    def _offset(self, line: int, column: int) -> int:
        return self.starts[line - 1] + column - 1

    def _bounds(self, node) -> tuple[int, int]:
        s = node.span
        return self._offset(s.line, s.column), self._offset(s.end_line, s.end_column)

    def _written(self, span) -> str:
        """A token exactly as the author wrote it (numbers, strings, labels)."""
        return self.text[self._offset(span.line, span.column) : self._offset(span.end_line, span.end_column)]

    def _within(self, comments: list[Comment], low: int, high: int) -> list[Comment]:
        return [c for c in comments if low <= c.start < high]

    def _any_comment(self, low: int, high: int) -> bool:
        return bisect.bisect_left(self.offsets, high) > bisect.bisect_left(self.offsets, low)

    def _bracket(self, after_span, char: str) -> int:
        """The offset of the `{` or `(` that follows a head, past white space and comments."""
        i = self._offset(after_span.end_line, after_span.end_column)
        while self.text[i] != char:
            if self.text[i] in "#/":
                newline = self.text.find("\n", i)
                i = len(self.text) if newline < 0 else newline
            else:
                i += 1
        return i

    def _region(self, node) -> tuple[int, int] | None:
        """The part of a node that places its own comments; the rest of it is a gap."""
        if isinstance(node, (ast.Assignment, ast.Argument)):
            return self._region(node.value)
        if isinstance(node, ast.Sweep):
            return self._bounds(node.values)
        if isinstance(node, ast.ListValue):
            return self._bounds(node)
        if isinstance(node, ast.Call):
            return self._bracket(node.name_span, "("), self._bounds(node)[1]
        if isinstance(node, (ast.Block, ast.Experiment)):
            head = getattr(node, "label_span", None) or node.name_span
            return self._bracket(head, "{"), self._bounds(node)[1]
        return None

    def _blank_between(self, previous: int | None, line: int) -> bool:
        return previous is not None and any(self.blank[previous : line - 1])

    # ------------------------------------------------------------ comments

    def _distribute(self, elements, comments: list[Comment], open_line: int | None) -> _Parts:
        n = len(elements)
        parts = _Parts([], [[] for _ in elements], [[] for _ in elements], [[] for _ in elements], [])
        bounds = [self._bounds(e) for e in elements]
        starts = [b[0] for b in bounds]
        tail: tuple[list[Comment], int, int] | None = None  # where a continuation would go
        for c in comments:
            i = bisect.bisect_right(starts, c.start) - 1
            if i >= 0 and c.start < bounds[i][1]:
                parts.inner[i].append(c)
                tail = None
                continue
            before = i + 1  # elements that end before this comment
            if tail and c.own_line and c.line == tail[1] + 1 and c.column == tail[2]:
                tail[0].append(c)
                tail = (tail[0], c.line, c.column)
                continue
            if not c.own_line and before and elements[before - 1].span.end_line == c.line:
                target = parts.trailing[before - 1]
            elif not c.own_line and not before and c.line == open_line:
                target = parts.opening
            else:
                (parts.leading[before] if before < n else parts.closing).append(c)
                tail = None
                continue
            target.append(c)
            tail = (target, c.line, c.column)
        for i, element in enumerate(elements):  # comments in a statement's gaps go before it
            region = self._region(element)
            low, high = region or (0, 0)
            parts.leading[i] += [c for c in parts.inner[i] if not low <= c.start < high]
            parts.inner[i] = self._within(parts.inner[i], low, high)
        return parts

    # ------------------------------------------------------------ flat text

    def _flat(self, node) -> str | None:
        """The node on one line, or None when it must span lines (a comment inside it, or a
        block the author wrote on several lines)."""
        region = self._region(node)
        if region and self._any_comment(*region):
            return None
        if isinstance(node, (ast.Number, ast.String)):
            return self._written(node.span)
        if isinstance(node, ast.Bool):
            return "true" if node.value else "false"
        if isinstance(node, ast.Name):
            return node.value
        if isinstance(node, ast.ListValue):
            return "[" + ", ".join(self._flat(item) for item in node.items) + "]"
        if isinstance(node, ast.Call):
            arguments = (f"{a.name} = {self._flat(a.value)}" for a in node.arguments)
            return f"{node.name}({', '.join(arguments)})"
        if isinstance(node, ast.Include):
            return f"include {self._written(node.path.span)}"
        head, rest, _ = self._head(node)
        if isinstance(node, (ast.Assignment, ast.Sweep)):
            return head + rest + self._flat(node.value if isinstance(node, ast.Assignment) else node.values)
        if node.span.line != node.span.end_line and node.body:
            return None
        body = [self._flat(entry) for entry in node.body]
        return f"{head} {{ {'; '.join(body)} }}" if body else f"{head} {{}}"

    def _head(self, node) -> tuple[str, str, str | None]:
        """(head, what follows it up to the value or `{`, alignment kind) of a statement."""
        if isinstance(node, ast.Assignment):
            return node.key.dotted, " = ", "="
        if isinstance(node, ast.Sweep):
            return f"sweep {node.key.dotted}", " = ", "sweep"
        if isinstance(node, ast.Experiment):
            return f"experiment {node.name}", " {", None
        if node.label_span is None:
            return node.name, " {", "{"
        return f"{node.name} {self._written(node.label_span)}", " {", None

    # ------------------------------------------------------------ lines

    def file(self, tree: ast.File) -> str:
        self._body(tree.statements, self.comments, None, 0)
        return _render(self.out)

    def _notes(self, comments: list[Comment], depth: int, previous: int | None) -> int | None:
        for c in comments:
            if self._blank_between(previous, c.line):
                self.out.append(Line(depth, blank=True))
            self.out.append(Line(depth, note=c.text))
            previous = c.line
        return previous

    def _body(self, elements, comments: list[Comment], open_line: int | None, depth: int) -> None:
        parts = self._distribute(elements, comments, open_line)
        if open_line is not None:
            self.out[-1].comments += parts.opening
        groups: list[list[int]] = []
        for i, element in enumerate(elements):  # statements the author put on one line
            if groups and element.span.line == elements[groups[-1][-1]].span.end_line:
                groups[-1].append(i)
            else:
                groups.append([i])
        previous = None
        for group in groups:
            flats = [self._flat(elements[i]) for i in group]
            quiet = not any(parts.leading[i] for i in group[1:]) and not any(
                parts.trailing[i] for i in group[:-1]
            )
            joined = "; ".join(f for f in flats if f is not None)
            if len(group) > 1 and quiet and None not in flats and _fits(depth, joined):
                first, last = elements[group[0]], group[-1]
                previous = self._notes(parts.leading[group[0]], depth, previous)
                if self._blank_between(previous, first.span.line):
                    self.out.append(Line(depth, blank=True))
                self.out.append(Line(depth, rest=joined, comments=parts.trailing[last]))
                previous = max([elements[last].span.end_line, *(c.line for c in parts.trailing[last])])
                continue
            for i in group:
                previous = self._notes(parts.leading[i], depth, previous)
                if self._blank_between(previous, elements[i].span.line):
                    self.out.append(Line(depth, blank=True))
                self._statement(elements[i], parts.inner[i], depth)
                self.out[-1].comments += parts.trailing[i]
                previous = max([elements[i].span.end_line, *(c.line for c in parts.trailing[i])])
        if parts.closing:
            self._notes(parts.closing, depth, previous)

    def _statement(self, node, inner: list[Comment], depth: int) -> None:
        if isinstance(node, ast.Include):
            self.out.append(Line(depth, rest=self._flat(node)))
            return
        head, rest, kind = self._head(node)
        if isinstance(node, (ast.Assignment, ast.Sweep)):
            value = node.value if isinstance(node, ast.Assignment) else node.values
            self._value(head, rest, value, inner, depth, "", kind)
            return
        flat = self._flat(node)
        if flat is not None and _fits(depth, flat):
            self.out.append(Line(depth, head, flat[len(head) :], kind))
            return
        self.out.append(Line(depth, head, rest, kind))
        brace = self._region(node)[0]
        open_line = bisect.bisect_right(self.starts, brace)
        self._body(node.body, inner, open_line, depth + 1)
        self.out.append(Line(depth, rest="}"))

    def _value(self, head, prefix, value, inner, depth, suffix, kind=None) -> None:
        """Lines for `head + prefix + value + suffix`: one if it fits, else the value broken."""
        flat = self._flat(value)
        children = value.items if isinstance(value, ast.ListValue) else getattr(value, "arguments", ())
        if flat is not None and (_fits(depth, head + prefix + flat + suffix) or not children):
            self.out.append(Line(depth, head, prefix + flat + suffix, kind))
            return
        opener, closer = ("[", "]") if isinstance(value, ast.ListValue) else (f"{value.name}(", ")")
        self.out.append(Line(depth, head, prefix + opener, kind))
        low, high = self._region(value)
        open_line = bisect.bisect_right(self.starts, low)
        parts = self._distribute(children, self._within(inner, low + 1, high - 1), open_line)
        self.out[-1].comments += parts.opening
        for i, child in enumerate(children):
            self._notes(parts.leading[i], depth + 1, None)
            if isinstance(child, ast.Argument):
                self._value("", f"{child.name} = ", child.value, parts.inner[i], depth + 1, ",")
            else:
                self._value("", "", child, parts.inner[i], depth + 1, ",")
            self.out[-1].comments += parts.trailing[i]
        self._notes(parts.closing, depth + 1, None)
        self.out.append(Line(depth, rest=closer + suffix))


# ---------------------------------------------------------------- alignment and text


def _runs(lines: list[Line]) -> list[list[Line]]:
    """Adjacent lines at one depth, not parted by a blank line."""
    runs: list[list[Line]] = []
    for line in lines:
        if line.blank:
            runs.append([])
        elif runs and runs[-1] and runs[-1][-1].depth == line.depth:
            runs[-1].append(line)
        else:
            runs.append([line])
    return [run for run in runs if run]


def _render(lines: list[Line]) -> str:
    for run in _runs(lines):
        group: list[Line] = []
        for line in [*run, Line(-1)]:  # the sentinel closes the last group
            if line.note is not None:
                continue  # a comment on its own line parts no alignment
            if group and line.kind != group[0].kind:
                width = max(len(g.head) for g in group)
                for g in group:
                    g.head = g.head.ljust(width)
                group = []
            if line.kind is not None:
                group.append(line)
        commented = [line for line in run if line.comments]
        column = max((_column(line) for line in commented), default=0)
        for line in commented:
            line.column = column
    text = []
    for line in lines:
        code = INDENT * line.depth + line.head + line.rest
        if line.blank:
            text.append("")
        elif line.note is not None:
            text.append(INDENT * line.depth + line.note)
        elif not line.comments:
            text.append(code)
        else:
            text.append(code.ljust(line.column) + line.comments[0].text)
            text += [" " * line.column + c.text for c in line.comments[1:]]
    return "\n".join(text) + "\n" if text else ""


def _column(line: Line) -> int:
    """Where a line's trailing comment goes: as far after the code as the author put it, two
    spaces at least."""
    code = len(INDENT) * line.depth + len(line.head) + len(line.rest)
    return code + max(line.comments[0].gap, 2)
