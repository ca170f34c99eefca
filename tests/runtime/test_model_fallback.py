"""Model fallback: ``Agent(model=[primary, fallback, ...])`` (docs/loop.md#model-fallback)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.config import build_agents, load_config
from reverie.core.events import ModelFallback, ModelRequested, RunEvent
from reverie.core.exits import Failed, ModelUsage
from reverie.core.messages import ModelResponse, TokenUsage
from reverie.errors import ConfigError, ModelErrorKind, UsageError
from reverie.loop.state import (
    BudgetLedger,
    LoopExecutionState,
    encode_checkpoint,
    state_from_dict,
    state_to_dict,
)
from reverie.loop.strategies import PrimaryModel
from reverie.models.anthropic import AnthropicModel
from reverie.models.openai import OpenAIChatModel
from reverie.models.pricing import Price
from reverie.store.memory import MemoryStore
from reverie.testing import (
    FakeAnthropicServer,
    FakeOpenAIServer,
    ScriptedModel,
    call,
    error,
    reply,
)
from reverie.testing.fake_openai import FakeError, FakeReply, FakeToolCall

SCOPE = Scope(tenant="acme", user="ana")


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(effects={"write"}, needs_approval=True, idempotent=False)
def send(to: str) -> str:
    """Send a message (needs approval)."""
    return f"sent to {to}"


def failed(r: Any) -> Failed:
    assert isinstance(r.exit, Failed), r.exit
    return r.exit


async def run_collecting(rt: Runtime, agent: Agent, text: str) -> tuple[Any, list[RunEvent]]:
    handle = await rt.start(agent, text, scope=SCOPE)
    events = [e async for e in handle.events()]
    return await handle.result(), events


# ---------------------------------------------------------------------------------- the rules
async def test_a_transient_error_falls_back_once_the_retries_are_spent() -> None:
    primary = ScriptedModel([error("transient")] * 3, name="primary")
    fallback = ScriptedModel([reply("from the fallback")], name="fallback")
    agent = Agent(name="a", model=[primary, fallback])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "completed" and r.text == "from the fallback"
    # The default recovery retries a transient error twice before giving up on the model.
    assert len(primary.requests) == 3 and len(fallback.requests) == 1
    assert r.usage.model_calls == 4


@pytest.mark.parametrize("kind", ["unavailable", "context_overflow"])
async def test_an_unavailable_or_context_overflow_error_falls_back_at_once(
    kind: ModelErrorKind,
) -> None:
    primary = ScriptedModel([error(kind)], name="primary")
    fallback = ScriptedModel([reply("ok")], name="fallback")
    agent = Agent(name="a", model=[primary, fallback])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "completed" and r.text == "ok"
    assert len(primary.requests) == 1 and len(fallback.requests) == 1


@pytest.mark.parametrize("kind", ["internal", "content_filtered"])
async def test_a_model_error_of_another_kind_does_not_fall_back(kind: ModelErrorKind) -> None:
    # internal: a request the API refuses (400 invalid_request_error); content_filtered: the
    # same prompt would be filtered anywhere. Another model cannot fix either.
    primary = ScriptedModel([error(kind)], name="primary")
    fallback = ScriptedModel([reply("never")], name="fallback")
    agent = Agent(name="a", model=[primary, fallback])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "hi", scope=SCOPE)
    assert failed(r).kind == "model_error"
    assert f"({kind})" in failed(r).safe_summary
    assert fallback.requests == []


async def test_when_every_model_fails_the_run_fails_naming_each_models_error_kind() -> None:
    first = ScriptedModel([error("transient")] * 3, name="first")
    second = ScriptedModel([error("unavailable", "no key for second")], name="second")
    third = ScriptedModel([error("context_overflow", "prompt is too long")], name="third")
    agent = Agent(name="a", model=[first, second, third])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "hi", scope=SCOPE)
    exit_ = failed(r)
    assert exit_.kind == "model_error"  # the last model's failure kind
    assert exit_.safe_summary.startswith(
        "every model failed: scripted:first (transient), scripted:second (unavailable), "
        "scripted:third (context_overflow)"
    )
    assert "prompt is too long" in exit_.safe_summary
    assert [len(m.requests) for m in (first, second, third)] == [3, 1, 1]


async def test_a_single_model_failure_keeps_its_summary() -> None:
    agent = Agent(name="a", model=[ScriptedModel([error("unavailable", "down")], name="only")])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "hi", scope=SCOPE)
    assert failed(r).safe_summary == "model call failed (unavailable): down"


async def test_the_fallback_model_is_kept_for_the_rest_of_the_run() -> None:
    primary = ScriptedModel([error("unavailable")], name="primary")
    fallback = ScriptedModel([call("add", a=1, b=2), reply("3")], name="fallback")
    agent = Agent(name="a", model=[primary, fallback], tools=[add])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "1+2?", scope=SCOPE)
    assert r.status == "completed" and r.text == "3"
    assert len(primary.requests) == 1  # not asked again after the fallback
    assert len(fallback.requests) == 2


async def test_model_specs_and_model_instances_mix_in_one_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fallback = ScriptedModel([reply("ok")], name="fallback")
    # The spec resolves to the real OpenAI provider, which fails `unavailable` without a key.
    agent = Agent(name="a", model=["openai:gpt-4.1-mini", fallback])
    async with Runtime.open(":memory:") as rt:
        r, events = await run_collecting(rt, agent, "hi")
    assert r.status == "completed" and r.text == "ok"
    [fell] = [e for e in events if isinstance(e, ModelFallback)]
    assert (fell.from_model, fell.to_model, fell.error_kind) == (
        "openai:gpt-4.1-mini",
        "scripted:fallback",
        "unavailable",
    )


# ---------------------------------------------------------------------------------- wire format
async def test_the_fallback_request_to_anthropic_is_made_from_the_same_transcript(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    openai_script = [
        FakeReply(tool_calls=(FakeToolCall("add", {"a": 2, "b": 3}, id="call_1"),)),
        FakeError(503),
        FakeError(503),
        FakeError(503),
    ]
    async with (
        FakeOpenAIServer(openai_script) as oai,
        FakeAnthropicServer([FakeReply("Five.", input_tokens=9, output_tokens=2)]) as ant,
    ):
        agent = Agent(
            name="calc",
            instructions="You add numbers.",
            model=[
                OpenAIChatModel("gpt-test", base_url=oai.base_url),
                AnthropicModel("claude-test", base_url=ant.base_url),
            ],
            tools=[add],
        )
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "2+3?", scope=SCOPE)
    assert r.status == "completed" and r.text == "Five."
    assert len(oai.requests) == 4 and len(ant.requests) == 1
    # The fake enforces Anthropic's conversation rules: nothing was refused.
    assert ant.violations == []
    body = ant.requests[0]
    assert body["model"] == "claude-test"
    system = body["system"]
    assert "You add numbers." in (
        system if isinstance(system, str) else " ".join(b["text"] for b in system)
    )
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"] in ("2+3?", [{"type": "text", "text": "2+3?"}])
    [use] = [b for b in messages[1]["content"] if b["type"] == "tool_use"]
    assert (use["id"], use["name"], use["input"]) == ("call_1", "add", {"a": 2, "b": 3})
    [result] = [b for b in messages[2]["content"] if b["type"] == "tool_result"]
    assert result["tool_use_id"] == "call_1"
    assert "5" in str(result["content"])
    assert [t["name"] for t in body["tools"]] == ["add"]
    assert set(r.usage.by_model) == {"openai:gpt-test", "anthropic:claude-test"}


async def test_the_fallback_request_to_openai_is_made_from_the_same_transcript(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    anthropic_script = [
        FakeReply(tool_calls=(FakeToolCall("add", {"a": 2, "b": 3}, id="toolu_1"),)),
        FakeError(401),  # a bad key is `authentication`: the next model at once
    ]
    async with (
        FakeAnthropicServer(anthropic_script) as ant,
        FakeOpenAIServer([FakeReply("Five.")]) as oai,
    ):
        agent = Agent(
            name="calc",
            instructions="You add numbers.",
            model=[
                AnthropicModel("claude-test", base_url=ant.base_url),
                OpenAIChatModel("gpt-test", base_url=oai.base_url),
            ],
            tools=[add],
        )
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, "2+3?", scope=SCOPE)
    assert r.status == "completed" and r.text == "Five."
    assert len(ant.requests) == 2 and len(oai.requests) == 1
    assert oai.violations == []
    messages = oai.requests[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[0]["content"] == "You add numbers."
    [tool_call] = messages[2]["tool_calls"]
    assert tool_call["id"] == "toolu_1"
    assert tool_call["function"]["name"] == "add"
    assert json.loads(tool_call["function"]["arguments"]) == {"a": 2, "b": 3}
    assert messages[3]["tool_call_id"] == "toolu_1" and messages[3]["content"] == "5"


# ---------------------------------------------------------------------------------- usage
async def test_usage_and_price_are_counted_per_model() -> None:
    # The primary answers once (1M input tokens at $2/Mtok), then is unavailable; the fallback
    # answers with 1M output tokens at $0.5/Mtok.
    spend = TokenUsage(input_tokens=1_000_000, output_tokens=0)
    priced_call = ModelResponse(
        parts=call("add", a=1, b=2).parts, usage=spend, finish_reason="tool_calls"
    )
    primary = ScriptedModel([priced_call, error("unavailable")], name="primary")
    fallback = ScriptedModel(
        [reply("3", usage=TokenUsage(input_tokens=0, output_tokens=1_000_000))], name="fallback"
    )
    prices = {
        "scripted:primary": Price(input_per_mtok=2.0, output_per_mtok=2.0),
        "scripted:fallback": Price(input_per_mtok=0.5, output_per_mtok=0.5),
    }
    agent = Agent(name="a", model=[primary, fallback], tools=[add], limits=Limits(max_usd=100.0))
    async with Runtime.open(":memory:", prices=prices) as rt:
        r = await rt.run(agent, "1+2?", scope=SCOPE)
        stored = await rt.get_result(r.run_id)
    assert r.status == "completed"
    assert r.usage.by_model == {
        "scripted:primary": ModelUsage(model_calls=2, input_tokens=1_000_000, usd=2.0),
        "scripted:fallback": ModelUsage(model_calls=1, output_tokens=1_000_000, usd=0.5),
    }
    assert list(r.usage.by_model) == ["scripted:primary", "scripted:fallback"]
    # The totals are the sums.
    assert r.usage.model_calls == 3
    assert r.usage.usd == pytest.approx(2.5)
    assert (r.usage.input_tokens, r.usage.output_tokens) == (1_000_000, 1_000_000)
    # The breakdown is stored with the run's exit.
    assert stored.usage == r.usage


async def test_a_usd_limit_needs_a_price_for_every_fallback_model() -> None:
    agent = Agent(
        name="a",
        model=[ScriptedModel([reply("x")], name="priced"), ScriptedModel([], name="unpriced")],
        limits=Limits(max_usd=1.0),
    )
    prices = {"scripted:priced": Price(input_per_mtok=1.0, output_per_mtok=1.0)}
    async with Runtime.open(":memory:", prices=prices) as rt:
        with pytest.raises(ConfigError, match="scripted:unpriced"):
            await rt.run(agent, "hi", scope=SCOPE)


# ---------------------------------------------------------------------------------- observability
async def test_events_name_the_model_that_answered() -> None:
    primary = ScriptedModel([error("transient")] * 3, name="primary")
    fallback = ScriptedModel([reply("ok")], name="fallback")
    agent = Agent(name="a", model=[primary, fallback])
    async with Runtime.open(":memory:") as rt:
        r, events = await run_collecting(rt, agent, "hi")
    assert r.status == "completed"
    asked = [(e.model, e.attempt) for e in events if isinstance(e, ModelRequested)]
    assert asked == [
        ("scripted:primary", 0),
        ("scripted:primary", 1),
        ("scripted:primary", 2),
        ("scripted:fallback", 0),  # fresh retries on the fallback
    ]
    [fell] = [e for e in events if isinstance(e, ModelFallback)]
    assert (fell.from_model, fell.to_model, fell.error_kind) == (
        "scripted:primary",
        "scripted:fallback",
        "transient",
    )
    kinds = [e.kind for e in events]
    assert kinds.index("model_fallback") < kinds.index("assistant_message")


async def test_a_fallback_is_logged_once_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="reverie")
    primary = ScriptedModel([error("unavailable")], name="primary")
    fallback = ScriptedModel([call("add", a=1, b=2), reply("3")], name="fallback")
    agent = Agent(name="a", model=[primary, fallback], tools=[add])
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "1+2?", scope=SCOPE)
    assert r.status == "completed"
    warned = [m.getMessage() for m in caplog.records if "falling back" in m.getMessage()]
    assert warned == [
        f"run {r.run_id}: model scripted:primary failed (unavailable); "
        "falling back to model scripted:fallback"
    ]


@pytest.fixture
def exporter() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield provider, memory
    provider.shutdown()


def attr(span: ReadableSpan, key: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(key)


async def test_telemetry_spans_name_the_model_that_answered(
    exporter: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, memory = exporter
    primary = ScriptedModel([error("unavailable")], name="primary")
    fallback = ScriptedModel([reply("ok")], name="fallback")
    agent = Agent(name="a", model=[primary, fallback])
    async with Runtime.open(":memory:", tracer_provider=provider) as rt:
        r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "completed"
    chats = [s for s in memory.get_finished_spans() if s.name.startswith("chat ")]
    assert [s.name for s in chats] == ["chat scripted:primary", "chat scripted:fallback"]
    assert attr(chats[0], "error.type") == "unavailable"
    assert attr(chats[1], "reverie.model.name") == "scripted:fallback"
    assert attr(chats[1], "error.type") is None


# ---------------------------------------------------------------------------------- budgets
async def test_the_failed_primary_attempts_and_the_fallback_count_against_max_model_calls() -> None:
    primary = ScriptedModel([error("transient")] * 3, name="primary")
    fallback = ScriptedModel([reply("ok")], name="fallback")
    agent = Agent(name="a", model=[primary, fallback], limits=Limits(max_model_calls=4))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "completed"
    assert r.usage.model_calls == 4
    assert r.usage.by_model["scripted:primary"].model_calls == 3
    assert r.usage.by_model["scripted:fallback"].model_calls == 1


async def test_with_the_model_call_budget_at_its_limit_no_fallback_call_is_made() -> None:
    primary = ScriptedModel([error("transient")] * 3, name="primary")
    fallback = ScriptedModel([reply("never")], name="fallback")
    agent = Agent(name="a", model=[primary, fallback], limits=Limits(max_model_calls=3))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "hi", scope=SCOPE)
    assert failed(r).kind == "model_call_limit"
    assert len(primary.requests) == 3
    assert fallback.requests == []
    assert r.usage.model_calls == 3


# ---------------------------------------------------------------------------------- finalizer
async def test_the_finalizer_uses_the_currently_selected_model() -> None:
    primary = ScriptedModel([error("unavailable"), reply("never")], name="primary")
    fallback = ScriptedModel([call("add", a=1, b=2), reply("the sum is 3")], name="fallback")
    agent = Agent(name="a", model=[primary, fallback], tools=[add], limits=Limits(max_iterations=1))
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "1+2?", scope=SCOPE)
    assert r.status == "completed" and r.exit.kind == "graceful_summary"  # type: ignore[union-attr]
    assert r.text == "the sum is 3"
    assert len(primary.requests) == 1
    assert fallback.requests[-1].tools is None  # the finalizer's tools-free request


# ---------------------------------------------------------------------------------- resume
async def test_a_resume_continues_on_the_model_recorded_in_the_checkpoint() -> None:
    primary = ScriptedModel([error("unavailable"), reply("never")], name="primary")
    fallback = ScriptedModel([call("send", to="bob"), reply("sent")], name="fallback")
    store = MemoryStore()
    agent = Agent(name="a", model=[primary, fallback], tools=[send])
    async with Runtime(store, agents=[agent]) as rt:
        r = await rt.run(agent, "send it", scope=SCOPE)
        assert r.status == "blocked" and r.gate is not None
        gate = r.gate.ref
    # Another process (the same agent, fresh models) approves: the run resumes from the
    # BeforeBlock checkpoint, on the fallback.
    primary2 = ScriptedModel([reply("never")], name="primary")
    fallback2 = ScriptedModel([reply("sent")], name="fallback")
    again = Agent(name="a", model=[primary2, fallback2], tools=[send])
    async with Runtime(store, agents=[again]) as rt:
        r = await rt.approve(gate)
    assert r.status == "completed" and r.text == "sent"
    assert primary2.requests == []
    assert len(fallback2.requests) == 1
    assert r.usage.by_model["scripted:primary"].model_calls == 1
    assert r.usage.by_model["scripted:fallback"].model_calls == 2


# ---------------------------------------------------------------------------------- the agent
def test_an_agent_with_an_empty_model_list_is_refused() -> None:
    with pytest.raises(UsageError, match="names no model"):
        Agent(name="a", model=[])


def test_an_agent_model_list_entry_that_is_not_a_model_is_refused() -> None:
    with pytest.raises(UsageError, match="is not a model"):
        Agent(name="a", model=["openai:gpt-4.1-mini", 42])  # type: ignore[list-item]


def test_agent_models_lists_the_primary_then_the_fallbacks() -> None:
    fallback = ScriptedModel([], name="f")
    assert Agent(name="a", model="openai:gpt-4.1-mini").models == ("openai:gpt-4.1-mini",)
    assert Agent(name="a", model=["openai:gpt-4.1-mini", fallback]).models == (
        "openai:gpt-4.1-mini",
        fallback,
    )


async def test_an_unbound_turn_borrowing_an_agent_gets_its_fallback_models() -> None:
    primary = ScriptedModel([error("unavailable")], name="primary")
    fallback = ScriptedModel([reply("from the fallback")], name="fallback")
    agent = Agent(name="a", model=[primary, fallback])
    async with Runtime.open(":memory:", agents=[agent]) as rt:
        r = await rt.unbound.run(system_prompt="Be brief.", messages="hi", scope=SCOPE, agent=agent)
    assert r.status == "completed" and r.text == "from the fallback"
    assert len(primary.requests) == 1 and len(fallback.requests) == 1


# ---------------------------------------------------------------------------------- reverie.toml
def write_script(path: Path, steps: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps(steps), encoding="utf-8")


async def test_a_model_list_in_reverie_toml_is_the_primary_then_its_fallbacks(
    tmp_path: Path,
) -> None:
    write_script(tmp_path / "down.json", [{"error": "unavailable", "message": "down"}])
    write_script(tmp_path / "up.json", [{"reply": "from the fallback"}])
    (tmp_path / "reverie.toml").write_text(
        '[agents.helper]\nmodel = ["scripted:down.json", "scripted:up.json"]\n',
        encoding="utf-8",
    )
    [agent] = build_agents(load_config(tmp_path / "reverie.toml"))
    assert [getattr(m, "name", m) for m in agent.models] == [
        "scripted:down.json",
        "scripted:up.json",
    ]
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(agent, "hi", scope=SCOPE)
    assert r.status == "completed" and r.text == "from the fallback"
    assert list(r.usage.by_model) == ["scripted:down.json", "scripted:up.json"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("[]", "the list names no model"),
        ('["scripted:a.json", ""]', "a model spec must not be empty"),
        ('["scripted:a.json", 5]', "a model spec must be a string"),
    ],
)
def test_a_bad_model_list_in_reverie_toml_is_refused_naming_the_key(
    tmp_path: Path, value: str, problem: str
) -> None:
    path = tmp_path / "reverie.toml"
    path.write_text(f"[agents.helper]\nmodel = {value}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"agents.helper.model: {problem}. Fix: set model = " in str(info.value)


def test_a_fallback_spec_that_cannot_be_resolved_is_refused_naming_its_position(
    tmp_path: Path,
) -> None:
    write_script(tmp_path / "up.json", [{"reply": "x"}])
    path = tmp_path / "reverie.toml"
    path.write_text('[agents.helper]\nmodel = ["scripted:up.json", "nope"]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"agents\.helper\.model\[1\]: "):
        load_config(path)


def test_a_usd_limit_in_reverie_toml_needs_a_price_for_every_fallback(tmp_path: Path) -> None:
    write_script(tmp_path / "up.json", [{"reply": "x"}])
    path = tmp_path / "reverie.toml"
    path.write_text(
        '[agents.helper]\nmodel = ["openai:gpt-4.1-mini", "scripted:up.json"]\n'
        "limits = { max_usd = 1.0 }\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"no price is known for model 'scripted:up\.json'"):
        load_config(path)


# ---------------------------------------------------------------------------------- checkpoint
def test_the_model_choice_and_per_model_usage_round_trip_through_the_checkpoint() -> None:
    ledger = BudgetLedger().charged("a").charged("b")
    ledger = ledger.answered("b", input_tokens=3, output_tokens=4, usd=0.5)
    state = LoopExecutionState(budget=ledger, model_state={"index": 1, "failed": ["unavailable"]})
    payload = json.loads(encode_checkpoint(state, family_digest="d"))
    assert payload["schema_id"] == "reverie.loop.state/2"
    assert state_from_dict(payload["state"]) == state


def test_a_checkpoint_without_per_model_usage_still_decodes_on_the_primary() -> None:
    # A payload written before fallback existed: no by_model, no model slot.
    old = state_to_dict(LoopExecutionState(budget=BudgetLedger(model_calls=2, input_tokens=5)))
    assert "by_model" not in old["budget"] and "model_state" not in old["slots"]
    state = state_from_dict(old)
    assert state.budget.by_model == {} and state.budget.model_calls == 2
    assert PrimaryModel().select(state) == 0
