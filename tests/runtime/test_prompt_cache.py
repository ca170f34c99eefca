"""Prompt caching (DESIGN §20, "a stable prompt prefix"): the prefix of a thread's prompts stays
byte-identical, the window moves in steps, cache markers go where the provider takes them, and
cached input is counted and priced apart."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.hooks import PromptHookContext, Snippet
from reverie.loop.family import LoopFamily
from reverie.loop.strategies import WindowContext
from reverie.memory import NativeMemory
from reverie.models.anthropic import AnthropicModel
from reverie.models.openai import OpenAIChatModel
from reverie.models.pricing import Price
from reverie.testing import FakeAnthropicServer, FakeOpenAIServer, call

SCOPE = Scope(tenant="acme", user="ana")
LONG = "You are a careful assistant. Follow the house rules in every answer. " * 120
"""Instructions long enough (~8,000 characters) for the providers' caches to take them."""


@tool(effects=set())
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(effects={"write"}, needs_approval=True)
def publish(text: str) -> str:
    """Publish a text."""
    return "published"


def openai_model(srv: FakeOpenAIServer, **kwargs: Any) -> OpenAIChatModel:
    return OpenAIChatModel(
        "gpt-test", base_url=srv.base_url, api_key_env=None, name="openai-compat:fake", **kwargs
    )


def anthropic_model(srv: FakeAnthropicServer, **kwargs: Any) -> AnthropicModel:
    return AnthropicModel(
        "claude-test", base_url=srv.base_url, api_key="sk-ant-test", name="claude:fake", **kwargs
    )


def wire(messages: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(messages))


def index_of(messages: Sequence[Mapping[str, Any]], opening: str) -> int | None:
    """Where the message opening with ``opening`` is (``[memory]``, ``[context from hooks]``)."""
    for i, m in enumerate(messages):
        content = m.get("content")
        if isinstance(content, str) and content.startswith(opening):
            return i
    return None


def memory_index(messages: Sequence[Mapping[str, Any]]) -> int:
    found = index_of(messages, "[memory]")
    return len(messages) if found is None else found


def newest_group(rest: Sequence[Mapping[str, Any]]) -> bool:
    """One message, or an assistant's calls and their results."""
    return len(rest) == 1 or (
        rest[0]["role"] == "assistant" and all(m["role"] == "tool" for m in rest[1:])
    )


def assert_each_prompt_begins_with_the_previous_prefix(bodies: Sequence[Mapping[str, Any]]) -> None:
    """Hook context (new on every call) is followed only by the newest rows; each prompt
    repeats the one before up to its hook context, or up to its memory where that changed."""
    for body in bodies:
        hook = index_of(body["messages"], "[context from hooks]")
        if hook is not None:
            assert newest_group(body["messages"][hook + 1 :])
    for before, after in itertools.pairwise(bodies):
        old, new = before["messages"], after["messages"]
        end = index_of(old, "[context from hooks]")
        prefix = old if end is None else old[:end]
        at = memory_index(old)
        if at < len(old) and (memory_index(new) != at or new[at] != old[at]):
            prefix = old[:at]  # a memory write, or the next run's memory: the rest may change
        assert new[: len(prefix)] == prefix
        assert wire(new).startswith(wire(prefix)[:-1])
        assert after.get("tools") == before.get("tools")


# -- accounting --------------------------------------------------------------------------------


async def test_openai_cached_tokens_are_counted_and_priced_at_the_cached_rate() -> None:
    price = Price(input_per_mtok=1.0, output_per_mtok=2.0, cached_input_per_mtok=0.1)
    script = [call("add", a=1, b=2), call("add", a=3, b=4), "done"]
    async with (
        FakeOpenAIServer(script) as srv,
        Runtime.open(":memory:", prices={"openai-compat:fake": price}) as rt,
    ):
        agent = Agent(name="a", model=openai_model(srv), instructions=LONG, tools=[add])
        r = await rt.run(agent, "add some numbers", scope=SCOPE)
    u = r.usage
    assert u.cache_read_tokens > 0 and u.cache_read_tokens % 128 == 0
    assert u.by_model["openai-compat:fake"].cache_read_tokens == u.cache_read_tokens
    expected = ((u.input_tokens - u.cache_read_tokens) * 1.0 + u.cache_read_tokens * 0.1) / 1e6
    expected += u.output_tokens * 2.0 / 1e6
    assert abs(u.usd - expected) < 1e-12
    assert u.usd < (u.input_tokens * 1.0 + u.output_tokens * 2.0) / 1e6
    assert u.to_dict()["cache_read_tokens"] == u.cache_read_tokens
    assert u.cached_share > 0.4


async def test_anthropic_cache_reads_and_writes_are_priced_at_their_own_rates() -> None:
    price = Price(
        input_per_mtok=3.0,
        output_per_mtok=15.0,
        cached_input_per_mtok=0.3,
        cache_write_per_mtok=3.75,
    )
    script = [call("add", a=1, b=2), "done"]
    async with (
        FakeAnthropicServer(script) as srv,
        Runtime.open(":memory:", prices={"claude:fake": price}) as rt,
    ):
        agent = Agent(name="a", model=anthropic_model(srv), instructions=LONG, tools=[add])
        r = await rt.run(agent, "add some numbers", scope=SCOPE)
    u = r.usage
    assert u.cache_write_tokens > 0 and u.cache_read_tokens > 0
    plain = u.input_tokens - u.cache_read_tokens - u.cache_write_tokens
    expected = (
        plain * 3.0 + u.cache_read_tokens * 0.3 + u.cache_write_tokens * 3.75 + u.output_tokens * 15
    ) / 1e6
    assert abs(u.usd - expected) < 1e-12


async def test_a_max_usd_budget_is_charged_at_the_cached_rates() -> None:
    # At the plain rate the run would trip a budget it stays under with the cached rate.
    price = Price(input_per_mtok=100.0, output_per_mtok=0.0, cached_input_per_mtok=0.0)
    script = [call("add", a=i, b=i) for i in range(6)] + ["done"]
    async with FakeOpenAIServer(script) as srv:
        agent = Agent(
            name="a",
            model=openai_model(srv),
            instructions=LONG,
            tools=[add],
            limits=Limits(max_usd=1.0),
            on_limit="fail",
        )
        async with Runtime.open(":memory:", prices={"openai-compat:fake": price}) as rt:
            r = await rt.run(agent, "add numbers", scope=SCOPE)
    assert r.status == "completed", r.exit
    assert r.usage.input_tokens * 100.0 / 1e6 > 1.0 > r.usage.usd


def test_usage_from_a_checkpoint_without_cache_figures_reads_as_none_cached() -> None:
    from reverie.core.exits import Usage

    old = {"model_calls": 1, "input_tokens": 10, "output_tokens": 2, "usd": 0.5}
    u = Usage.from_dict({**old, "capability_calls": 0, "by_model": {"m": old}})
    assert u.cache_read_tokens == 0 and u.by_model["m"].cache_write_tokens == 0
    assert "cache_read_tokens" not in u.to_dict()
    assert Usage.from_dict(Usage(input_tokens=9, cache_read_tokens=4).to_dict()).cache_read_tokens


# -- a stable prefix ---------------------------------------------------------------------------


async def clock(ctx: PromptHookContext) -> Snippet:
    """Hook context that changes on every call (it must change only the end of the prompt)."""
    return Snippet(f"the time is {ctx.iteration}:00")


async def test_the_prompt_prefix_is_byte_identical_across_the_calls_of_a_run() -> None:
    script = [call("lookup", key="a"), call("add", a=1, b=2), call("lookup", key="b"), "done"]
    async with FakeOpenAIServer(script) as srv, Runtime.open(":memory:") as rt:
        rt.hooks.register("before_prompt", clock, name="clock")
        agent = Agent(name="a", model=openai_model(srv), instructions=LONG, tools=[lookup, add])
        r = await rt.run(agent, "look things up", scope=SCOPE)
    assert r.status == "completed"
    bodies = srv.requests
    assert len(bodies) == 4
    assert_each_prompt_begins_with_the_previous_prefix(bodies)
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == ["add", "lookup"]


async def test_the_prompt_prefix_is_byte_identical_across_a_resume() -> None:
    script = [call("lookup", key="a"), call("publish", text="hi"), "published it"]
    async with (
        FakeOpenAIServer(script) as srv,
        Runtime.open(":memory:", memory=NativeMemory()) as rt,
    ):
        await rt.memory.write(SCOPE, "MEMORY.md", "Ana likes tea.", expected_version=0)
        rt.hooks.register("before_prompt", clock, name="clock")
        agent = Agent(name="a", model=openai_model(srv), instructions=LONG, tools=[publish, lookup])
        blocked = await rt.run(agent, "publish a greeting", scope=SCOPE)
        assert blocked.status == "blocked" and blocked.gate is not None
        done = await rt.approve(blocked.gate.ref)
    assert done.status == "completed"
    bodies = srv.requests
    assert len(bodies) == 3
    assert_each_prompt_begins_with_the_previous_prefix(bodies)


async def test_a_memory_write_changes_only_the_suffix() -> None:
    script = [
        call("lookup", key="a"),
        "found a",
        call("lookup", key="b"),
        call("memory_write", target="MEMORY.md", content="Prefers mornings.", append=True),
        call("lookup", key="c"),
        "saved",
    ]
    async with (
        FakeOpenAIServer(script) as srv,
        Runtime.open(":memory:", memory=NativeMemory()) as rt,
    ):
        await rt.memory.write(SCOPE, "MEMORY.md", "Ana likes tea.", expected_version=0)
        agent = Agent(name="a", model=openai_model(srv), instructions=LONG, tools=[lookup])
        first = await rt.run(agent, "look a up", scope=SCOPE)
        r = await rt.run(agent, "remember mornings", scope=SCOPE, thread_id=first.thread_id)
    assert r.status == "completed"
    bodies = srv.requests
    assert_each_prompt_begins_with_the_previous_prefix(bodies)
    # The second run's memory comes after the first run's rows (system, 4 rows), which it
    # therefore never invalidates; the write shows in the next prompt.
    later = bodies[2:]
    assert all(memory_index(b["messages"]) == 5 for b in later)
    assert all(b["messages"][:5] == later[0]["messages"][:5] for b in later)
    remembered = [b["messages"][5]["content"] for b in later]
    assert "Prefers mornings." not in remembered[1] and "Prefers mornings." in remembered[2]


async def test_the_window_start_moves_in_steps_not_one_row_per_call() -> None:
    family = LoopFamily(id="short", context=WindowContext(window=12))
    script = [call("add", a=i, b=i) for i in range(20)] + ["done"]
    async with (
        FakeOpenAIServer(script) as srv,
        Runtime.open(":memory:", families=[family]) as rt,
    ):
        agent = Agent(name="a", model=openai_model(srv), tools=[add], family="short")
        r = await rt.run(agent, "add numbers", scope=SCOPE)
    assert r.status == "completed"
    starts = [json.dumps(b["messages"][0]) for b in srv.requests]
    moves = sum(1 for a, b in itertools.pairwise(starts) if a != b)
    # 41 rows through a 12-row window: a start per row would move ~30 times; steps of 6, ~5.
    assert 0 < moves <= 6
    assert all(len(b["messages"]) <= 12 for b in srv.requests)
    changed = [i + 1 for i, (a, b) in enumerate(itertools.pairwise(starts)) if a != b]
    for i in range(1, len(srv.requests)):
        if i not in changed:
            before = srv.requests[i - 1]["messages"]
            assert srv.requests[i]["messages"][: len(before)] == before


# -- cache markers -----------------------------------------------------------------------------


def marked(blocks: Sequence[Any]) -> list[Any]:
    return [b for b in blocks if isinstance(b, Mapping) and "cache_control" in b]


async def test_anthropic_breakpoints_mark_the_stable_prefix_and_the_last_stable_message() -> None:
    script = [call("lookup", key="a"), "done"]
    async with (
        FakeAnthropicServer(script) as srv,
        Runtime.open(":memory:", memory=NativeMemory()) as rt,
    ):
        await rt.memory.write(SCOPE, "MEMORY.md", "Ana likes tea.", expected_version=0)
        agent = Agent(name="a", model=anthropic_model(srv), instructions=LONG, tools=[lookup])
        r = await rt.run(agent, "look it up", scope=SCOPE)
    assert r.status == "completed"
    for body in srv.requests:
        assert marked(body["system"]) == body["system"]
        blocks = [b for m in body["messages"] for b in m["content"]]
        # The prompt's end is a breakpoint (no hook context follows it), and so is the end of
        # the earlier runs' rows, before this run's memory (none here: the thread is new).
        assert marked(blocks) == [blocks[-1]]
    assert r.usage.cache_read_tokens > 0


async def test_openai_requests_of_a_thread_share_one_prompt_cache_key() -> None:
    async with FakeOpenAIServer(["one", "two", "three"]) as srv, Runtime.open(":memory:") as rt:
        agent = Agent(name="a", model=openai_model(srv, server="openai"))
        first = await rt.run(agent, "hi", scope=SCOPE)
        await rt.run(agent, "again", scope=SCOPE, thread_id=first.thread_id)
        await rt.run(agent, "elsewhere", scope=SCOPE)
    keys = [b.get("prompt_cache_key") for b in srv.requests]
    assert keys[0] is not None and keys[0] == keys[1] != keys[2]
    assert first.thread_id not in str(keys[0])


async def test_prompt_cache_markers_are_off_by_a_flag() -> None:
    async with FakeOpenAIServer(["a", "b"]) as srv, Runtime.open(":memory:") as rt:
        off = openai_model(srv, server="openai", prompt_cache=False)
        await rt.run(Agent(name="a", model=off), "hi", scope=SCOPE)
        generic = openai_model(srv)  # an unknown compatible server gets no unknown field
        await rt.run(Agent(name="a", model=generic), "hi", scope=SCOPE)
    assert all("prompt_cache_key" not in b for b in srv.requests)
    async with FakeAnthropicServer(["a"]) as srv, Runtime.open(":memory:") as rt:
        model = anthropic_model(srv, prompt_cache=False)
        r = await rt.run(Agent(name="a", model=model, instructions=LONG), "hi", scope=SCOPE)
    assert "cache_control" not in json.dumps(srv.requests[0])
    assert r.usage.cache_read_tokens == r.usage.cache_write_tokens == 0
