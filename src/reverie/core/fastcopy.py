"""Fast construction and copies of the frozen values the loop builds and rebuilds every tick.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` (its own
``__setattr__`` refuses), and ``dataclasses.replace`` re-runs it through ``fields()``: a tick
builds ~30 such values and copies its state several times, and that was about a fifth of a
step's CPU time. Two remedies, both keeping every value frozen from the outside (assigning a field
still raises ``FrozenInstanceError``):

- :func:`fast_frozen`, for the hottest classes (frozen dataclasses *without* slots): the
  instance's ``__dict__`` is filled at once, as one dict display, in ``__init__``, and
  :func:`replace` copies it as one dict merge.
- :func:`replace` for a slotted class copies the slots directly.

Both serve only classes without ``__post_init__`` (:func:`fast_frozen` refuses one; for
:func:`replace` there is nothing to re-validate) and, for :func:`replace`, without fields
outside ``__init__`` (they are set afresh by ``__init__``); :func:`replace` falls back to
``dataclasses.replace`` for anything else (and for an unknown field, which it names).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

_COPIERS: dict[type, Any] = {}
_MISSING: Any = object()
_new = object.__new__
_MAKERS: dict[type, Any] = {}
"""Classes made by :func:`fast_frozen`: the function :func:`maker` hands out."""
_FAST: dict[type, tuple[Any, int]] = {}
"""Classes made by :func:`fast_frozen`: their ``__dict__`` setter and number of fields."""


def _dict_setter(cls: type) -> Any:
    """The ``__set__`` of the ``__dict__`` descriptor of ``cls`` (wherever in its bases)."""
    for klass in cls.__mro__:
        descriptor = klass.__dict__.get("__dict__")
        if descriptor is not None:
            return descriptor.__set__
    raise TypeError(f"{cls.__name__} instances have no __dict__ (a slotted class?)")


def fast_frozen(cls: type[T]) -> type[T]:
    """Give a frozen, slot-less dataclass an ``__init__`` that fills its ``__dict__`` at once.

    Apply it above ``@dataclass(frozen=True, ...)``. The signature, defaults, default factories
    and fields outside ``__init__`` are those of the dataclass's own ``__init__``; equality,
    hashing, ``repr`` and ``FrozenInstanceError`` on assignment are unchanged. Raises
    ``TypeError`` for a class this cannot serve (not a frozen dataclass, slotted, or with a
    ``__post_init__`` or init-only variables).
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"{cls.__name__} is not a frozen dataclass")
    if "__slots__" in cls.__dict__ or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: fast_frozen needs a class without slots or __post_init__")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if any(isinstance(f.type, dataclasses.InitVar) for f in fields):
        raise TypeError(f"{cls.__name__}: fast_frozen does not take init-only variables")
    namespace: dict[str, Any] = {"_fc_missing": _MISSING, "_fc_set_dict": _dict_setter(cls)}
    positional: list[str] = []
    keyword: list[str] = []
    entries: list[str] = []
    for f in fields:
        has_factory = f.default_factory is not dataclasses.MISSING
        if has_factory:
            namespace[f"_fc_factory_{f.name}"] = f.default_factory
        if f.default is not dataclasses.MISSING:
            namespace[f"_fc_default_{f.name}"] = f.default
        if not f.init:
            if has_factory:
                entries.append(f"'{f.name}': _fc_factory_{f.name}()")
            elif f.default is not dataclasses.MISSING:
                entries.append(f"'{f.name}': _fc_default_{f.name}")
            continue  # a field with neither is left unset, as dataclasses leaves it
        if has_factory:
            param = f"{f.name}=_fc_missing"
            value = f"_fc_factory_{f.name}() if {f.name} is _fc_missing else {f.name}"
        elif f.default is not dataclasses.MISSING:
            param, value = f"{f.name}=_fc_default_{f.name}", f.name
        else:
            param, value = f.name, f.name
        (keyword if f.kw_only else positional).append(param)
        entries.append(f"'{f.name}': {value}")
    params_text = ", ".join([*positional, *(["*", *keyword] if keyword else [])])
    values = f"{{{', '.join(entries)}}}"
    namespace["_fc_cls"] = cls
    namespace["_fc_new"] = _new
    source = (
        f"def __init__(_fc_self{', ' if params_text else ''}{params_text}):\n"
        f"    _fc_set_dict(_fc_self, {values})\n"
        f"def _fc_make({params_text}):\n"
        f"    _fc_self = _fc_new(_fc_cls)\n"
        f"    _fc_set_dict(_fc_self, {values})\n"
        f"    return _fc_self\n"
    )
    exec(source, namespace)  # generated from the class's own field names
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    make = namespace["_fc_make"]
    make.__qualname__ = f"{cls.__qualname__}._fc_make"
    _MAKERS[cls] = make
    if all(f.init for f in fields):
        _FAST[cls] = (namespace["_fc_set_dict"], len(fields))
    return cls


def maker(cls: Callable[P, T]) -> Callable[P, T]:
    """A function that builds values of a :func:`fast_frozen` class as calling it does.

    Same parameters, defaults and result as the class's ``__init__``, but a plain function
    call: calling a class with keywords packs them into a dict and unpacks it again on the way
    to ``__init__`` (CPython 3.11), which is most of the cost of a small value. For the values
    built on every step; raises ``TypeError`` for a class :func:`fast_frozen` did not make.
    """
    make = _MAKERS.get(cls)  # type: ignore[call-overload]
    if make is None:
        raise TypeError(f"{getattr(cls, '__name__', cls)!r} is not a fast_frozen class")
    result: Callable[P, T] = make
    return result


def from_fields(cls: type[T], values: dict[str, Any], /) -> T:
    """A value of a :func:`fast_frozen` class made from ``values``, which names *every* field.

    ``values`` becomes the instance's ``__dict__`` as it is (the caller hands it over and keeps
    no reference): no keyword matching and no second dict, for the rows built on every step.
    Raises ``TypeError`` for a class :func:`fast_frozen` did not make, or for a wrong number of
    fields (a typo in a name is caught by the tests that compare with the dataclass's own
    ``__init__``).
    """
    fast = _FAST.get(cls)
    if fast is None or len(values) != fast[1]:
        raise TypeError(f"{cls.__name__}: from_fields needs a fast_frozen class and every field")
    new: T = _new(cls)
    fast[0](new, values)
    return new


def _copier(cls: type) -> Any:
    """A function ``(obj, **changes) -> copy`` specialised for ``cls`` (``None``: use stdlib)."""
    try:
        return _COPIERS[cls]
    except KeyError:
        pass
    copier: Any = None
    if (
        dataclasses.is_dataclass(cls)
        and "__slots__" in cls.__dict__
        and not hasattr(cls, "__post_init__")
        # A field outside __init__ is set by __init__ (a default, or a cache derived from the
        # others): a copy must get it afresh, as dataclasses.replace gives it.
        and all(f.init for f in dataclasses.fields(cls))
    ):
        fields = dataclasses.fields(cls)
        # Each change is a keyword of its own (no dict to search) and each slot is set through
        # its descriptor (no attribute lookup): half the cost of a setattr per field.
        params = ", ".join(f"{f.name}=_fc_missing" for f in fields if f.init)
        lines = [f"def _fc_copy(_fc_obj, /, *, {params}):", "    _fc_new = _fc_make(_fc_cls)"]
        for f in fields:
            value = f"_fc_obj.{f.name}"
            if f.init:
                value = f"{value} if {f.name} is _fc_missing else {f.name}"
            lines.append(f"    _fc_set_{f.name}(_fc_new, {value})")
        lines.append("    return _fc_new")
        namespace: dict[str, Any] = {
            "_fc_make": object.__new__,
            "_fc_cls": cls,
            "_fc_missing": _MISSING,
        }
        for f in fields:
            # The slot's descriptor, wherever in the class's bases it was made.
            slot = next(c.__dict__[f.name] for c in cls.__mro__ if f.name in c.__dict__)
            namespace[f"_fc_set_{f.name}"] = slot.__set__
        exec("\n".join(lines), namespace)  # generated from the class's own field names
        copier = namespace["_fc_copy"]
    _COPIERS[cls] = copier
    return copier


def replace(obj: T, /, **changes: Any) -> T:
    """Like :func:`dataclasses.replace`, without re-running ``__init__`` when that is safe."""
    cls = type(obj)
    fast = _FAST.get(cls)
    if fast is not None:
        merged = {**obj.__dict__, **changes}
        # The instance's dict holds exactly its fields, so a name that is not one adds a key
        # (cheaper than checking the names first); then the standard path names it.
        if len(merged) == fast[1]:
            new: T = _new(cls)
            fast[0](new, merged)
            return new
    try:
        copier = _COPIERS[type(obj)]
    except KeyError:
        copier = _copier(cls)
    if copier is None:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    result: T = copier(obj, **changes)
    return result
