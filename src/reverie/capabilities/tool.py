"""``@tool``: Python functions as capabilities (docs/tools.md).

A :class:`Tool` wraps a sync or async function. It is still callable like the function (so users
can unit-test it directly), and it carries what the loop needs:

* :attr:`Tool.descriptor` — name, description, JSON Schema of the arguments, declared effects
  (→ concurrency hint), approval rule, idempotency and timeout;
* :meth:`Tool.invoke` — validate the model's arguments, run the function (sync ones in a worker
  thread, so the event loop never blocks, unless declared ``inline=True``), enforce the timeout,
  and turn *every* result into a :data:`~reverie.core.capability.CallOutcome`. Nothing but
  cancellation escapes it.

Anything with a ``descriptor`` and an ``invoke`` is a :class:`Capability`; MCP tools are too.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence, Set as AbstractSet
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, overload, runtime_checkable

from reverie.capabilities.context import ToolContext
from reverie.capabilities.deadline import DeadlinePassed, within
from reverie.capabilities.output import DEFAULT_MAX_OUTPUT_BYTES, render_output
from reverie.capabilities.schema import ArgumentsSpec, InvalidArguments
from reverie.core.capability import (
    KNOWN_EFFECTS,
    ApprovalRule,
    CallCompleted,
    CallFailed,
    CallGated,
    CallOutcome,
    CapabilityDescriptor,
)
from reverie.core.fastcopy import maker
from reverie.core.vocabulary import as_gate_kind
from reverie.errors import ApprovalRequired, CapabilityError, RetryTool, UsageError

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound="Capability")

TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""Names every provider accepts (OpenAI's limit is the tightest)."""

DEFAULT_TIMEOUT_S = 60.0

_NOT_AWAITABLE = frozenset({str, int, float, bool, type(None), dict, list, tuple})
"""Exact result types that cannot be awaitable (checked before the general test)."""
_call_completed = maker(CallCompleted)
"""Builds each call's outcome (a class call with keywords costs more)."""


@runtime_checkable
class Capability(Protocol):
    """Something the loop can offer to a model and call: a :class:`Tool`, an MCP tool, …"""

    @property
    def descriptor(self) -> CapabilityDescriptor:
        """What the loop and the model know about this capability."""
        ...

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> CallOutcome:
        """Run one call. Every failure is an outcome; only cancellation propagates."""
        ...


@runtime_checkable
class Toolset(Protocol):
    """A source of several capabilities (e.g. an MCP server)."""

    def tools(self) -> Sequence[Capability]:
        """The capabilities this toolset offers now."""
        ...


class Tool(Generic[P, R]):
    """A Python function exposed to a model as a capability.

    Build it with :func:`tool`. Calling the tool calls the function unchanged.
    """

    # Copied from the function by functools.update_wrapper, so the tool reads like it.
    __name__: str
    __qualname__: str
    __wrapped__: Callable[P, R]

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        effects: AbstractSet[str] | None = None,
        needs_approval: ApprovalRule = False,
        idempotent: bool = False,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        inline: bool = False,
        editable: bool = True,
    ) -> None:
        """Wrap ``fn``; see :func:`tool` for the options.

        Raises:
            UsageError: a bad name, an unknown effect, a non-positive timeout or output cap,
                ``inline=True`` on an async function, or a signature that cannot be described
                to a model.
        """
        tool_name = name if name is not None else getattr(fn, "__name__", "")
        validate_tool_name(tool_name)
        if timeout_s is not None and not timeout_s > 0:
            raise UsageError(f"tool {tool_name!r}: timeout_s must be positive or None")
        if max_output_bytes <= 0:
            raise UsageError(f"tool {tool_name!r}: max_output_bytes must be positive")
        spec = ArgumentsSpec.from_function(fn, tool_name=tool_name)
        self._fn = fn
        self._spec = spec
        self._is_async = inspect.iscoroutinefunction(fn)
        if inline and self._is_async:
            raise UsageError(
                f"tool {tool_name!r}: inline=True is for sync functions (an async one already "
                "runs on the event loop)"
            )
        self.inline = inline
        """Run the sync function on the event loop thread (no worker-thread hop)."""
        self.max_output_bytes = max_output_bytes
        """Cap on the serialised output, in UTF-8 bytes."""
        self._descriptor = CapabilityDescriptor(
            name=tool_name,
            description=description if description is not None else spec.description,
            parameters=spec.json_schema,
            effects=normalize_effects(effects, tool_name=tool_name),
            needs_approval=needs_approval,
            idempotent=idempotent,
            timeout_s=timeout_s,
            editable=editable,
        )
        # Name, doc and __wrapped__ only: merging fn.__dict__ could clobber our own state
        # (e.g. when fn is itself a Tool).
        functools.update_wrapper(self, fn, updated=())

    @property
    def descriptor(self) -> CapabilityDescriptor:
        """What the loop and the model know about this tool."""
        return self._descriptor

    @property
    def name(self) -> str:
        """The name the model calls the tool by."""
        return self._descriptor.name

    @property
    def fn(self) -> Callable[P, R]:
        """The wrapped function."""
        return self._fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function directly (no validation, no timeout, no output capping)."""
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r}, effects={self._descriptor.effects!r})"

    def validate_arguments(self, arguments: Mapping[str, Any]) -> None:
        """Check ``arguments`` against the tool's schema without running it.

        Raises:
            InvalidArguments: with a message naming each wrong argument.
        """
        self._spec.bind(arguments, None)

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> CallOutcome:
        """Validate ``arguments``, run the function and classify the result.

        * invalid arguments (wrong type, missing, extra, NaN/±inf) → ``input_invalid``;
        * the timeout (``descriptor.timeout_s``) expires → ``transient``;
        * :class:`~reverie.errors.CapabilityError` → its own kind;
        * :class:`~reverie.errors.ApprovalRequired` → :class:`CallGated`;
        * :class:`~reverie.errors.RetryTool` → ``transient``;
        * any other exception → ``internal`` with ``"<ExcType>: <message>"``.

        ``asyncio.CancelledError`` is never caught: cancellation belongs to the caller.
        """
        try:
            args, kwargs = self._spec.bind(arguments, ctx)
        except InvalidArguments as exc:
            return CallFailed(error_kind="input_invalid", message=f"tool {self.name!r}: {exc}")
        timeout_s = self._descriptor.timeout_s
        try:
            if timeout_s is None:
                value = await self._run(args, kwargs)
            else:
                # The deadline counts from here, and is armed only if the call waits.
                value = await within(self._run(args, kwargs), timeout_s)
            return _call_completed(output=render_output(value, self.max_output_bytes))
        except DeadlinePassed:
            return CallFailed(error_kind="transient", message=f"timed out after {timeout_s}s")
        except Exception as exc:
            # A TimeoutError raised by the tool's own code is just another exception.
            return outcome_from_exception(exc)

    async def _run(self, args: list[Any], kwargs: dict[str, Any]) -> object:
        call: Callable[..., Any] = self._fn
        if self._is_async:
            result = await call(*args, **kwargs)
        elif self.inline:
            # Declared CPU-cheap and non-blocking: a thread hop would cost more than the call.
            # It holds the loop while it runs, so the timeout cannot interrupt it.
            result = call(*args, **kwargs)
        else:
            # Sync tools never block the event loop. A timed-out or cancelled thread cannot be
            # killed: it runs to completion in the background and its result is dropped.
            result = await asyncio.to_thread(call, *args, **kwargs)
        if type(result) not in _NOT_AWAITABLE and inspect.isawaitable(result):
            result = await result  # a function that returned a coroutine
        return result


@overload
def tool(fn: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    effects: AbstractSet[str] | None = None,
    needs_approval: ApprovalRule = False,
    idempotent: bool = False,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    inline: bool = False,
    editable: bool = True,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    effects: AbstractSet[str] | None = None,
    needs_approval: ApprovalRule = False,
    idempotent: bool = False,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    inline: bool = False,
    editable: bool = True,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Turn a sync or async function into a :class:`Tool`. Use bare or with options.

    Example::

        @tool(effects=set())
        def add(a: int, b: int) -> int:
            \"\"\"Add two integers.\"\"\"
            return a + b

    Args:
        fn: The function, when used bare (``@tool``).
        name: The name the model sees; defaults to the function's name. Must match
            ``^[a-zA-Z0-9_-]{1,64}$``.
        description: Defaults to the first paragraph of the docstring.
        effects: What the tool may do, a subset of ``read, network, write, spawn, use_secret,
            dispatch``. ``None`` (undeclared) runs exclusively; ``set()`` declares a pure
            tool, safe to run in parallel, as is any subset of ``{read, use_secret}``.
        needs_approval: ``True``, or a predicate over the arguments, to gate calls on a
            person's approval.
        idempotent: Safe to run again when a crash left its outcome unknown.
        timeout_s: Per-call timeout in seconds (``None``: none).
        max_output_bytes: Cap on the serialised output, in UTF-8 bytes.
        inline: Run a sync function on the event loop thread instead of a worker thread
            (saves the thread hop). Only for CPU-cheap functions that never block: while it
            runs, every other run of the process waits, and ``timeout_s`` cannot interrupt it.
        editable: Whether a person approving a gated call may edit its arguments
            (``Runtime.approve(ref, arguments=...)``); ``False`` allows approving or denying
            the call only as the model made it.

    Raises:
        UsageError: at decoration time, for an unknown effect, a bad name, ``inline=True`` on
            an async function or an unsupported signature.
    """
    if fn is not None and not callable(fn):
        raise UsageError("@tool takes options by keyword only, e.g. @tool(name='search')")

    def wrap(func: Callable[P, R]) -> Tool[P, R]:
        return Tool(
            func,
            name=name,
            description=description,
            effects=effects,
            needs_approval=needs_approval,
            idempotent=idempotent,
            timeout_s=timeout_s,
            max_output_bytes=max_output_bytes,
            inline=inline,
            editable=editable,
        )

    return wrap(fn) if fn is not None else wrap


def normalize_effects(
    effects: Iterable[str] | None, *, tool_name: str = "?"
) -> frozenset[str] | None:
    """Check declared effects against the known set (docs/tools.md).

    Raises:
        UsageError: an effect is unknown, or a bare string was passed instead of a set.
    """
    if effects is None:
        return None
    if isinstance(effects, str):
        raise UsageError(f"tool {tool_name!r}: effects must be a set of strings, e.g. {{'read'}}")
    declared = frozenset(effects)
    unknown = declared - KNOWN_EFFECTS
    if unknown:
        raise UsageError(
            f"tool {tool_name!r}: unknown effect(s) {sorted(unknown)}; "
            f"known effects are {sorted(KNOWN_EFFECTS)}"
        )
    return declared


def validate_tool_name(name: str) -> str:
    """Return ``name`` if it is a valid tool name (``^[a-zA-Z0-9_-]{1,64}$``).

    Raises:
        UsageError: it is not.
    """
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.fullmatch(name):
        raise UsageError(
            f"invalid tool name {name!r}: use 1-64 characters from a-z, A-Z, 0-9, '_' and '-'"
        )
    return name


def tools_by_name(tools: Iterable[C]) -> dict[str, C]:
    """Index capabilities by name, in order.

    Raises:
        UsageError: a name is invalid or used twice.
    """
    index: dict[str, C] = {}
    for capability in tools:
        name = validate_tool_name(capability.descriptor.name)
        if name in index:
            raise UsageError(f"two tools are named {name!r}; tool names must be unique")
        index[name] = capability
    return index


def outcome_from_exception(exc: Exception) -> CallOutcome:
    """Classify an exception raised by a tool (docs/loop.md)."""
    if isinstance(exc, CapabilityError):
        return CallFailed(error_kind=exc.kind, message=str(exc))
    if isinstance(exc, ApprovalRequired):
        return CallGated(gate_kind=as_gate_kind(exc.kind), reason=exc.reason)
    if isinstance(exc, RetryTool):
        return CallFailed(
            error_kind="transient", message=str(exc) or "the tool asked to be retried"
        )
    return CallFailed(error_kind="internal", message=f"{type(exc).__name__}: {exc}")
