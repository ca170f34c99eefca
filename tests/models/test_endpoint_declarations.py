"""Endpoints declare what they support, and the adapter obeys (DESIGN §20, issue 28):
structured-output mode, streamed tool calls, timeouts — from the model's constructor and from
``[models.NAME]`` in ``reverie.toml``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from reverie import Agent, Runtime, Scope, tool
from reverie.config import build_agents, load_config
from reverie.errors import ConfigError
from reverie.models.compat import SERVER_KINDS, compat_for
from reverie.models.openai import OpenAIChatModel
from reverie.models.registry import resolve_model
from reverie.testing import FakeOpenAIServer, call
from reverie.testing.fake_openai import FakeHang

SCOPE = Scope(tenant="acme", user="ana")


class Total(BaseModel):
    total: int


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def typed(srv: FakeOpenAIServer, **model: Any) -> Agent:
    m = OpenAIChatModel("local", base_url=srv.base_url, api_key_env=None, **model)
    return Agent(name="typed", model=m, output_type=Total)


def system_text(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


async def test_typed_output_against_a_json_object_only_server_uses_json_object_and_validates() -> (
    None
):
    # The first answer misses the schema: validated locally, refused, answered again.
    steps = ['{"sum": 5}', '{"total": 5}']
    async with (
        FakeOpenAIServer(steps, structured_output="json_object") as srv,
        Runtime.open(":memory:") as rt,
    ):
        r = await rt.run(typed(srv, structured_output="json_object"), "2+3?", scope=SCOPE)
    assert r.status == "completed" and r.output == Total(total=5)
    first = srv.requests[0]
    assert first["response_format"] == {"type": "json_object"}
    assert '"total"' in system_text(first) and "JSON Schema" in system_text(first)


async def test_json_schema_sent_to_a_json_object_only_server_fails_once_without_retries() -> None:
    async with (
        FakeOpenAIServer(['{"total": 5}'] * 3, structured_output="json_object") as srv,
        Runtime.open(":memory:") as rt,
    ):
        r = await rt.run(typed(srv), "2+3?", scope=SCOPE)
    assert r.status == "failed"
    assert "model call failed (internal)" in r.exit.safe_summary  # type: ignore[union-attr]
    assert len(srv.requests) == 1  # a validation error is not transient


async def test_tool_mode_asks_for_typed_output_with_a_forced_call_and_no_response_format() -> None:
    async with (
        FakeOpenAIServer([call("structured_result", total=5)]) as srv,
        Runtime.open(":memory:") as rt,
    ):
        r = await rt.run(typed(srv, structured_output="tool"), "2+3?", scope=SCOPE)
    assert r.status == "completed" and r.output == Total(total=5)
    body = srv.requests[0]
    assert "response_format" not in body
    assert body["tool_choice"] == {"type": "function", "function": {"name": "structured_result"}}


async def test_none_mode_puts_the_schema_in_the_instructions_only() -> None:
    async with (
        FakeOpenAIServer(['{"total": 5}']) as srv,
        Runtime.open(":memory:") as rt,
    ):
        r = await rt.run(typed(srv, structured_output="none"), "2+3?", scope=SCOPE)
    assert r.status == "completed" and r.output == Total(total=5)
    body = srv.requests[0]
    assert "response_format" not in body
    assert '"total"' in system_text(body)


async def test_a_server_declared_without_streamed_tool_calls_is_asked_whole_for_tools() -> None:
    steps = [call("add", a=2, b=3), "5"]
    async with FakeOpenAIServer(steps, streaming_tool_calls=False, null_content=False) as srv:
        model = OpenAIChatModel(
            "m", base_url=srv.base_url, api_key_env=None, server="llama-cpp-python"
        )
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(Agent(name="a", model=model, tools=[add]), "2+3?", scope=SCOPE)
    assert r.status == "completed" and r.text == "5"
    assert [b["stream"] for b in srv.requests] == [False, False]


async def test_an_undeclared_server_failing_streamed_tool_calls_is_asked_again_whole() -> None:
    # The same server, undeclared: its empty stream is re-asked without streaming.
    steps = [call("add", a=2, b=3), "5"]
    async with FakeOpenAIServer(steps, streaming_tool_calls=False) as srv:
        model = OpenAIChatModel("m", base_url=srv.base_url, api_key_env=None)
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(Agent(name="a", model=model, tools=[add]), "2+3?", scope=SCOPE)
    assert r.status == "completed" and r.text == "5"


def write_config(tmp_path: Path, url: str, endpoint: str) -> Path:
    path = tmp_path / "reverie.toml"
    path.write_text(
        f'[models.local]\nbase_url = "{url}"\n{endpoint}\n'
        '[agents.typed]\nmodel = "local:tiny"\n'
        'output_type = "tests_output_types:TOTAL"\n'
    )
    (tmp_path / "tests_output_types.py").write_text(
        'TOTAL = {"type": "object", "properties": {"total": {"type": "integer"}}, '
        '"required": ["total"]}\n'
    )
    return path


async def test_models_section_declares_a_llama_cpp_python_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    async with FakeOpenAIServer(
        ['{"total": 5}'],
        structured_output="json_object",
        null_content=False,
        usage_in_streams=False,
    ) as srv:
        config = load_config(
            write_config(tmp_path, srv.base_url, 'server = "llama-cpp-python"\ntimeout_s = 30')
        )
        [agent] = build_agents(config)
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "2+3?", scope=SCOPE)
    assert r.status == "completed" and r.output == {"total": 5}
    body = srv.requests[0]
    assert body["response_format"] == {"type": "json_object"}
    assert body["stream"] is False  # tools offered: asked whole, so its usage is reported
    assert not r.usage.estimated and r.usage.input_tokens > 0


async def test_models_section_timeout_s_replaces_the_fixed_read_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    async with FakeOpenAIServer([FakeHang(60)] * 3) as srv:
        config = load_config(write_config(tmp_path, srv.base_url, "timeout_s = 0.5"))
        [agent] = build_agents(config)
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "2+3?", scope=SCOPE)
    assert r.status == "failed"
    assert "timed out after 0.5s" in r.exit.safe_summary  # type: ignore[union-attr]


def test_every_known_server_kind_has_declared_defaults() -> None:
    llama = compat_for("llama-cpp-python")
    assert (llama.structured_output, llama.usage_in_streams, llama.null_content) == (
        "json_object",
        False,
        False,
    )
    assert not llama.streaming_tool_calls
    assert compat_for("openai").null_content
    assert {compat_for(kind).timeout_s for kind in SERVER_KINDS} == {60.0}
    with pytest.raises(ValueError, match="structured_output"):
        compat_for("generic", structured_output="xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown server kind"):
        compat_for("nope")  # type: ignore[arg-type]


def test_ollama_and_openai_specs_get_their_servers_defaults() -> None:
    ollama = resolve_model("ollama:qwen3")
    openai = resolve_model("openai:gpt-4.1-mini")
    assert isinstance(ollama, OpenAIChatModel) and isinstance(openai, OpenAIChatModel)
    assert not ollama.compat.null_content and openai.compat.null_content
    assert json.dumps(ollama.compat.structured_output) == '"json_schema"'


async def test_a_base_url_with_or_without_v1_reaches_the_chat_completions_route() -> None:
    async with FakeOpenAIServer(["One.", "Two."]) as srv, Runtime.open(":memory:") as rt:
        for url in (srv.root_url, f"{srv.root_url}/v1/"):
            model = OpenAIChatModel("m", base_url=url, api_key_env=None)
            r = await rt.run(Agent(name="a", model=model), "hi", scope=SCOPE)
            assert r.status == "completed"
    assert len(srv.requests) == 2


def test_models_section_needs_a_base_url_except_for_the_builtin_providers(tmp_path: Path) -> None:
    path = tmp_path / "reverie.toml"
    path.write_text('[models.ollama]\ntimeout_s = 5\n[models.custom]\nserver = "vllm"\n')
    with pytest.raises(ConfigError, match=r"\[models\.custom\] needs base_url"):
        load_config(path)
    path.write_text('[models.ollama]\ntimeout_s = 5\nstructured_output = "tool"\n')
    endpoints = load_config(path).endpoints()
    model = resolve_model("ollama:qwen3", endpoints=endpoints)
    assert isinstance(model, OpenAIChatModel)
    assert (model.compat.timeout_s, model.compat.structured_output) == (5.0, "tool")
