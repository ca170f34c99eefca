"""HTTP bodies: any body to any route is answered (never 5xx), and the server keeps serving."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from fuzz.strategies import DEEP_TEXT, FUZZ, JSON, TEXT, objects_with
from reverie import Agent
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.testing import ScriptedModel, reply
from serve.serve_support import Served, error_of, serving


def answer(request: ModelRequest) -> ModelResponse:
    return reply("ok")


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    agent = Agent(name="assistant", model=ScriptedModel(answer))
    async with serving(agent) as srv:
        yield srv


ROUTES = [
    "/v1/chat/completions",
    "/v1/runs",
    "/v1/runs/run_nope/steer",
    "/v1/runs/run_nope/follow_up",
    "/v1/runs/run_nope/cancel",
    "/v1/gates/g_nope/approve",
    "/v1/gates/g_nope/deny",
]
CHAT_KEYS = ["model", "messages", "stream", "temperature", "max_tokens", "tools", "user"]
RUN_KEYS = ["agent", "input", "thread_id", "text", "reason"]
MESSAGE = objects_with(["role", "content", "name", "tool_calls"])


def _chat(message: str) -> bytes:
    return f'{{"model": "assistant", "messages": [{message}]}}'.encode()


BODIES = (
    st.binary(max_size=80)
    | JSON.map(lambda v: json.dumps(v).encode())
    | objects_with(RUN_KEYS).map(lambda v: json.dumps(v).encode())
    | st.builds(
        lambda body, messages: {**body, "messages": messages},
        objects_with(CHAT_KEYS),
        st.lists(MESSAGE, max_size=3) | JSON,
    ).map(lambda v: json.dumps(v).encode())
    | TEXT.map(str.encode)
    | DEEP_TEXT.map(str.encode)
    | DEEP_TEXT.map(lambda deep: _chat(f'{{"role": "user", "content": {deep}}}'))
    | DEEP_TEXT.map(
        lambda deep: _chat(
            '{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", '
            f'"function": {{"name": "f", "arguments": {json.dumps(deep)}}}}}]}}'
        )
    )
    | DEEP_TEXT.map(lambda deep: f'{{"agent": "assistant", "input": "hi", "x": {deep}}}'.encode())
)
"""Any bytes, JSON, near-valid bodies, and bodies nested past the limit (depth is part of the
fuzzing: the whole body, a message's content, JSON text inside a field)."""


@settings(parent=FUZZ, max_examples=80)
@given(st.sampled_from(ROUTES), BODIES)
async def test_any_body_gets_a_typed_answer_and_the_server_keeps_serving(
    served: Served, route: str, body: bytes
) -> None:
    response = await served.ana.post(
        route, content=body, headers={"content-type": "application/json"}
    )

    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        error_of(response)
    models = await served.ana.get("/v1/models")
    assert models.status_code == 200


async def test_after_hostile_bodies_a_normal_completion_still_works(served: Served) -> None:
    hostile: list[Any] = [b"\xff\xfe", b"[" * 5000, b'{"model": 1}', b"null", b'{"messages": {}}']
    for body in hostile:
        response = await served.ana.post("/v1/chat/completions", content=body)
        assert 400 <= response.status_code < 500

    async with served.openai() as client:
        completion = await client.chat.completions.create(
            model="assistant", messages=[{"role": "user", "content": "hi"}]
        )
    assert completion.choices[0].message.content == "ok"
