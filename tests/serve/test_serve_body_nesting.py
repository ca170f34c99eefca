"""A request body nested deeper than the JSON parser recurses is a 400, not a 500."""

from __future__ import annotations

import pytest

from reverie import Agent
from reverie.testing import ScriptedModel, reply
from serve.serve_support import error_of, serving


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/runs"])
async def test_a_too_deeply_nested_json_body_is_a_400_invalid_json(route: str) -> None:
    agent = Agent(name="assistant", model=ScriptedModel([reply("ok")]))
    async with serving(agent) as srv:
        response = await srv.ana.post(route, content=b"[" * 100_000 + b"]" * 100_000)
        models = await srv.ana.get("/v1/models")

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_json"
    assert "too deeply" in error["message"]
    assert models.status_code == 200


async def test_deep_json_text_inside_a_body_is_a_400_invalid_json_and_runs_nothing() -> None:
    deep = "[" * 500 + "]" * 500
    body = {
        "model": "assistant",
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": deep}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
    }
    model = ScriptedModel([reply("never")])
    async with serving(Agent(name="assistant", model=model)) as srv:
        response = await srv.ana.post("/v1/chat/completions", json=body)
        runs = await srv.rt.runs.list(limit=10)

    assert response.status_code == 400, response.text
    error = error_of(response)
    assert error["code"] == "invalid_json"
    assert error["param"] == "messages[1].tool_calls[0]"
    assert "nested more than 64 levels deep" in error["message"]
    assert runs == [] and model.requests == []
