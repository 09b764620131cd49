"""``Record``: a plain value class with ``__slots__``, for the types on ``gradebox exec``'s hot
path (``SandboxSpec``, ``Mount``, ``RunOutcome``, the default limits).

Those were dataclasses; importing :mod:`dataclasses` pulls in :mod:`inspect` (``ast``, ``dis``,
``tokenize``: ~5-10 ms), a cost every grader run through ``gradebox exec`` paid for nothing.
A record keeps what their users relied on: keyword or positional construction in field
order, defaults, equality over the compared fields, a readable ``repr``, frozen or not,
pickling and copying, and ``replace`` / ``as_dict`` in place of ``dataclasses.replace`` /
``asdict``.

A subclass names its fields once, in order, as its slots::

    class Mount(Record):
        __slots__ = _fields = ("source", "target", "read_only")
        _defaults = {"read_only": True}
        _frozen = True

Must not import anything beyond the standard library (nothing at all, in fact).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar, TypeVar

    _R = TypeVar("_R", bound="Record")

__all__ = ["Record"]


class Record:
    """A value with named fields (see the module's docstring)."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    # field -> default value (shared: only immutable values here)
    _defaults: ClassVar[dict[str, Any]] = {}
    # field -> a callable making a fresh default (a list, a dict)
    _factories: ClassVar[dict[str, Callable[[], Any]]] = {}
    # fields left out of ==, hash and repr (a callback)
    _uncompared: ClassVar[tuple[str, ...]] = ()
    _frozen: ClassVar[bool] = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(
                f"{type(self).__name__}() takes {len(fields)} arguments but {len(args)} were given"
            )
        values = dict(zip(fields, args, strict=False))
        for name, value in kwargs.items():
            if name not in fields:
                raise TypeError(f"{type(self).__name__}() got an unexpected argument {name!r}")
            if name in values:
                raise TypeError(f"{type(self).__name__}() got multiple values for {name!r}")
            values[name] = value
        for name in fields:
            if name in values:
                value = values[name]
            elif name in self._defaults:
                value = self._defaults[name]
            elif name in self._factories:
                value = self._factories[name]()
            else:
                raise TypeError(f"{type(self).__name__}() missing argument {name!r}")
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen:
            raise AttributeError(f"{type(self).__name__} is frozen: cannot assign {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if self._frozen:
            raise AttributeError(f"{type(self).__name__} is frozen: cannot delete {name!r}")
        object.__delattr__(self, name)

    def _compared(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in self._fields if f not in self._uncompared)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._compared() == other._compared()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        if not self._frozen:  # as a dataclass: a mutable value is not hashable
            raise TypeError(f"unhashable type: {type(self).__name__!r}")
        return hash(self._compared())

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f}={getattr(self, f)!r}" for f in self._fields if f not in self._uncompared
        )
        return f"{type(self).__name__}({shown})"

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle (Ray ships specs and outcomes) and copy rebuild through __init__: their
        # default would set each slot through __setattr__, which a frozen record refuses.
        return type(self), tuple(getattr(self, f) for f in self._fields)

    def replace(self: _R, **changes: Any) -> _R:
        """A copy with ``changes`` (as ``dataclasses.replace``)."""
        return type(self)(**{**self.as_dict(), **changes})

    def as_dict(self) -> dict[str, Any]:
        """Each field -> its value (shallow, unlike ``dataclasses.asdict``)."""
        return {f: getattr(self, f) for f in self._fields}
