"""A fast ``dataclasses.replace`` for the frozen, slotted values the loop rebuilds every tick.

``dataclasses.replace`` re-runs ``__init__`` through ``fields()`` on every call; the executor
rebuilds its state several times a tick, and that alone was a fifth of the loop's CPU time.
This version copies the slots directly. It is only used for classes without ``__post_init__``
(there is nothing to re-validate); anything else falls back to the standard function.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")

_FIELDS: dict[type, tuple[str, ...] | None] = {}


def _names(cls: type) -> tuple[str, ...] | None:
    try:
        return _FIELDS[cls]
    except KeyError:
        names: tuple[str, ...] | None = None
        if (
            dataclasses.is_dataclass(cls)
            and "__slots__" in cls.__dict__
            and not hasattr(cls, "__post_init__")
        ):
            names = tuple(f.name for f in dataclasses.fields(cls) if f.init)
        _FIELDS[cls] = names
        return names


def replace(obj: T, /, **changes: Any) -> T:
    """Like :func:`dataclasses.replace`, without re-running ``__init__`` when that is safe."""
    cls = type(obj)
    names = _names(cls)
    if names is None:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    for key in changes:
        if key not in names:
            raise TypeError(f"{cls.__name__} has no field {key!r}")
    new = object.__new__(cls)
    setter = object.__setattr__
    for name in names:
        setter(new, name, changes[name] if name in changes else getattr(obj, name))
    return new
