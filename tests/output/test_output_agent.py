"""What ``Agent(output_type=...)`` accepts, and what it refuses with a typed error."""

from __future__ import annotations

import pytest

from output.output_support import SCOPE, TICKET_SCHEMA, Verdict
from reverie import Agent, Runtime, tool
from reverie.errors import UsageError
from reverie.loop.family import LoopFamily
from reverie.loop.finish import STRUCTURED_RESULT_TOOL, FinishOnTool
from reverie.testing import ScriptedModel, call, reply


@pytest.mark.parametrize("bad", [int, "Verdict", 42, ["a"]])
def test_output_type_must_be_a_model_class_or_a_json_schema(bad: object) -> None:
    with pytest.raises(UsageError, match="pydantic model class or a JSON Schema"):
        Agent(name="a", model=ScriptedModel([]), output_type=bad)


def test_an_output_schema_must_be_a_valid_json_schema_with_an_object_root() -> None:
    with pytest.raises(UsageError, match='"type": "object"'):
        Agent(name="a", model=ScriptedModel([]), output_type={"type": "string"})
    with pytest.raises(UsageError, match="not a valid JSON Schema"):
        Agent(name="a", model=ScriptedModel([]), output_type={"type": "object", "required": 3})


def test_the_structured_result_tool_name_is_reserved_for_the_output_type() -> None:
    @tool(name=STRUCTURED_RESULT_TOOL)
    def mine(x: int) -> int:
        """Pretend."""
        return x

    with pytest.raises(UsageError, match="reserved"):
        Agent(name="a", model=ScriptedModel([]), tools=[mine], output_type=Verdict)


async def test_a_typed_agent_on_a_family_not_ending_on_structured_result_is_refused() -> None:
    plain = LoopFamily(id="plain")
    agent = Agent(name="a", model=ScriptedModel([]), output_type=Verdict, family="plain")
    async with Runtime.open(":memory:", families=[plain]) as rt:
        with pytest.raises(UsageError, match="does not end on 'structured_result'"):
            await rt.start(agent, "hi", scope=SCOPE)


async def test_a_typed_agent_may_run_on_its_own_family_that_ends_on_structured_result() -> None:
    mine = LoopFamily(id="mine", stop=FinishOnTool(repair_invalid_calls=True))
    model = ScriptedModel([call(STRUCTURED_RESULT_TOOL, title="t", priority="low")])
    agent = Agent(name="a", model=model, output_type=TICKET_SCHEMA, family="mine")
    async with Runtime.open(":memory:", families=[mine]) as rt:
        r = await rt.run(agent, "hi", scope=SCOPE)
        run = await rt.store.get_run(r.run_id)
    assert r.output == {"title": "t", "priority": "low"} and run.family_id == "mine"


async def test_an_untyped_agent_on_a_family_ending_only_on_structured_result_is_refused() -> None:
    agent = Agent(name="a", model=ScriptedModel([]), family="default_structured")
    async with Runtime.open(":memory:") as rt:
        with pytest.raises(UsageError, match="give the agent an output_type"):
            await rt.start(agent, "hi", scope=SCOPE)


async def test_an_untyped_run_has_no_output() -> None:
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(Agent(name="a", model=ScriptedModel([reply("hi")])), "hi", scope=SCOPE)
    assert r.text == "hi" and r.output is None
