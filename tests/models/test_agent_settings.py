"""An agent's sampling settings reach the provider (issue 28): ``Agent(settings=...)`` and
``[agents.NAME] settings``, mapped for OpenAI-compatible servers and for Anthropic."""

from __future__ import annotations

from pathlib import Path

import pytest

from reverie import Agent, Runtime, Scope, Settings
from reverie.config import build_agents, load_config
from reverie.errors import ConfigError, UsageError
from reverie.models.openai import OpenAIChatModel
from reverie.testing import FakeAnthropicServer, FakeOpenAIServer

SCOPE = Scope(tenant="acme", user="ana")
SETTINGS = Settings(temperature=0.2, max_output_tokens=64, stop=["END"], seed=7, top_p=0.9)


async def test_agent_settings_reach_an_openai_compatible_endpoint() -> None:
    async with FakeOpenAIServer(["Hi."]) as srv, Runtime.open(":memory:") as rt:
        model = OpenAIChatModel("m", base_url=srv.base_url, api_key_env=None)
        r = await rt.run(Agent(name="a", model=model, settings=SETTINGS), "hi", scope=SCOPE)
    assert r.status == "completed"
    body = srv.requests[0]
    assert (body["temperature"], body["max_tokens"], body["stop"]) == (0.2, 64, ["END"])
    assert (body["seed"], body["top_p"]) == (7, 0.9)


async def test_agent_settings_reach_anthropic_as_its_own_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reverie.models.anthropic import AnthropicModel

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    async with FakeAnthropicServer(["Hi."]) as srv, Runtime.open(":memory:") as rt:
        model = AnthropicModel("claude-test", base_url=srv.base_url)
        r = await rt.run(Agent(name="a", model=model, settings=SETTINGS), "hi", scope=SCOPE)
    assert r.status == "completed"
    body = srv.requests[0]
    assert (body["temperature"], body["max_tokens"], body["stop_sequences"]) == (0.2, 64, ["END"])
    assert body["top_p"] == 0.9 and "seed" not in body


async def test_agents_section_settings_reach_the_endpoint(tmp_path: Path) -> None:
    async with FakeOpenAIServer(["Hi."]) as srv:
        path = tmp_path / "reverie.toml"
        path.write_text(
            f'[models.local]\nbase_url = "{srv.base_url}"\n'
            '[agents.a]\nmodel = "local:tiny"\n'
            'settings = { temperature = 0, max_output_tokens = 32, stop = ["###"] }\n'
        )
        [agent] = build_agents(load_config(path))
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "completed"
    body = srv.requests[0]
    assert (body["temperature"], body["max_tokens"], body["stop"]) == (0.0, 32, ["###"])
    assert "seed" not in body and "top_p" not in body


def test_settings_out_of_range_are_a_usage_error_and_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="temperature"):
        Settings(temperature=3)
    with pytest.raises(UsageError, match="stop"):
        Settings(stop=["a", "b", "c", "d", "e"])
    with pytest.raises(UsageError, match="settings"):
        Agent(name="a", model="openai:x", settings={"temprature": 1})  # type: ignore[arg-type]
    path = tmp_path / "reverie.toml"
    path.write_text('[agents.a]\nmodel = "openai:x"\nsettings = { top_p = 2 }\n')
    with pytest.raises(ConfigError, match=r"agents\.a\.settings\.top_p"):
        load_config(path)
