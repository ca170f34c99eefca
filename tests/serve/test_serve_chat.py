"""``POST /v1/chat/completions`` and ``GET /v1/models`` through the official ``openai`` SDK and
raw HTTP: each request is an unbound turn of the agent ``model`` names."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from reverie import Agent, tool
from reverie.core.messages import TokenUsage
from reverie.testing import ScriptedModel, call, error, reply
from serve.serve_support import error_of, serving, sse_data

REPLY = "2 + 3 = 5, as the add tool says."


def calculator(log: list[str], *script: Any, name: str = "calc") -> tuple[Agent, ScriptedModel]:
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
    return Agent(name=name, model=model, instructions="You add.", tools=[add]), model


async def test_a_completion_runs_the_agents_tool_on_the_server_and_returns_text_and_usage() -> None:
    log: list[str] = []
    agent, model = calculator(log)
    async with serving(agent) as srv, srv.openai() as client:
        completion = await client.chat.completions.create(
            model="calc", messages=[{"role": "user", "content": "What is 2 + 3?"}]
        )
        raw = await srv.ana.get("/v1/runs")

    assert completion.choices[0].message.content == REPLY
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "calc"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (40, 9)
    assert completion.usage.total_tokens == 49
    assert log == ["add:2+3"]  # the server ran the tool
    tool_results = [m for m in model.requests[1].messages if m.role == "tool"]
    assert [m.content for m in tool_results] == ["5"]
    # The turn is an unbound run of the caller's scope, named by the completion id.
    [run] = raw.json()["data"]
    assert completion.id == f"chatcmpl-{run['run_id']}"
    assert run["profile"] == "unbound" and run["status"] == "completed"


async def test_a_streamed_completion_sends_chunks_usage_and_done_through_the_sdk() -> None:
    log: list[str] = []
    agent, _ = calculator(log)
    async with serving(agent) as srv, srv.openai() as client:
        stream = await client.chat.completions.create(
            model="calc",
            messages=[{"role": "user", "content": "What is 2 + 3?"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]

    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert "".join(pieces) == REPLY
    assert len(pieces) > 1  # streamed as the model produced it, not in one piece
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == 40
    assert {c.id for c in chunks} == {chunks[0].id}
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert log == ["add:2+3"]


async def test_the_stream_is_chat_completions_chunks_ending_with_data_done() -> None:
    agent, _ = calculator([])
    async with serving(agent) as srv:
        data = await sse_data(
            srv.ana,
            "POST",
            "/v1/chat/completions",
            json={"model": "calc", "stream": True, "messages": [{"role": "user", "content": "?"}]},
        )

    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert "usage" not in chunks[0]  # only with stream_options.include_usage
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == REPLY


async def test_models_lists_the_served_agents() -> None:
    calc, _ = calculator([])
    other, _ = calculator([], name="writer")
    async with serving(calc, other) as srv, srv.openai() as client:
        models = [m async for m in client.models.list()]
        one = await client.models.retrieve("writer")
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("nobody")

    assert [m.id for m in models] == ["calc", "writer"]
    assert all(m.owned_by == "reverie" for m in models)
    assert one.id == "writer"


async def test_an_unknown_model_is_404_naming_the_served_agents() -> None:
    agent, _ = calculator([])
    async with serving(agent) as srv, srv.openai() as client:
        with pytest.raises(openai.NotFoundError) as caught:
            await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
            )
        raw = await srv.ana.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
        )

    assert caught.value.status_code == 404
    assert "'gpt-4o'" in caught.value.message and "calc" in caught.value.message
    error_body = error_of(raw)
    assert error_body["code"] == "model_not_found" and error_body["param"] == "model"


async def test_system_messages_follow_the_agents_instructions_and_history_is_kept() -> None:
    agent, model = calculator([], reply("ok"))
    async with serving(agent) as srv, srv.openai() as client:
        await client.chat.completions.create(
            model="calc",
            messages=[
                {"role": "system", "content": "Answer in French."},
                {"role": "user", "content": "hello"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "add", "arguments": '{"a": 1, "b": 1}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "2"},
                {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
            ],
        )

    sent = model.requests[0].messages
    assert sent[0].role == "system"
    assert sent[0].content.startswith("You add.") and sent[0].content.endswith("Answer in French.")
    assert [m.role for m in sent[1:]] == ["user", "assistant", "tool", "user"]
    assert sent[2].tool_calls[0].name == "add" and dict(sent[2].tool_calls[0].arguments) == {
        "a": 1,
        "b": 1,
    }
    assert (sent[3].tool_call_id, sent[3].name, sent[3].content) == ("c1", "add", "2")
    assert sent[4].content == "and now?"


async def test_response_format_json_schema_becomes_the_runs_output_contract() -> None:
    schema = {
        "type": "object",
        "properties": {"sum": {"type": "integer"}},
        "required": ["sum"],
        "additionalProperties": False,
    }
    agent, model = calculator(
        [], call("add", a=2, b=3), call("structured_result", sum=5), name="calc"
    )
    async with serving(agent) as srv, srv.openai() as client:
        completion = await client.chat.completions.create(
            model="calc",
            messages=[{"role": "user", "content": "2 + 3?"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "sum", "schema": schema, "strict": True},
            },
        )

    assert json.loads(completion.choices[0].message.content or "") == {"sum": 5}
    offered = [t.name for t in model.requests[0].tools or ()]
    assert offered == ["add", "structured_result"]
    assert model.requests[0].output_schema is not None


async def test_a_streamed_structured_answer_arrives_as_one_json_chunk() -> None:
    agent, _ = calculator([], call("structured_result", answer="five"))
    async with serving(agent) as srv, srv.openai() as client:
        stream = await client.chat.completions.create(
            model="calc",
            messages=[{"role": "user", "content": "2 + 3?"}],
            response_format={"type": "json_object"},
            stream=True,
        )
        pieces = [c.choices[0].delta.content async for c in stream if c.choices]

    assert json.loads("".join(p or "" for p in pieces)) == {"answer": "five"}


async def test_a_schema_that_is_not_an_object_is_400_with_the_reason() -> None:
    agent, _ = calculator([])
    async with serving(agent) as srv, srv.openai() as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="calc",
                messages=[{"role": "user", "content": "hi"}],
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "n", "schema": {"type": "integer"}},
                },
            )
    assert '"type": "object"' in caught.value.message


async def test_a_failed_run_is_an_error_status_with_a_safe_message_and_no_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Providers redact keys from their messages; the server masks any that slipped through.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-SECRET-0123456789")
    agent, _ = calculator([], error("internal", "upstream said: key sk-live-SECRET-0123456789"))
    async with serving(agent) as srv, srv.openai() as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(
                model="calc", messages=[{"role": "user", "content": "hi"}]
            )
        run_id = caught.value.response.headers["x-reverie-run-id"]
        run = (await srv.ana.get(f"/v1/runs/{run_id}")).json()

    assert caught.value.status_code == 502
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["code"] == "model_error" and body["type"] == "server_error"
    assert "Traceback" not in caught.value.message
    assert "SECRET" not in caught.value.response.text
    assert run["status"] == "failed" and run["exit"]["kind"] == "model_error"


async def test_a_run_failing_mid_stream_ends_the_stream_with_an_error_event() -> None:
    agent, _ = calculator([], call("add", a=1, b=2), error("internal"))
    async with serving(agent) as srv, srv.openai() as client:
        stream = await client.chat.completions.create(
            model="calc", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        with pytest.raises(openai.APIError, match="model_error"):
            async for _ in stream:
                pass


async def test_a_tool_needing_approval_fails_the_turn_with_403_pointing_at_the_runs_api() -> None:
    @tool(effects={"write"}, needs_approval=True)
    def send_email(to: str) -> str:
        """Send an email."""
        return "sent"

    model = ScriptedModel([call("send_email", to="bob@x"), reply("done")])
    agent = Agent(name="mailer", model=model, tools=[send_email])
    async with serving(agent) as srv, srv.openai() as client:
        with pytest.raises(openai.PermissionDeniedError) as caught:
            await client.chat.completions.create(
                model="mailer", messages=[{"role": "user", "content": "mail bob"}]
            )
        gates = (await srv.ana.get("/v1/gates")).json()["data"]

    assert "gate_not_supported" in caught.value.message
    assert "/v1/runs" in caught.value.message
    assert gates == []  # nobody is asked: unbound turns cannot wait for a person


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"", 400, "empty"),
        (b"[1, 2]", 400, "JSON object"),
        (b'{"model": "calc"}', 400, "messages: Field required"),
        (b'{"model": "calc", "messages": []}', 400, "messages: List should have at least 1"),
        (b'{"model": "calc", "messages": [{"role": "robot", "content": "x"}]}', 400, "role"),
        (
            b'{"model": "calc", "messages": [{"role": "user", "content": "x"}], '
            b'"tools": [{"type": "function", "function": {"name": "f"}}]}',
            400,
            "request-side tools are not supported",
        ),
        (
            b'{"model": "calc", "messages": [{"role": "user", "content": '
            b'[{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]}',
            400,
            "'input_audio' are not supported",
        ),
        (b'{"model": "calc", "messages": [{"role": "system", "content": "x"}]}', 400, "user"),
        (b'{"model": "calc", "n": 2, "messages": [{"role": "user", "content": "x"}]}', 400, "n=1"),
    ],
)
async def test_a_malformed_request_is_4xx_with_a_clear_message(
    body: bytes, status: int, needle: str
) -> None:
    agent, model = calculator([])
    async with serving(agent) as srv:
        response = await srv.ana.post(
            "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
    assert response.status_code == status, response.text
    assert needle in error_of(response)["message"]
    assert model.requests == []  # nothing ran


async def test_an_agents_own_hooks_apply_to_its_chat_completions() -> None:
    from reverie.hooks import AgentHook, Deny

    async def deny_all(ctx: Any) -> Deny:
        return Deny("tools are off for this agent")

    log: list[str] = []
    agent, model = calculator(log)
    hooked = Agent(
        name="calc",
        model=model,
        tools=agent.tools,
        hooks=[AgentHook(point="before_capability", fn=deny_all, name="policy")],
    )
    async with serving(hooked) as srv, srv.openai() as client:
        await client.chat.completions.create(
            model="calc", messages=[{"role": "user", "content": "add 1 and 2"}]
        )
    assert log == []  # the tool never ran: the agent's policy applied to the unbound turn
    tool_results = [m for m in model.requests[-1].messages if m.role == "tool"]
    assert tool_results and tool_results[0].content.startswith("denied: tools are off")
