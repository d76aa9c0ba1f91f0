"""Frozen records: the one decorator benchc's immutable value types use.

`@frozen` makes a dataclass whose instances cannot change, like `@dataclass(frozen=True)`,
and every dataclasses function works on it (fields, replace, asdict). The difference is
cost: a frozen dataclass compiles six methods from generated source for every class when its
module is imported (about 0.5 ms a class, 25 ms of every `benchc compile` for the 51 classes
on its path); here only `__init__` is generated, and the other five are shared functions
that read the class's fields. Instances compare, hash and print as a frozen dataclass's do
(fields with compare=False or repr=False are left out the same way). Fields are assigned
once, by `__init__`; assigning or deleting one afterwards raises FrozenInstanceError.
"""

from __future__ import annotations

import dataclasses
from dataclasses import FrozenInstanceError


def _setattr(self, name: str, value) -> None:
    if name in self.__dict__ or name not in self.__dataclass_fields__:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)  # the one assignment, from __init__


def _delattr(self, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _values(self, names: tuple[str, ...]) -> tuple:
    return tuple(getattr(self, name) for name in names)


def _eq(self, other) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented
    names = self.__record_compare__
    return _values(self, names) == _values(other, names)


def _hash(self) -> int:
    return hash(_values(self, self.__record_hash__))


def _repr(self) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__record_repr__)
    return f"{self.__class__.__qualname__}({shown})"


def as_dict(value):
    """dataclasses.asdict for values made of records, tuples, lists, dicts and plain values
    (str, numbers, None), which it returns as they are instead of deep-copying each."""
    names = getattr(type(value), "__record_fields__", None)
    if names is not None:
        return {name: as_dict(getattr(value, name)) for name in names}
    if isinstance(value, (list, tuple)):
        return type(value)(as_dict(item) for item in value)
    if isinstance(value, dict):
        return {as_dict(key): as_dict(item) for key, item in value.items()}
    return value


def frozen(cls):
    """An immutable dataclass of `cls` (see the module's docstring)."""
    if cls.__doc__ is None:  # else dataclasses computes a signature for the docstring
        cls.__doc__ = cls.__name__
    cls = dataclasses.dataclass(cls, eq=False, repr=False)  # generates __init__ only
    fields = dataclasses.fields(cls)
    cls.__record_fields__ = tuple(f.name for f in fields)
    cls.__record_compare__ = tuple(f.name for f in fields if f.compare)
    cls.__record_hash__ = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
    cls.__record_repr__ = tuple(f.name for f in fields if f.repr)
    cls.__setattr__, cls.__delattr__ = _setattr, _delattr
    cls.__eq__, cls.__hash__, cls.__repr__ = _eq, _hash, _repr
    return cls
