"""Structured output for unbound turns (docs/unbound.md) and typed agents (docs/output.md).

An :class:`OutputContract` says what an unbound run must produce: an assistant message, JSON
matching a schema, or any JSON object. A structured run gets one extra capability,
``structured_result``, whose *parameters are* the contract's schema. Calling it with valid
arguments ends the run as ``Completed(kind="structured")`` (the loop side is
:class:`reverie.loop.finish.FinishOnTool`); invalid arguments come back to the model as an
``input_invalid`` result naming every violation, and it may try again within its limits.

:class:`ContractModel` shapes each request of a structured run: it forces a tool call
(``structured_result`` by name when it is the only tool, ``required`` otherwise) when the
provider supports ``tool_choice``, and sets ``ModelRequest.output_schema``; a text-only answer
that is one JSON object (a backend honouring ``response_format``) becomes a ``structured_result``
call. :mod:`reverie.runtime.output` builds the same pieces for ``Agent(output_type=...)``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import jsonschema  # type: ignore[import-untyped]

from reverie.capabilities.context import ToolContext
from reverie.core.capability import CallCompleted, CallFailed, CallOutcome, CapabilityDescriptor
from reverie.core.messages import (
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ResponseComplete,
    ToolCall,
    ToolCallPart,
)
from reverie.core.vocabulary import UnboundProfile
from reverie.errors import UsageError
from reverie.loop.finish import STRUCTURED_RESULT_TOOL
from reverie.models.base import Model

ContractKind = Literal["assistant_message", "json_schema", "json_object"]

MAX_REPORTED_VIOLATIONS = 10
"""Violations listed in one ``input_invalid`` result; the rest are counted."""
_MAX_VIOLATION_CHARS = 300

_ANY_OBJECT: Mapping[str, Any] = {"type": "object"}

Check = Callable[[Mapping[str, Any]], tuple[Any, list[str]]]
"""Validates ``structured_result``'s arguments: the JSON to keep and the violations."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputContract:
    """What an unbound run must produce. Build it with the constructors::

    OutputContract.assistant_message()
    OutputContract.json_schema("report", {"type": "object", "properties": {...}})
    OutputContract.json_object()
    """

    kind: ContractKind = "assistant_message"
    name: str | None = None
    """The schema's name (``json_schema`` only)."""
    schema: Mapping[str, Any] | None = field(default=None, hash=False)
    """The JSON Schema (``json_schema`` only); its root must describe an object."""

    def __post_init__(self) -> None:
        if self.kind == "json_schema":
            if not isinstance(self.name, str) or not self.name.strip():
                raise UsageError("OutputContract.json_schema needs a non-empty name")
            if not isinstance(self.schema, Mapping):
                raise UsageError("OutputContract.json_schema needs a schema (a JSON object)")
            try:
                # A deep, JSON-only copy: the contract cannot change under a running pass.
                copied = json.loads(json.dumps(self.schema))
            except (TypeError, ValueError) as exc:
                raise UsageError(f"output schema {self.name!r} is not JSON: {exc}") from None
            if copied.get("type") != "object":
                raise UsageError(
                    f'output schema {self.name!r} must have "type": "object" at its root: '
                    "it becomes the parameters of the structured_result tool"
                )
            try:
                jsonschema.validators.validator_for(copied).check_schema(copied)
            except jsonschema.exceptions.SchemaError as exc:
                raise UsageError(
                    f"output schema {self.name!r} is not a valid JSON Schema: {exc.message}"
                ) from None
            object.__setattr__(self, "schema", copied)
        elif self.kind in ("assistant_message", "json_object"):
            if self.name is not None or self.schema is not None:
                raise UsageError(f"OutputContract.{self.kind}() takes no name or schema")
        else:
            raise UsageError(
                f"unknown output contract {self.kind!r}; "
                "use assistant_message, json_schema or json_object"
            )

    @classmethod
    def assistant_message(cls) -> OutputContract:
        """The run ends with a plain assistant reply (the default)."""
        return cls(kind="assistant_message")

    @classmethod
    def json_schema(cls, name: str, schema: Mapping[str, Any]) -> OutputContract:
        """The run ends with JSON valid against ``schema`` (an object schema).

        Raises:
            UsageError: the name is empty, the schema is not a valid JSON Schema, or its root
                is not ``"type": "object"``.
        """
        return cls(kind="json_schema", name=name, schema=schema)

    @classmethod
    def json_object(cls) -> OutputContract:
        """The run ends with any JSON object."""
        return cls(kind="json_object")

    @property
    def structured(self) -> bool:
        """Whether the run ends with ``structured_result`` rather than a reply."""
        return self.kind != "assistant_message"

    @property
    def profile(self) -> UnboundProfile:
        """The run profile (and loop family) this contract needs."""
        return "unbound_structured" if self.structured else "unbound"

    def parameters(self) -> Mapping[str, Any]:
        """The JSON Schema of ``structured_result``'s arguments."""
        if self.kind == "json_schema":
            assert self.schema is not None
            return self.schema
        return _ANY_OBJECT

    def output_schema(self) -> Mapping[str, Any]:
        """What ``ModelRequest.output_schema`` carries (titled with the schema's name)."""
        params = self.parameters()
        if self.name is not None and "title" not in params:
            return {"title": self.name, **params}
        return params


def violations(schema: Mapping[str, Any], instance: Any) -> list[str]:
    """Every way ``instance`` breaks ``schema``, as ``"at <json path>: <message>"``."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    found = sorted(validator.iter_errors(instance), key=lambda e: (e.json_path, e.message))
    out: list[str] = []
    for error in found:
        message = str(error.message)
        if len(message) > _MAX_VIOLATION_CHARS:
            # Messages quote the offending value first and name the rule last: keep both ends.
            message = message[: _MAX_VIOLATION_CHARS - 81] + " … " + message[-78:]
        out.append(f"at {error.json_path}: {message}")
    return out


class StructuredResultTool:
    """The synthetic ``structured_result`` capability: its parameters are the contract's schema.

    Arguments are validated with ``jsonschema`` (or ``check``); valid ones become the run's
    output (the result row holds them as JSON), invalid ones an ``input_invalid`` result listing
    the violations.
    """

    def __init__(self, contract: OutputContract, *, check: Check | None = None) -> None:
        """Args:
        contract: A structured contract (its schema becomes the tool's parameters).
        check: Validates the arguments instead of ``jsonschema``: the JSON to keep as the
            output and the violations (e.g. a pydantic model's own validation).
        """
        if not contract.structured:
            raise UsageError("structured_result needs a json_schema or json_object contract")
        self._schema = contract.parameters()
        self._check = check
        what = f"the {contract.name!r} result" if contract.name else "your result as a JSON object"
        self._descriptor = CapabilityDescriptor(
            name=STRUCTURED_RESULT_TOOL,
            description=(
                f"Submit {what}. The arguments of this call ARE the final answer and must match "
                "its schema exactly. Call it once, when you are done; it ends the task."
            ),
            parameters=self._schema,
            effects=frozenset(),
            idempotent=True,
            timeout_s=None,
        )

    @property
    def descriptor(self) -> CapabilityDescriptor:
        """Name ``structured_result``, parameters = the contract's schema, pure."""
        return self._descriptor

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> CallOutcome:
        """Validate against the schema; the output is the arguments as JSON."""
        value: Any = dict(arguments)
        if self._check is not None:
            value, problems = self._check(value)
        else:
            problems = violations(self._schema, value)
        if problems:
            shown = problems[:MAX_REPORTED_VIOLATIONS]
            more = len(problems) - len(shown)
            tail = f"; and {more} more" if more else ""
            return CallFailed(
                error_kind="input_invalid",
                message="the arguments do not match the output schema: "
                + "; ".join(shown)
                + tail
                + ". Call structured_result again with corrected arguments.",
            )
        # Never size-capped: this text is the run's result, read back by RunResult.output.
        return CallCompleted(output=json.dumps(value, ensure_ascii=False, allow_nan=False))


class ContractModel:
    """A model wrapper that shapes every request of a structured run.

    When a request offers ``structured_result``: ``tool_choice`` forces a call (the tool by name
    when it is the only one, ``required`` otherwise) unless the wrapped model says
    ``supports_tool_choice = False``, and ``output_schema`` is set. Requests without tools (the
    finalizer's) pass unchanged.
    """

    def __init__(self, inner: Model, contract: OutputContract) -> None:
        self.inner = inner
        self.contract = contract
        self._force = bool(getattr(inner, "supports_tool_choice", True))

    @property
    def name(self) -> str:
        """The wrapped model's name (prices and telemetry are unchanged)."""
        return self.inner.name

    def shape(self, request: ModelRequest) -> ModelRequest:
        """The request as sent: tool choice forced, output schema set."""
        names = [t.name for t in request.tools or ()]
        if STRUCTURED_RESULT_TOOL not in names:
            return request
        choice = request.tool_choice
        if self._force:
            choice = STRUCTURED_RESULT_TOOL if len(names) == 1 else "required"
        return replace(request, tool_choice=choice, output_schema=self.contract.output_schema())

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the wrapped model's answer to the shaped request.

        A backend that honours ``response_format`` may answer with the JSON as text instead of
        a call: a text-only answer that is one JSON object becomes a ``structured_result``
        call with it as arguments, so it is validated (and kept) as a call would be.
        """
        shaped = self.shape(request)
        if shaped.output_schema is None:
            return self.inner.stream(shaped)
        return self._accepting_json_text(shaped)

    async def _accepting_json_text(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        async for event in self.inner.stream(request):
            if isinstance(event, ResponseComplete):
                event = ResponseComplete(response=json_text_as_call(event.response))
            yield event


def json_text_as_call(response: ModelResponse) -> ModelResponse:
    """``response`` with a text-only JSON-object answer turned into a ``structured_result``
    call (any other response unchanged). The call id is minted here, unique like a provider's.
    """
    if response.tool_calls:
        return response
    text = response.text.strip()
    if not text.startswith("{"):
        return response
    try:
        value = json.loads(text)
    except ValueError:
        return response
    if not isinstance(value, dict):
        return response
    call = ToolCall(
        id=f"call_{uuid.uuid4().hex[:24]}", name=STRUCTURED_RESULT_TOOL, arguments=value
    )
    return replace(response, parts=(ToolCallPart(call=call),))


__all__ = [
    "MAX_REPORTED_VIOLATIONS",
    "STRUCTURED_RESULT_TOOL",
    "ContractModel",
    "OutputContract",
    "StructuredResultTool",
    "json_text_as_call",
    "violations",
]
