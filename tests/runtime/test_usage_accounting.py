"""Usage is counted under the model that answered, and only the selected model's failure moves
the fallback chain (DESIGN §20): compaction's own summary model and subagents included."""

from __future__ import annotations

from reverie import Agent, Compaction, Runtime, Scope, tool
from reverie.core.events import ModelFallback
from reverie.core.exits import Failed, Usage
from reverie.core.messages import ModelRequest, ModelResponse, TokenUsage
from reverie.testing import ScriptedModel, call, error, reply

SCOPE = Scope(tenant="acme", user="ana")
PAGE = "p" * 400


@tool(effects={"read"}, idempotent=True)
def fetch(n: int) -> str:
    """Fetch page ``n``."""
    return f"{PAGE} page {n}"


def is_summary_request(request: ModelRequest) -> bool:
    return request.tools is None and request.messages[0].content.startswith("You compact")


def fetcher(pages: int) -> ScriptedModel:
    """Fetches pages 0..pages-1, one per turn, then replies (5 tokens out per answer; no
    input tokens reported, so the size estimate triggers compaction)."""

    def script(request: ModelRequest) -> ModelResponse:
        used = TokenUsage(output_tokens=5)
        last = request.messages[-1]
        if last.role != "tool":
            return _with(call("fetch", n=0), used)
        n = int(last.content.rsplit(" ", 1)[-1]) + 1
        return _with(call("fetch", n=n), used) if n < pages else reply("fetched", usage=used)

    return ScriptedModel(script, name="main")


def _with(response: ModelResponse, usage: TokenUsage) -> ModelResponse:
    return ModelResponse(parts=response.parts, usage=usage, finish_reason=response.finish_reason)


def assert_by_model_sums_to_the_totals(usage: Usage) -> None:
    parts = usage.by_model.values()
    assert sum(u.model_calls for u in parts) == usage.model_calls
    assert sum(u.input_tokens for u in parts) == usage.input_tokens
    assert sum(u.output_tokens for u in parts) == usage.output_tokens


async def test_only_the_selected_models_failure_moves_the_fallback_chain() -> None:
    main = fetcher(6)
    backup = ScriptedModel(lambda request: reply("from the backup"), name="backup")

    def down(request: ModelRequest) -> ModelResponse:
        raise error("unavailable")

    summariser = ScriptedModel(down, name="small")
    agent = Agent(
        name="reader",
        model=[main, backup],
        tools=[fetch],
        compaction=Compaction(trigger_tokens=600, keep_last_turns=1, model=summariser),
    )
    async with Runtime.open(":memory:") as rt:
        handle = await rt.start(agent, "go", scope=SCOPE)
        events = [e async for e in handle.events()]
        result = await handle.result()

    assert summariser.requests, "the summary model was asked"
    assert not [e for e in events if isinstance(e, ModelFallback)]
    assert backup.requests == []  # never moved to the agent's backup
    assert isinstance(result.exit, Failed) and result.exit.kind == "model_error"
    summary = result.exit.safe_summary
    assert "scripted:small" in summary and "unavailable" in summary
    assert "scripted:main" not in summary and "scripted:backup" not in summary


async def test_a_summary_calls_usage_is_counted_under_the_summary_model() -> None:
    main = fetcher(6)
    summariser = ScriptedModel(
        lambda request: reply(
            "Pages were fetched.", usage=TokenUsage(input_tokens=300, output_tokens=7)
        ),
        name="small",
    )
    agent = Agent(
        name="reader",
        model=main,
        tools=[fetch],
        compaction=Compaction(trigger_tokens=600, keep_last_turns=1, model=summariser),
    )
    async with Runtime.open(":memory:") as rt:
        result = await rt.run(agent, "go", scope=SCOPE)

    assert result.status == "completed"
    asked = len(summariser.requests)
    assert asked and all(is_summary_request(q) for q in summariser.requests)
    small, mine = result.usage.by_model["scripted:small"], result.usage.by_model["scripted:main"]
    assert (small.model_calls, small.input_tokens, small.output_tokens) == (
        asked,
        300 * asked,
        7 * asked,
    )
    assert (mine.model_calls, mine.output_tokens) == (len(main.requests), 5 * len(main.requests))
    assert_by_model_sums_to_the_totals(result.usage)


async def test_a_subagents_usage_is_counted_under_its_model_in_the_parents_by_model() -> None:
    researcher = Agent(
        name="researcher",
        model=ScriptedModel(
            [
                call("fetch", n=1),
                reply("page 1 says p", usage=TokenUsage(input_tokens=11, output_tokens=3)),
            ],
            name="child",
        ),
        tools=[fetch],
    )
    lead = Agent(
        name="lead",
        model=ScriptedModel(
            [
                call("research", input="read page 1"),
                reply("done", usage=TokenUsage(input_tokens=20, output_tokens=2)),
            ],
            name="parent",
        ),
        tools=[researcher.as_tool(name="research")],
    )
    async with Runtime.open(":memory:") as rt:
        result = await rt.run(lead, "go", scope=SCOPE)

    assert result.status == "completed"
    assert result.usage.model_calls == 4
    child = result.usage.by_model["scripted:child"]
    assert (child.model_calls, child.input_tokens, child.output_tokens) == (2, 11, 3)
    assert result.usage.by_model["scripted:parent"].model_calls == 2
    assert_by_model_sums_to_the_totals(result.usage)
