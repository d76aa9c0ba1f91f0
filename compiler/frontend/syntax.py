"""The typed syntax tree of a .bench file: frozen nodes, each with its source span."""

from __future__ import annotations

from ..diagnostics import Source, Span
from ..records import frozen


@frozen
class Number:
    value: int | float
    span: Span


@frozen
class String:
    value: str
    span: Span


@frozen
class Bool:
    value: bool
    span: Span


@frozen
class Name:
    """A bare identifier used as a value: `bf16`, `gaudi2`, `adamw`."""

    value: str
    span: Span


@frozen
class ListValue:
    items: tuple[Value, ...]
    span: Span


@frozen
class Argument:
    name: str
    name_span: Span
    value: Value
    span: Span


@frozen
class Call:
    """`adamw(lr = 1e-4)`: a named choice with keyword arguments."""

    name: str
    name_span: Span
    arguments: tuple[Argument, ...]
    span: Span


Value = Number | String | Bool | Name | ListValue | Call


@frozen
class Key:
    parts: tuple[str, ...]
    span: Span

    @property
    def dotted(self) -> str:
        return ".".join(self.parts)


@frozen
class Assignment:
    key: Key
    value: Value
    span: Span


@frozen
class Block:
    name: str
    name_span: Span
    label: str | None
    label_span: Span | None
    body: tuple[Entry, ...]
    span: Span


@frozen
class Sweep:
    key: Key
    values: ListValue
    span: Span


Entry = Assignment | Block | Sweep


@frozen
class Include:
    path: String
    span: Span


@frozen
class Experiment:
    name: str
    name_span: Span
    body: tuple[Entry, ...]
    span: Span


Statement = Include | Experiment | Assignment | Block | Sweep


@frozen
class File:
    source: Source
    statements: tuple[Statement, ...]

    @property
    def includes(self) -> tuple[Include, ...]:
        return tuple(s for s in self.statements if isinstance(s, Include))

    @property
    def experiments(self) -> tuple[Experiment, ...]:
        return tuple(s for s in self.statements if isinstance(s, Experiment))

    @property
    def loose_entries(self) -> tuple[Entry, ...]:
        """Settings outside any experiment block (the body of a fragment file)."""
        return tuple(s for s in self.statements if isinstance(s, (Assignment, Block, Sweep)))


def plain(value: Value) -> object:
    """The Python value a syntax value stands for (calls become {"fn": name, "args": {...}})."""
    if isinstance(value, ListValue):
        return [plain(item) for item in value.items]
    if isinstance(value, Call):
        return {"fn": value.name, "args": {a.name: plain(a.value) for a in value.arguments}}
    return value.value
