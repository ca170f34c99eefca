"""What ``reverie serve``'s clients see of an upstream model server's quirks (issue 28):
estimated usage is marked, upstream errors arrive as a typed, redacted summary, and a client's
``response_format: json_object`` reaches the endpoint as JSON mode."""

from __future__ import annotations

from reverie import Agent
from reverie.models.openai import OpenAIChatModel
from reverie.testing import FakeOpenAIServer
from reverie.testing.fake_openai import FakeError
from serve.serve_support import serving

HI = [{"role": "user", "content": "hi"}]


async def test_http_usage_of_a_chat_completion_says_it_is_estimated() -> None:
    async with FakeOpenAIServer(["Hello there!"], usage_in_streams=False) as fake:
        model = OpenAIChatModel("m", base_url=fake.base_url, api_key_env=None)
        async with serving(Agent(name="a", model=model)) as srv:
            response = await srv.ana.post(
                "/v1/chat/completions", json={"model": "a", "messages": HI}
            )
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert usage["estimated"] is True and usage["completion_tokens"] > 0


async def test_an_upstream_error_reaches_http_clients_as_a_typed_redacted_bounded_summary() -> None:
    key = "sk-upstream-SECRET-0123456789"
    dump = (
        "7 validation errors for CreateChatCompletionRequest key={api_key} "
        + "{'type': 'string_type', 'msg': 'Input should be a valid string'} " * 20
        + 'File "/opt/venv/lib/python3.11/site-packages/llama_cpp/server/app.py", line 512'
    )
    async with FakeOpenAIServer([FakeError(500, dump)]) as fake:
        model = OpenAIChatModel("m", base_url=fake.base_url, api_key=key)
        async with serving(Agent(name="a", model=model)) as srv:
            response = await srv.ana.post(
                "/v1/chat/completions", json={"model": "a", "messages": HI}
            )
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "model_error"
    message = error["message"]
    assert "model call failed (internal)" in message  # typed: a validation error, not retried
    assert key not in message and "site-packages" not in message and "/opt/" not in message
    assert len(message) <= 500
    assert len(fake.requests) == 1


async def test_a_clients_json_object_response_format_reaches_the_endpoint_as_json_object() -> None:
    async with FakeOpenAIServer(['{"ok": true}'], structured_output="json_object") as fake:
        model = OpenAIChatModel("m", base_url=fake.base_url, api_key_env=None)
        async with serving(Agent(name="a", model=model)) as srv:
            response = await srv.ana.post(
                "/v1/chat/completions",
                json={
                    "model": "a",
                    "messages": [{"role": "user", "content": "Answer in JSON."}],
                    "response_format": {"type": "json_object"},
                },
            )
    assert response.status_code == 200, response.text
    assert fake.requests[0]["response_format"] == {"type": "json_object"}
    assert response.json()["choices"][0]["message"]["content"] == '{"ok": true}'
