"""Structured unbound turns (DESIGN §14): structured_result, validation, one repair, then fail."""

from __future__ import annotations

from typing import Any

import pytest

from reverie import Limits, Runtime, Scope, tool
from reverie.core.exits import Completed, Failed
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.errors import UsageError
from reverie.loop.finish import STRUCTURED_REPAIR_PROMPT, STRUCTURED_RESULT_TOOL
from reverie.runtime.structured import OutputContract
from reverie.testing import ScriptedModel, call, reply
from unbound.unbound_support import REPORT_SCHEMA, make_step

REPORT = OutputContract.json_schema("curation_report", REPORT_SCHEMA)


async def run_structured(rt: Runtime, scope: Scope, model: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("output_contract", REPORT)
    return await rt.unbound.run(
        system_prompt="Tidy the memory and report.",
        messages=["Start."],
        scope=scope,
        model=model,
        **kwargs,
    )


async def test_structured_run_ends_with_the_validated_output(rt: Runtime, scope: Scope) -> None:
    model = ScriptedModel([call(STRUCTURED_RESULT_TOOL, changed=True, summary="merged 2")])

    r = await run_structured(rt, scope, model)

    assert r.status == "completed"
    assert isinstance(r.exit, Completed) and r.exit.kind == "structured"
    assert r.output == {"changed": True, "summary": "merged 2"}
    assert (await rt.get_result(r.run_id)).output == r.output  # stored, not only in memory
    run = await rt.store.get_run(r.run_id)
    assert (run.profile, run.family_id, run.has_actor) == (
        "unbound_structured",
        "unbound_structured",
        False,
    )


async def test_structured_request_offers_structured_result_with_the_schema_and_forces_it(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel([call(STRUCTURED_RESULT_TOOL, changed=False, summary="nothing")])

    await run_structured(rt, scope, model)

    request = model.requests[0]
    assert request.tools is not None
    (spec,) = request.tools
    assert spec.name == STRUCTURED_RESULT_TOOL and dict(spec.parameters) == REPORT_SCHEMA
    assert request.tool_choice == STRUCTURED_RESULT_TOOL  # the only tool: forced by name
    assert request.output_schema == {"title": "curation_report", **REPORT_SCHEMA}


async def test_structured_request_requires_a_tool_call_when_other_tools_are_offered(
    rt: Runtime, scope: Scope
) -> None:
    steps: list[int] = []
    model = ScriptedModel(
        [call("step", n=1), call(STRUCTURED_RESULT_TOOL, changed=True, summary="stepped")]
    )

    r = await run_structured(rt, scope, model, tools=[make_step(steps)])

    assert r.output == {"changed": True, "summary": "stepped"} and steps == [1]
    assert [t.name for t in model.requests[0].tools or ()] == ["step", STRUCTURED_RESULT_TOOL]
    assert model.requests[0].tool_choice == "required"


async def test_model_without_tool_choice_support_is_not_forced(rt: Runtime, scope: Scope) -> None:
    model = ScriptedModel([call(STRUCTURED_RESULT_TOOL, changed=True, summary="s")])
    model.supports_tool_choice = False  # type: ignore[attr-defined]

    r = await run_structured(rt, scope, model)

    assert r.output == {"changed": True, "summary": "s"}
    assert model.requests[0].tool_choice == "auto"
    assert model.requests[0].output_schema is not None


async def test_schema_invalid_structured_result_is_reported_and_a_valid_retry_succeeds(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel(
        [
            call(STRUCTURED_RESULT_TOOL, changed="yes", summary="x" * 501),
            call(STRUCTURED_RESULT_TOOL, changed=True, summary="fixed"),
        ]
    )

    r = await run_structured(rt, scope, model)

    assert r.output == {"changed": True, "summary": "fixed"}
    told = [m.content for m in model.requests[1].messages if m.role == "tool"]
    assert len(told) == 1
    assert told[0].startswith("error (input_invalid): the arguments do not match the output schema")
    assert "at $.changed: 'yes' is not of type 'boolean'" in told[0]
    assert "at $.summary:" in told[0] and "is too long" in told[0]


async def test_invalid_structured_results_are_bounded_by_the_declared_limits(
    rt: Runtime, scope: Scope
) -> None:
    def always_wrong(request: ModelRequest) -> ModelResponse:
        return call(STRUCTURED_RESULT_TOOL, changed=True, summary=len(request.messages))

    r = await run_structured(
        rt, scope, ScriptedModel(always_wrong), limits=Limits(max_model_calls=2)
    )

    assert isinstance(r.exit, Failed) and r.exit.kind == "model_call_limit"
    assert r.output is None


async def test_plain_text_final_gets_one_repair_prompt_then_succeeds(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel(
        [reply("I merged two entries."), call(STRUCTURED_RESULT_TOOL, changed=True, summary="ok")]
    )

    r = await run_structured(rt, scope, model)

    assert r.status == "completed" and r.output == {"changed": True, "summary": "ok"}
    last = model.requests[1].messages[-1]
    assert (last.role, last.content) == ("user", STRUCTURED_REPAIR_PROMPT)
    assert "call structured_result" in STRUCTURED_REPAIR_PROMPT.lower()
    assert model.requests[1].tool_choice == STRUCTURED_RESULT_TOOL


async def test_plain_text_twice_fails_with_output_contract_violation(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel([reply("first text"), reply("second text"), reply("never asked")])

    r = await run_structured(rt, scope, model)

    assert r.status == "failed"
    assert isinstance(r.exit, Failed) and r.exit.kind == "output_contract_violation"
    assert "structured_result" in r.exit.safe_summary
    assert r.output is None and r.text is None
    assert len(model.requests) == 2
    repairs = [m for m in model.requests[1].messages if m.content == STRUCTURED_REPAIR_PROMPT]
    assert len(repairs) == 1


async def test_json_object_contract_accepts_any_object(rt: Runtime, scope: Scope) -> None:
    model = ScriptedModel([call(STRUCTURED_RESULT_TOOL, anything={"goes": [1, 2]}, n=3)])

    r = await run_structured(rt, scope, model, output_contract=OutputContract.json_object())

    assert r.output == {"anything": {"goes": [1, 2]}, "n": 3}
    (spec,) = model.requests[0].tools or ()
    assert dict(spec.parameters) == {"type": "object"}
    assert model.requests[0].output_schema == {"type": "object"}


async def test_structured_result_name_is_reserved_for_the_contract(
    rt: Runtime, scope: Scope
) -> None:
    @tool(name=STRUCTURED_RESULT_TOOL)
    def fake(x: int) -> int:
        """Pretend."""
        return x

    with pytest.raises(UsageError, match="reserved"):
        await run_structured(rt, scope, ScriptedModel([]), tools=[fake])


async def test_resubmitting_the_key_of_an_orphaned_run_finishes_it_from_its_checkpoint(
    rt: Runtime, scope: Scope
) -> None:
    model = ScriptedModel([call(STRUCTURED_RESULT_TOOL, changed=True, summary="kept")])
    r = await run_structured(rt, scope, model, idempotency_key="pass-1")
    # A worker that died after the Final checkpoint, before writing the status.
    await rt.store.set_run_status(r.run_id, "running", fence=None)

    again = await rt.unbound.submit(
        system_prompt="Tidy.",
        messages=["Start."],
        output_contract=REPORT,
        idempotency_key="pass-1",
        scope=scope,
        model=model,
    )
    resumed = await rt.unbound.result(again)

    assert again == r.run_id
    assert resumed.status == "completed" and resumed.output == {"changed": True, "summary": "kept"}
    assert len(model.requests) == 1  # no model call after the Final checkpoint
