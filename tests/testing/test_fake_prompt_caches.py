"""The fake servers simulate the providers' prompt caches (reverie.testing.prompt_cache)."""

from __future__ import annotations

from typing import Any

import httpx

from reverie.testing import FakeAnthropicServer, FakeOpenAIServer

LONG = "x" * 6000  # ~1,500 tokens in the fakes' measure (characters / 4)


def chat(*contents: str) -> dict[str, Any]:
    messages = [{"role": "system", "content": LONG}]
    messages += [{"role": "user", "content": c} for c in contents]
    return {"model": "m", "messages": messages}


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(url, json=body, headers={"authorization": "Bearer k"}, timeout=30)
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert isinstance(usage, dict)
    return usage


def test_the_fake_openai_server_caches_prefixes_past_1024_tokens_in_128_token_steps() -> None:
    with FakeOpenAIServer(["a", "b", "c", "d"]) as srv:
        url = f"{srv.base_url}/chat/completions"
        first = post(url, chat("hello"))
        second = post(url, chat("hello", "and more"))
        other_tools = post(url, {**chat("hello", "x"), "tools": [{"type": "function"}]})
        short = post(url, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 1024 and cached % 128 == 0 and cached <= second["prompt_tokens"]
    assert other_tools["prompt_tokens_details"]["cached_tokens"] == 0
    assert short["prompt_tokens_details"]["cached_tokens"] == 0


def test_the_fake_openai_server_without_a_prompt_cache_reports_none() -> None:
    with FakeOpenAIServer(["a", "b"], prompt_cache=False) as srv:
        url = f"{srv.base_url}/chat/completions"
        post(url, chat("hello"))
        assert "prompt_tokens_details" not in post(url, chat("hello", "more"))


def messages_body(*, marks: bool, system: str = LONG, model: str = "claude-x") -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": system}
    if marks:
        block["cache_control"] = {"type": "ephemeral"}
    return {
        "model": model,
        "max_tokens": 10,
        "system": [block],
        "messages": [{"role": "user", "content": "hello"}],
    }


def test_the_fake_anthropic_server_caches_only_at_breakpoints_above_the_minimum() -> None:
    with FakeAnthropicServer(list("abcdefg")) as srv:
        url = f"{srv.root_url}/v1/messages"
        unmarked = [post(url, messages_body(marks=False)) for _ in range(2)]
        written = post(url, messages_body(marks=True))
        read = post(url, messages_body(marks=True))
        small = [post(url, messages_body(marks=True, system="short")) for _ in range(2)]
        haiku = post(url, messages_body(marks=True, model="claude-haiku-4-5"))
    for usage in unmarked:
        assert "cache_read_input_tokens" not in usage
    assert (
        written["cache_creation_input_tokens"] >= 1024 and written["cache_read_input_tokens"] == 0
    )
    assert read["cache_read_input_tokens"] == written["cache_creation_input_tokens"]
    assert read["cache_creation_input_tokens"] == 0
    # input_tokens is the rest: what neither came from nor went to the cache.
    assert read["input_tokens"] == written["input_tokens"]
    assert all(u["cache_read_input_tokens"] == u["cache_creation_input_tokens"] == 0 for u in small)
    assert haiku["cache_creation_input_tokens"] == 0  # under Haiku's 2,048-token minimum
