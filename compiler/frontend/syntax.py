"""The typed syntax tree of a .bench file: frozen nodes, each with its source span."""

from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import Source, Span


@dataclass(frozen=True)
class Number:
    value: int | float
    span: Span


@dataclass(frozen=True)
class String:
    value: str
    span: Span


@dataclass(frozen=True)
class Bool:
    value: bool
    span: Span


@dataclass(frozen=True)
class Name:
    """A bare identifier used as a value: `bf16`, `gaudi2`, `adamw`."""

    value: str
    span: Span


@dataclass(frozen=True)
class ListValue:
    items: tuple[Value, ...]
    span: Span


@dataclass(frozen=True)
class Argument:
    name: str
    name_span: Span
    value: Value
    span: Span


@dataclass(frozen=True)
class Call:
    """`adamw(lr = 1e-4)`: a named choice with keyword arguments."""

    name: str
    name_span: Span
    arguments: tuple[Argument, ...]
    span: Span


Value = Number | String | Bool | Name | ListValue | Call


@dataclass(frozen=True)
class Key:
    parts: tuple[str, ...]
    span: Span

    @property
    def dotted(self) -> str:
        return ".".join(self.parts)


@dataclass(frozen=True)
class Assignment:
    key: Key
    value: Value
    span: Span


@dataclass(frozen=True)
class Block:
    name: str
    name_span: Span
    label: str | None
    label_span: Span | None
    body: tuple[Entry, ...]
    span: Span


@dataclass(frozen=True)
class Sweep:
    key: Key
    values: ListValue
    span: Span


Entry = Assignment | Block | Sweep


@dataclass(frozen=True)
class Include:
    path: String
    span: Span


@dataclass(frozen=True)
class Experiment:
    name: str
    name_span: Span
    body: tuple[Entry, ...]
    span: Span


Statement = Include | Experiment | Assignment | Block | Sweep


@dataclass(frozen=True)
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
