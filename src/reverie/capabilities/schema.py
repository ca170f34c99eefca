"""A tool's argument schema and validation, from its signature and docstring (docs/tools.md).

:class:`ArgumentsSpec` turns a function into:

* a JSON Schema object (``properties``, ``required``, ``additionalProperties: false``) built by
  pydantic from the type hints, with the description of each argument taken from the
  Google-style ``Args:`` section of the docstring;
* a validator that checks the model's arguments against the same pydantic model and says
  exactly which argument is wrong when they do not fit (:class:`InvalidArguments`).

A parameter annotated with :class:`~reverie.capabilities.context.ToolContext` is filled by the
host and left out of the schema, so the model never sees nor sets it.
"""

from __future__ import annotations

import inspect
import math
import re
import types
import typing
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.json_schema import GenerateJsonSchema, PydanticJsonSchemaWarning

from reverie.capabilities.context import ToolContext
from reverie.core.depth import check_depth
from reverie.errors import NestedTooDeep, UsageError

__all__ = ["ArgumentsSpec", "Docstring", "InvalidArguments", "find_non_finite", "parse_docstring"]

_MAX_ERRORS_SHOWN = 8
_MAX_INPUT_REPR = 80


class InvalidArguments(Exception):
    """The model's arguments do not fit the tool. ``str(exc)`` is written for the model."""


# --------------------------------------------------------------------------- docstrings

_SECTION_RE = re.compile(
    r"^(args|arguments|parameters|params|keyword args|keyword arguments|other parameters|"
    r"returns?|yields?|raises|exceptions?|examples?|notes?|attributes|warnings?|see also|"
    r"todo|references)\s*:\s*$",
    re.IGNORECASE,
)
_ARGS_SECTIONS = frozenset(
    {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments"}
)
_ARG_LINE_RE = re.compile(r"^\*{0,2}(?P<name>[A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*:\s*(?P<desc>.*)$")


@dataclass(frozen=True, slots=True)
class Docstring:
    """The parts of a Google-style docstring a tool schema uses."""

    summary: str
    """The first paragraph, joined into one line."""
    params: Mapping[str, str]
    """Argument name → description, from the ``Args:`` section."""


def parse_docstring(doc: str | None) -> Docstring:
    """Read the summary and the ``Args:`` descriptions from a Google-style docstring.

    Args:
        doc: The docstring (raw or already cleaned); ``None`` gives an empty result.

    Returns:
        The summary (first paragraph, stopping at the first section header) and a mapping of
        argument name to its description (continuation lines joined with spaces).
    """
    if not doc:
        return Docstring(summary="", params={})
    lines = inspect.cleandoc(doc).splitlines()

    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION_RE.match(line.strip()):
            break
        summary.append(line.strip())

    params: dict[str, str] = {}
    i = 0
    while i < len(lines):
        header = lines[i]
        match = _SECTION_RE.match(header.strip())
        i += 1
        if not match or match.group(1).lower() not in _ARGS_SECTIONS:
            continue
        header_indent = _indent(header)
        entry_indent: int | None = None
        current: str | None = None
        while i < len(lines):
            line = lines[i]
            if line.strip() and _indent(line) <= header_indent:
                break  # dedent: the section is over
            i += 1
            if not line.strip():
                continue
            if entry_indent is None:
                entry_indent = _indent(line)
            arg = _ARG_LINE_RE.match(line.strip()) if _indent(line) == entry_indent else None
            if arg:
                current = arg.group("name")
                params[current] = arg.group("desc").strip()
            elif current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()
    return Docstring(summary=" ".join(summary), params=params)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


# --------------------------------------------------------------------------- schema


class _ToolJsonSchema(GenerateJsonSchema):
    """pydantic's generator without the auto-generated ``title`` on every field (noise for a
    model reading the schema; the description carries the meaning)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class _Param:
    name: str
    """The Python parameter name (and the argument name the model uses)."""
    field: str
    """The field of the generated model (an alias-free stand-in, see below)."""
    positional_only: bool
    is_context: bool


@dataclass(frozen=True, slots=True)
class ArgumentsSpec:
    """How to describe a function's arguments to a model, and how to check and bind them."""

    description: str
    """The docstring's first paragraph."""
    json_schema: Mapping[str, Any]
    """JSON Schema of the arguments object."""
    model: type[BaseModel]
    """The pydantic model that validates the arguments."""
    params: tuple[_Param, ...]

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, tool_name: str) -> ArgumentsSpec:
        """Build the spec of ``fn``.

        Args:
            fn: A sync or async function (or other callable with a signature).
            tool_name: Used in error messages only.

        Raises:
            UsageError: the signature has ``*args``/``**kwargs``, a hint cannot be resolved, or
                pydantic cannot build a schema for a hint.
        """
        try:
            signature = inspect.signature(fn, eval_str=True)
        except (NameError, TypeError, ValueError) as exc:
            raise UsageError(
                f"tool {tool_name!r}: cannot read its signature or resolve its type hints "
                f"({type(exc).__name__}: {exc}); hints must be importable from the tool's module"
            ) from exc
        doc = parse_docstring(inspect.getdoc(fn))

        params: list[_Param] = []
        fields: dict[str, Any] = {}
        for index, p in enumerate(signature.parameters.values()):
            if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                raise UsageError(
                    f"tool {tool_name!r}: *args/**kwargs cannot be described to a model; "
                    f"declare each argument ({p.name!r})"
                )
            hint = Any if p.annotation is inspect.Parameter.empty else p.annotation
            positional_only = p.kind is inspect.Parameter.POSITIONAL_ONLY
            if _is_context_hint(hint):
                params.append(_Param(p.name, "", positional_only, is_context=True))
                continue
            # Fields get neutral names and the real name as alias: a parameter called `json`,
            # `schema` or `model_x` would otherwise shadow BaseModel attributes (a warning, and
            # warnings are errors in our tests) or be taken as private (`_x`).
            field = f"arg_{index}"
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[field] = (
                hint,
                Field(default, alias=p.name, description=doc.params.get(p.name) or None),
            )
            params.append(_Param(p.name, field, positional_only, is_context=False))

        try:
            model = create_model(
                f"{tool_name}_arguments",
                __config__=ConfigDict(extra="forbid", allow_inf_nan=False),
                **fields,
            )
            with warnings.catch_warnings():
                # A default that is not JSON-able is left out of the schema; that is fine.
                warnings.simplefilter("ignore", PydanticJsonSchemaWarning)
                schema = model.model_json_schema(by_alias=True, schema_generator=_ToolJsonSchema)
        except Exception as exc:
            raise UsageError(
                f"tool {tool_name!r}: cannot build a JSON schema for its arguments: {exc}"
            ) from exc
        schema.pop("title", None)
        schema.setdefault("properties", {})
        schema.setdefault("required", [])
        schema["additionalProperties"] = False
        return cls(description=doc.summary, json_schema=schema, model=model, params=tuple(params))

    @property
    def argument_names(self) -> tuple[str, ...]:
        """The model-visible argument names, in signature order."""
        return tuple(p.name for p in self.params if not p.is_context)

    def bind(
        self, arguments: Mapping[str, Any], ctx: ToolContext | None
    ) -> tuple[list[Any], dict[str, Any]]:
        """Validate the model's arguments and build the call's ``(args, kwargs)``.

        Arguments the model left out are not passed, so the function's own defaults apply.

        Raises:
            InvalidArguments: with a message naming each wrong argument.
        """
        if type(arguments) is not dict and not isinstance(arguments, Mapping):
            raise InvalidArguments(
                f"arguments must be a JSON object, got {type(arguments).__name__}"
            )
        try:
            # Before any recursive walk (the finite check, pydantic's validation): a direct
            # ``invoke`` bypasses the loop's own bound on a model's arguments.
            check_depth(arguments, what="the arguments")
        except NestedTooDeep as exc:
            raise InvalidArguments(str(exc)) from None
        non_finite = find_non_finite(arguments)
        if non_finite is not None:
            raise InvalidArguments(
                f"argument {non_finite!r}: NaN and Infinity are not valid JSON numbers"
            )
        try:
            validated = self.model.model_validate(dict(arguments))
        except ValidationError as exc:
            raise InvalidArguments(self._describe(exc)) from None

        given = validated.model_fields_set
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for p in self.params:
            if p.is_context:
                value: Any = ctx
            elif p.positional_only or p.field in given:
                value = getattr(validated, p.field)
            else:
                continue
            if p.positional_only:
                args.append(value)
            else:
                kwargs[p.name] = value
        return args, kwargs

    def _describe(self, exc: ValidationError) -> str:
        problems: list[str] = []
        errors = exc.errors(include_url=False)
        for err in errors[:_MAX_ERRORS_SHOWN]:
            where = _format_loc(err["loc"])
            if err["type"] == "missing":
                problems.append(f"missing required argument {where!r}")
            elif err["type"] == "extra_forbidden" and len(err["loc"]) == 1:
                problems.append(f"unexpected argument {where!r}")
            else:
                got = _short_repr(err.get("input"))
                problems.append(f"argument {where!r}: {err['msg']} (got {got})")
        if len(errors) > _MAX_ERRORS_SHOWN:
            problems.append(f"and {len(errors) - _MAX_ERRORS_SHOWN} more")
        expected = ", ".join(self.argument_names) or "none"
        return f"invalid arguments: {'; '.join(problems)}. Expected arguments: {expected}."


def _is_context_hint(hint: Any) -> bool:
    if hint is ToolContext:
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        members = set(typing.get_args(hint)) - {type(None)}
        return members == {ToolContext}
    return False


_FINITE_ATOMS = frozenset({str, int, bool, type(None)})
"""Exact types that never hold a float (a subclass takes the general path)."""


def find_non_finite(value: Any, path: str = "") -> str | None:
    """The path (``a.b[0]``) of the first NaN/±inf float inside ``value``, if any.

    JSON has no such numbers; a model (or a lenient JSON parser) can still produce them.
    """
    if type(value) in _FINITE_ATOMS:
        return None  # most arguments: no recursion, no abstract-class check
    if isinstance(value, float):
        return None if math.isfinite(value) else (path or "<root>")
    if type(value) is dict or isinstance(value, Mapping):  # a dict: no abstract-class check
        for key, item in value.items():
            if type(item) in _FINITE_ATOMS:
                continue
            found = find_non_finite(item, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = find_non_finite(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def _format_loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "<arguments>"


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_INPUT_REPR else text[: _MAX_INPUT_REPR - 1] + "…"
