"""OutputContract, the structured_result tool and the FinishOnTool stop strategy, unit by unit."""

from __future__ import annotations

from typing import Any

import pytest

from reverie.capabilities import ToolContext
from reverie.core.capability import CallCompleted, CallFailed
from reverie.core.scope import Scope
from reverie.errors import UsageError
from reverie.loop.family import default_families
from reverie.loop.finish import STRUCTURED_RESULT_TOOL, FinishOnTool
from reverie.loop.state import Completion, LoopExecutionState, state_from_dict, state_to_dict
from reverie.loop.strategies import (
    Abort,
    CallResult,
    Continue,
    Finish,
    NoProgress,
    Reprompt,
)
from reverie.runtime.structured import OutputContract, StructuredResultTool, violations
from unbound.unbound_support import REPORT_SCHEMA

CTX = ToolContext(
    run_id="run-1", call_id="c-1", scope=Scope(tenant="acme", user="ana"), tool_name="x"
)


def test_contract_constructors_pick_the_profile() -> None:
    assert OutputContract.assistant_message().profile == "unbound"
    assert OutputContract.json_object().profile == "unbound_structured"
    contract = OutputContract.json_schema("report", REPORT_SCHEMA)
    assert contract.profile == "unbound_structured"
    assert contract.parameters() == REPORT_SCHEMA
    assert OutputContract.json_object().parameters() == {"type": "object"}


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"type": "array"}, "root"),
        ({"type": "object", "properties": {"a": {"type": 5}}}, "not a valid JSON Schema"),
        ({"type": "object", "x": object()}, "not JSON"),
    ],
)
def test_json_schema_contract_rejects_bad_schemas(schema: dict[str, Any], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        OutputContract.json_schema("report", schema)


def test_json_schema_contract_needs_a_name() -> None:
    with pytest.raises(UsageError, match="name"):
        OutputContract.json_schema(" ", REPORT_SCHEMA)


def test_contract_keeps_its_own_copy_of_the_schema() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    contract = OutputContract.json_schema("r", schema)
    schema["properties"]["a"]["type"] = "integer"
    assert contract.parameters()["properties"]["a"]["type"] == "string"


async def test_structured_result_tool_validates_with_jsonschema() -> None:
    tool = StructuredResultTool(OutputContract.json_schema("report", REPORT_SCHEMA))
    assert tool.descriptor.name == STRUCTURED_RESULT_TOOL
    assert tool.descriptor.concurrency == "safe_for_parallel"

    ok = await tool.invoke({"changed": False, "summary": "s"}, CTX)
    bad = await tool.invoke({"summary": 3, "extra": 1}, CTX)

    assert isinstance(ok, CallCompleted) and ok.output == '{"changed": false, "summary": "s"}'
    assert isinstance(bad, CallFailed) and bad.error_kind == "input_invalid"
    assert "'changed' is a required property" in bad.message
    assert "at $.summary: 3 is not of type 'string'" in bad.message
    assert "Additional properties are not allowed" in bad.message


def test_violations_are_listed_with_their_json_paths() -> None:
    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "integer"}}},
    }
    assert violations(schema, {"items": [1, "two"]}) == [
        "at $.items[1]: 'two' is not of type 'integer'"
    ]


def test_finish_on_tool_reprompts_once_then_aborts() -> None:
    stop = FinishOnTool()
    first = stop.after_reply(LoopExecutionState())
    assert isinstance(first, Reprompt) and first.stop_state == {"reprompts": 1}

    second = stop.after_reply(LoopExecutionState(stop_state=first.stop_state))
    assert isinstance(second, Abort) and second.failure_kind == "output_contract_violation"


def test_finish_on_tool_finishes_only_on_a_completed_call_of_its_tool() -> None:
    stop = FinishOnTool(tool="done", completion_kind="structured")
    state = LoopExecutionState()
    failed = [CallResult(name="done", outcome="failed", ref="r1")]
    other = [CallResult(name="lookup", outcome="completed", ref="r2")]
    good = [*other, CallResult(name="done", outcome="completed", ref="r3")]

    assert isinstance(stop.after_wave(state, failed), Continue)
    assert isinstance(stop.after_wave(state, other), Continue)
    assert stop.after_wave(state, good) == Finish(completion_kind="structured", refs=("r3",))


def test_finish_on_tool_keeps_no_progress_detection() -> None:
    state = LoopExecutionState(recent_call_signatures=("lookup:h",) * 3)
    assert isinstance(FinishOnTool().after_wave(state, []), NoProgress)


def test_structured_family_runs_finish_on_tool_and_aborts_gates() -> None:
    families = {f.id: f for f in default_families()}
    structured = families["unbound_structured"]
    assert isinstance(structured.stop, FinishOnTool)
    assert structured.stop.tool == STRUCTURED_RESULT_TOOL
    assert type(structured.gates).__name__ == "AbortOnGates"
    assert structured.budget.iteration_limit(10_000) > 32


def test_completion_survives_the_checkpoint_round_trip() -> None:
    state = LoopExecutionState(completion=Completion(kind="structured", refs=("r1",)))
    assert state_from_dict(state_to_dict(state)) == state
    assert "completion" not in state_to_dict(LoopExecutionState())  # ordinary payloads unchanged


def test_unbound_names_are_exported_from_the_runtime_package() -> None:
    import reverie.runtime
    from reverie.runtime import OutputContract, UnboundTurnService

    assert {"OutputContract", "UnboundTurnService"} <= set(reverie.runtime.__all__)
    assert OutputContract.assistant_message().structured is False
    assert UnboundTurnService.__name__ == "UnboundTurnService"
