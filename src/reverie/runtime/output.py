"""Typed output of interactive runs: ``Agent(output_type=...)`` (docs/output.md).

An agent with an ``output_type`` (a pydantic model class, or a JSON Schema whose root is an
object) runs on the structured-result mechanism of unbound turns
(:mod:`reverie.runtime.structured`): every request offers ``structured_result`` (its parameters
are the output type's schema, its call forced when the model supports ``tool_choice``) and
carries ``ModelRequest.output_schema``; a valid call ends the run ``Completed(kind="structured")``
and ``RunResult.output`` holds the value — a model instance for a model class, the JSON for a
schema. What differs from an unbound turn is the family, ``default_structured``: gates block
for a person, steering and follow-ups reach the run, and an invalid answer (plain text, or
arguments that do not validate) gets one repair prompt in total before the run fails with
``output_contract_violation``.

The runtime calls the functions here at one line each: :func:`family_for` picks the run's
family, :func:`typed_model` and :func:`typed_tools` shape the segment's model and tools,
:func:`typed_result` turns the stored JSON back into the declared type.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from reverie.errors import UsageError
from reverie.loop.finish import STRUCTURED_RESULT_TOOL, FinishOnTool
from reverie.runtime.structured import ContractModel, OutputContract, StructuredResultTool

if TYPE_CHECKING:
    from reverie.loop.family import LoopFamilyRegistry
    from reverie.models.base import Model
    from reverie.runtime.agent import Agent

log = logging.getLogger("reverie.runtime.output")

TYPED_FAMILY = "default_structured"
"""The family a typed agent runs with when its ``family`` is the default one."""

_NAME = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class TypedOutput:
    """What an agent's ``output_type`` means: the contract, and the class to build (if any)."""

    contract: OutputContract
    model_class: type[BaseModel] | None = field(default=None)

    @classmethod
    def of(cls, output_type: Any) -> TypedOutput:
        """Read an ``output_type``: a pydantic model class or a JSON Schema mapping.

        Raises:
            UsageError: neither of those; a schema that is not a valid JSON Schema or whose
                root is not ``"type": "object"`` (it becomes the ``structured_result`` tool's
                parameters, which are an object).
        """
        if isinstance(output_type, type) and issubclass(output_type, BaseModel):
            try:
                schema = output_type.model_json_schema()
            except Exception as exc:  # pydantic raises several types for unschematizable models
                raise UsageError(
                    f"output_type {output_type.__name__}: no JSON Schema can be made for it "
                    f"({type(exc).__name__})"
                ) from None
            contract = OutputContract.json_schema(_name(output_type.__name__), schema)
            return cls(contract=contract, model_class=output_type)
        if isinstance(output_type, Mapping):
            title = output_type.get("title")
            name = _name(title) if isinstance(title, str) and title.strip() else "output"
            try:
                return cls(contract=OutputContract.json_schema(name, output_type))
            except UsageError as exc:
                raise UsageError(f"output_type: {exc}") from None
        raise UsageError(
            "output_type must be a pydantic model class or a JSON Schema (a mapping), "
            f"not {type(output_type).__name__}"
        )

    def check(self, arguments: Mapping[str, Any]) -> tuple[Any, list[str]]:
        """Validate an answer: its canonical JSON and the violations (none when valid).

        A model class validates with pydantic (its own validators included), so a stored
        output always rebuilds into an instance; the JSON kept is the instance's JSON form
        (defaults filled in). A schema validates with ``jsonschema``.
        """
        if self.model_class is None:
            from reverie.runtime.structured import violations

            schema = self.contract.parameters()
            return dict(arguments), violations(schema, dict(arguments))
        try:
            instance = self.model_class.model_validate(dict(arguments))
        except ValidationError as exc:
            return None, [_pydantic_violation(e) for e in exc.errors(include_url=False)]
        return instance.model_dump(mode="json"), []

    def parse(self, value: Any) -> Any:
        """The stored JSON as the declared type (an instance for a model class)."""
        if self.model_class is None:
            return value
        return self.model_class.model_validate(value)


def output_of(agent: Agent) -> TypedOutput | None:
    """The agent's typed output (``None`` when it declares none)."""
    typed = agent._typed  # built and checked once, by Agent itself
    assert typed is None or isinstance(typed, TypedOutput)
    return typed


def family_for(agent: Agent, families: LoopFamilyRegistry) -> str:
    """The family an interactive run of ``agent`` runs with.

    A typed agent on the ``default`` family runs on :data:`TYPED_FAMILY`; a typed agent on a
    family of its own needs that family to end on ``structured_result``, and an untyped agent
    one that does not (it would never offer the tool its run must end with).

    Raises:
        UsageError: the family and the agent's ``output_type`` do not fit together.
        UnknownFamilyError: the family is not registered.
    """
    typed = output_of(agent) is not None
    family_id = TYPED_FAMILY if typed and agent.family == "default" else agent.family
    stop = families.get(family_id).stop
    ends_on_output = isinstance(stop, FinishOnTool) and stop.tool == STRUCTURED_RESULT_TOOL
    if typed and not ends_on_output:
        raise UsageError(
            f"agent {agent.name!r} has an output_type, but its family {family_id!r} does not end "
            f"on {STRUCTURED_RESULT_TOOL!r}: use the default family or one whose stop strategy "
            f"is FinishOnTool(tool={STRUCTURED_RESULT_TOOL!r})"
        )
    if not typed and ends_on_output:
        raise UsageError(
            f"agent {agent.name!r} runs on family {family_id!r}, which ends only on "
            f"{STRUCTURED_RESULT_TOOL!r}: give the agent an output_type"
        )
    return family_id


def typed_model(agent: Agent, model: Model) -> Model:
    """The model a segment of ``agent`` talks to: shaped for the output type, if it has one."""
    typed = output_of(agent)
    if typed is None:
        return model
    return ContractModel(model, typed.contract)


def typed_tools(agent: Agent) -> list[Any]:
    """The tool a typed agent's run ends with (``[]`` for an untyped agent)."""
    typed = output_of(agent)
    if typed is None:
        return []
    return [StructuredResultTool(typed.contract, check=typed.check)]


def typed_result(agent: Agent | None, value: Any) -> Any:
    """A completed structured run's stored JSON, as the type its agent declares.

    With no agent known here (another process's run), or an agent whose type no longer
    accepts the stored value (its class changed since), the plain JSON is returned.
    """
    typed = output_of(agent) if agent is not None else None
    if typed is None or value is None:
        return value
    try:
        return typed.parse(value)
    except ValidationError:
        log.warning(
            "the stored output no longer validates as %s; returning it as JSON",
            typed.contract.name,
        )
        return value


def output_json(value: Any) -> Any:
    """``RunResult.output`` as plain JSON (a model instance as its JSON form), for the wire."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


def output_text(value: Any) -> str:
    """``RunResult.output`` as compact JSON text."""
    return json.dumps(output_json(value), ensure_ascii=False, separators=(",", ":"))


def _name(text: str) -> str:
    return _NAME.sub("_", text.strip())[:64] or "output"


def _pydantic_violation(error: Mapping[str, Any]) -> str:
    path = "$"
    for part in error.get("loc", ()):
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return f"at {path}: {error.get('msg', 'invalid')}"


__all__ = [
    "TYPED_FAMILY",
    "TypedOutput",
    "family_for",
    "output_json",
    "output_of",
    "output_text",
    "typed_model",
    "typed_result",
    "typed_tools",
]
