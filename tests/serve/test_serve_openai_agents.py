"""openai-agents' default model (the Responses API) against ``reverie serve``: an openai-agents
``Agent`` whose model is a served reverie agent, run with ``Runner.run`` and streamed."""

from __future__ import annotations

from agents import Agent as SdkAgent, OpenAIProvider, RunConfig, Runner

from reverie import Agent, tool
from reverie.testing import ScriptedModel, call, reply
from serve.serve_support import serving

REPLY = "2 + 3 = 5."


def calculator(log: list[str]) -> Agent:
    @tool(effects=set())
    def add(a: int, b: int) -> int:
        """Add two integers."""
        log.append(f"add:{a}+{b}")
        return a + b

    model = ScriptedModel([call("add", a=2, b=3), reply(REPLY)])
    return Agent(name="calc", model=model, instructions="You add.", tools=[add])


async def test_openai_agents_default_model_runs_a_served_agent() -> None:
    log: list[str] = []
    async with serving(calculator(log)) as srv, srv.openai() as client:
        config = RunConfig(
            model_provider=OpenAIProvider(openai_client=client), tracing_disabled=True
        )
        result = await Runner.run(SdkAgent(name="front", model="calc"), "2 + 3?", run_config=config)
    assert result.final_output == REPLY
    assert log == ["add:2+3"]


async def test_openai_agents_streams_a_served_agent() -> None:
    log: list[str] = []
    async with serving(calculator(log)) as srv, srv.openai() as client:
        config = RunConfig(
            model_provider=OpenAIProvider(openai_client=client), tracing_disabled=True
        )
        run = Runner.run_streamed(SdkAgent(name="front", model="calc"), "2 + 3?", run_config=config)
        kinds = [event.type async for event in run.stream_events()]
    assert run.final_output == REPLY
    assert "raw_response_event" in kinds
    assert log == ["add:2+3"]
