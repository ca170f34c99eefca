"""``POST /v1/responses`` through the official ``openai`` SDK's ``responses`` client and through
openai-agents' default model: each request is an unbound turn of the agent ``model`` names."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from reverie import Agent, tool
from reverie.core.messages import TokenUsage
from reverie.testing import ScriptedModel, call, error, reply
from serve.serve_support import BOB_TOKEN, error_of, serving

REPLY = "2 + 3 = 5, as the add tool says."


def calculator(log: list[str], *script: Any) -> tuple[Agent, ScriptedModel]:
    """An agent with the ``add`` tool and a scripted model (default: call add, then reply)."""

    @tool(effects=set())
    def add(a: int, b: int) -> int:
        """Add two integers."""
        log.append(f"add:{a}+{b}")
        return a + b

    steps = list(script) or [
        call("add", a=2, b=3),
        reply(REPLY, usage=TokenUsage(input_tokens=40, output_tokens=9)),
    ]
    model = ScriptedModel(steps)
    return Agent(name="calc", model=model, instructions="You add.", tools=[add]), model


async def test_a_response_runs_the_agents_tool_on_the_server_and_returns_its_final_answer() -> None:
    log: list[str] = []
    agent, _ = calculator(log)
    async with serving(agent) as srv, srv.openai() as client:
        raw = await client.responses.with_raw_response.create(model="calc", input="2 + 3?")
        response = raw.parse()
        runs = (await srv.ana.get("/v1/runs")).json()["data"]

    assert response.status == "completed"
    assert response.output_text == REPLY
    assert [item.type for item in response.output] == ["message"]
    assert response.model == "calc"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (40, 9)
    assert log == ["add:2+3"]  # the server ran the tool; no function-call item is returned
    [run] = runs
    assert response.id == f"resp_{run['run_id']}" == f"resp_{raw.headers['x-reverie-run-id']}"
    assert run["agent"] == "calc"


async def test_a_streamed_response_sends_the_official_event_types_through_the_sdk() -> None:
    agent, _ = calculator([])
    async with serving(agent) as srv, srv.openai() as client:
        stream = await client.responses.create(model="calc", input="2 + 3?", stream=True)
        events = [event async for event in stream]

    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    for kind in (
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ):
        assert kinds.count(kind) == 1, kind
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == REPLY and len(deltas) > 1  # streamed as the model produced it
    assert [e.sequence_number for e in events] == list(range(len(events)))
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == REPLY
    assert completed.response.usage is not None and completed.response.usage.total_tokens == 49


async def test_previous_response_id_continues_the_conversation_on_the_runs_thread() -> None:
    agent, model = calculator([], reply("Hello Ana."), reply("You are Ana."))
    async with serving(agent) as srv, srv.openai() as client:
        first = await client.responses.create(model="calc", input="I am Ana.")
        second = await client.responses.create(
            model="calc",
            input=[{"role": "user", "content": "Who am I?"}],
            previous_response_id=first.id,
            instructions="Be brief.",
        )
        runs = {r["run_id"]: r for r in (await srv.ana.get("/v1/runs")).json()["data"]}

    assert second.output_text == "You are Ana."
    assert second.previous_response_id == first.id
    sent = model.requests[1].messages
    assert sent[0].role == "system" and sent[0].content == "You add.\n\nBe brief."
    assert [(m.role, m.content) for m in sent[1:]] == [
        ("user", "I am Ana."),
        ("assistant", "Hello Ana."),
        ("user", "Who am I?"),
    ]
    assert model.requests[0].messages[0].content == "You add."  # instructions are per response
    threads = {r["thread_id"] for r in runs.values()}
    assert len(runs) == 2 and len(threads) == 1


async def test_only_the_latest_response_of_a_conversation_can_be_continued() -> None:
    agent, _ = calculator([], reply("one"), reply("two"), reply("three"))
    async with serving(agent) as srv, srv.openai() as client:
        first = await client.responses.create(model="calc", input="a")
        await client.responses.create(model="calc", input="b", previous_response_id=first.id)
        with pytest.raises(openai.ConflictError) as caught:
            await client.responses.create(model="calc", input="c", previous_response_id=first.id)

    assert caught.value.code == "previous_response_superseded"
    assert caught.value.response.headers["x-should-retry"] == "false"


async def test_a_retried_continuation_with_its_idempotency_key_gets_the_same_response() -> None:
    agent, model = calculator([], reply("one"), reply("two"), reply("never"))
    key = {"Idempotency-Key": "continue-1"}
    async with serving(agent) as srv, srv.openai() as client:
        first = await client.responses.create(model="calc", input="a")
        second = await client.responses.create(
            model="calc", input="b", previous_response_id=first.id, extra_headers=key
        )
        retried = await client.responses.create(
            model="calc", input="b", previous_response_id=first.id, extra_headers=key
        )
        other = await srv.ana.post(
            "/v1/responses",
            json={"model": "calc", "input": "c", "previous_response_id": first.id},
            headers={"Idempotency-Key": "continue-2"},
        )
        runs = (await srv.ana.get("/v1/runs")).json()["data"]

    assert retried.id == second.id and retried.output_text == "two"
    assert len(model.requests) == 2 and len(runs) == 2  # the retry ran nothing
    # Another key is another continuation of a superseded response: still refused.
    assert other.status_code == 409
    assert error_of(other)["code"] == "previous_response_superseded"


async def test_another_owners_previous_response_id_is_404_as_a_missing_one() -> None:
    agent, _ = calculator([], reply("mine"))
    async with serving(agent) as srv, srv.openai() as ana:
        mine = await ana.responses.create(model="calc", input="hi")
        async with srv.openai(token=BOB_TOKEN) as bob:
            with pytest.raises(openai.NotFoundError) as theirs:
                await bob.responses.create(model="calc", input="x", previous_response_id=mine.id)
            with pytest.raises(openai.NotFoundError) as missing:
                await bob.responses.create(model="calc", input="x", previous_response_id="resp_x")
            with pytest.raises(openai.NotFoundError):
                await bob.responses.retrieve(mine.id)

    assert theirs.value.code == missing.value.code == "response_not_found"
    assert theirs.value.param == "previous_response_id"


async def test_a_failed_response_is_an_error_status_that_must_not_be_retried() -> None:
    log: list[str] = []
    agent, _ = calculator(log, call("add", a=1, b=1), error("internal"))
    async with serving(agent) as srv, srv.openai() as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.responses.create(model="calc", input="hi")

    assert caught.value.status_code == 502
    assert caught.value.code == "model_error"
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert log == ["add:1+1"]


async def test_a_streamed_response_that_fails_ends_with_response_failed() -> None:
    agent, _ = calculator([], call("add", a=1, b=1), error("internal"))
    async with serving(agent) as srv, srv.openai() as client:
        stream = await client.responses.create(model="calc", input="hi", stream=True)
        events = [event async for event in stream]

    last = events[-1]
    assert last.type == "response.failed"
    assert last.response.status == "failed"
    assert last.response.error is not None and last.response.error.code == "server_error"
    assert "(model_error)" in last.response.error.message
    assert "Traceback" not in last.response.error.message


async def test_a_stored_response_can_be_retrieved() -> None:
    agent, _ = calculator([])
    async with serving(agent) as srv, srv.openai() as client:
        created = await client.responses.create(model="calc", input="2 + 3?")
        again = await client.responses.retrieve(created.id)
    assert again.id == created.id and again.status == "completed"
    assert again.output_text == REPLY and again.model == "calc"


async def test_text_format_json_schema_becomes_the_turns_output_contract() -> None:
    schema = {
        "type": "object",
        "properties": {"sum": {"type": "integer"}},
        "required": ["sum"],
        "additionalProperties": False,
    }
    agent, _ = calculator([], call("structured_result", sum=5))
    async with serving(agent) as srv, srv.openai() as client:
        response = await client.responses.create(
            model="calc",
            input="2 + 3?",
            text={"format": {"type": "json_schema", "name": "total", "schema": schema}},
        )
    assert json.loads(response.output_text) == {"sum": 5}


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (
            {"tools": [{"type": "function", "name": "f", "parameters": {}}]},
            "tools",
            "unsupported_parameter",
        ),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]},
            "input[0]",
            "unsupported_input_item",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "x"}]}]},
            "input[0].content[0]",
            "unsupported_content",
        ),
        ({"input": [{"role": "system", "content": "only instructions"}]}, "input", None),
        ({"background": True}, "background", "unsupported_parameter"),
    ],
)
async def test_what_the_mapping_cannot_represent_is_400_naming_the_field(
    body: dict[str, Any], param: str, code: str | None
) -> None:
    agent, _ = calculator([])
    async with serving(agent) as srv:
        response = await srv.ana.post(
            "/v1/responses", json={"model": "calc", "input": "hi", **body}
        )
    assert response.status_code == 400
    error = error_of(response)
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
