"""Retry safety: failed turns say ``x-should-retry: false``, and an ``Idempotency-Key`` makes a
client's repeat of a request get the run the first attempt started, never a second run."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI

from reverie import Agent, tool
from reverie.testing import ScriptedModel, call, error, reply
from serve.serve_support import ANA_TOKEN, TIMEOUT_S, Served, error_of, serving, sse_data

REPLY = "1 + 2 = 3."


def adder(log: list[str], *script: Any) -> Agent:
    """An agent whose ``add`` tool records each call in ``log``."""

    @tool(effects=set())
    def add(a: int, b: int) -> int:
        """Add two integers."""
        log.append(f"add:{a}+{b}")
        return a + b

    steps = list(script) or [call("add", a=1, b=2), reply(REPLY)]
    return Agent(name="calc", model=ScriptedModel(steps), instructions="Add.", tools=[add])


def retrying_client(srv: Served, **options: Any) -> AsyncOpenAI:
    """The official SDK with its default retry policy (two retries)."""
    return AsyncOpenAI(base_url=f"{srv.url}/v1", api_key=ANA_TOKEN, **options)


async def runs_of(srv: Served) -> list[dict[str, Any]]:
    response = await srv.ana.get("/v1/runs")
    assert response.status_code == 200
    return list(response.json()["data"])


HI = [{"role": "user", "content": "What is 1 + 2?"}]


async def test_a_failed_turn_says_do_not_retry_so_the_sdk_makes_one_run_and_one_tool_call() -> None:
    log: list[str] = []
    agent = adder(log, call("add", a=1, b=2), error("internal"))
    async with serving(agent) as srv, retrying_client(srv) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="calc", messages=HI)  # type: ignore[arg-type]
        runs = await runs_of(srv)

    assert caught.value.status_code == 502
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert log == ["add:1+2"]
    assert len(runs) == 1


async def test_every_error_response_says_whether_to_retry() -> None:
    async with serving(adder([])) as srv:
        missing = await srv.ana.post("/v1/chat/completions", json={"model": "nope"})
        unauthenticated = await srv.anon.get("/v1/runs")
    assert missing.status_code == 400 and missing.headers["x-should-retry"] == "false"
    assert unauthenticated.headers["x-should-retry"] == "false"


async def test_the_same_idempotency_key_returns_the_same_completion_never_a_second_run() -> None:
    log: list[str] = []
    async with serving(adder(log)) as srv, retrying_client(srv) as client:
        key = {"Idempotency-Key": "order-17"}
        first = await client.chat.completions.create(
            model="calc",
            messages=HI,  # type: ignore[arg-type]
            extra_headers=key,
        )
        again = await client.chat.completions.create(
            model="calc",
            messages=HI,  # type: ignore[arg-type]
            extra_headers=key,
        )
        runs = await runs_of(srv)

    assert again.id == first.id
    assert again.choices[0].message.content == first.choices[0].message.content == REPLY
    assert log == ["add:1+2"]
    assert len(runs) == 1


async def test_the_same_idempotency_key_after_a_failure_returns_that_failure_not_a_run() -> None:
    log: list[str] = []
    agent = adder(log, call("add", a=1, b=2), error("internal"), reply("a second run"))
    async with serving(agent) as srv, retrying_client(srv) as client:
        caught: list[openai.APIStatusError] = []
        for _ in range(2):
            with pytest.raises(openai.APIStatusError) as failure:
                await client.chat.completions.create(
                    model="calc",
                    messages=HI,  # type: ignore[arg-type]
                    extra_headers={"Idempotency-Key": "k-fail"},
                )
            caught.append(failure.value)
        runs = await runs_of(srv)

    ids = {c.response.headers["x-reverie-run-id"] for c in caught}
    assert len(ids) == 1 and [c.status_code for c in caught] == [502, 502]
    assert log == ["add:1+2"]
    assert len(runs) == 1


async def test_an_sdk_retry_after_a_timeout_joins_the_run_of_the_first_attempt() -> None:
    log: list[str] = []
    release = asyncio.Event()
    attempts: list[httpx.Request] = []

    @tool(effects=set())
    async def slow_add(a: int, b: int) -> int:
        """Add two integers, slowly."""
        log.append(f"add:{a}+{b}")
        await release.wait()
        return a + b

    model = ScriptedModel([call("slow_add", a=1, b=2), reply(REPLY)])
    agent = Agent(name="calc", model=model, instructions="Add.", tools=[slow_add])

    async def on_request(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            attempts.append(request)
            if len(attempts) >= 2:  # the SDK retried: let the first attempt's run go on
                release.set()

    async with (
        serving(agent) as srv,
        httpx.AsyncClient(event_hooks={"request": [on_request]}) as http,
        retrying_client(srv, http_client=http, timeout=2.0, max_retries=5) as client,
    ):
        completion = await client.chat.completions.create(
            model="calc",
            messages=HI,  # type: ignore[arg-type]
            extra_headers={"Idempotency-Key": "k-timeout"},
        )
        runs = await runs_of(srv)

    assert len(attempts) >= 2
    assert completion.choices[0].message.content == REPLY
    assert log == ["add:1+2"]
    assert len(runs) == 1


async def test_a_streamed_completion_with_a_used_key_streams_the_same_run() -> None:
    log: list[str] = []
    async with serving(adder(log)) as srv:
        body = {"model": "calc", "messages": HI, "stream": True}
        headers = {"Idempotency-Key": "k-stream"}
        first = await sse_data(srv.ana, "POST", "/v1/chat/completions", json=body, headers=headers)
        again = await sse_data(srv.ana, "POST", "/v1/chat/completions", json=body, headers=headers)
        runs = await runs_of(srv)

    def text(data: list[str]) -> str:
        chunks = [json.loads(d) for d in data if d != "[DONE]"]
        deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
        return "".join(d.get("content") or "" for d in deltas)

    assert text(first) == text(again) == REPLY
    assert again[-1] == "[DONE]"
    assert log == ["add:1+2"] and len(runs) == 1


async def test_an_idempotency_key_reused_with_another_body_is_422() -> None:
    async with serving(adder([])) as srv:
        headers = {"Idempotency-Key": "k-body"}
        ok = await srv.ana.post(
            "/v1/runs", json={"agent": "calc", "input": "1 + 2?"}, headers=headers
        )
        other = await srv.ana.post(
            "/v1/runs", json={"agent": "calc", "input": "2 + 2?"}, headers=headers
        )
    assert ok.status_code == 201
    assert other.status_code == 422
    assert error_of(other)["code"] == "idempotency_key_reused"


async def test_the_same_idempotency_key_on_post_runs_returns_the_same_run() -> None:
    log: list[str] = []
    async with serving(adder(log)) as srv:
        body = {"agent": "calc", "input": "1 + 2?"}
        headers = {"Idempotency-Key": "k-runs"}
        first = await srv.ana.post("/v1/runs", json=body, headers=headers)
        run_id = first.json()["run_id"]
        handle = srv.rt.attach(run_id)
        if handle is not None:
            async with asyncio.timeout(TIMEOUT_S):
                await handle.result()
        again = await srv.ana.post("/v1/runs", json=body, headers=headers)
        bobs = await srv.bob.post("/v1/runs", json=body, headers=headers)
        runs = await runs_of(srv)

    assert first.status_code == again.status_code == 201
    assert again.json()["run_id"] == run_id and again.json()["status"] == "completed"
    # Keys are per owner: the same key of another caller starts that caller's own run.
    assert bobs.status_code == 201 and bobs.json()["run_id"] != run_id
    assert len(runs) == 1 and log == ["add:1+2"]


@pytest.mark.parametrize("key", ["", "x" * 256])
async def test_an_invalid_idempotency_key_is_400(key: str) -> None:
    async with serving(adder([])) as srv:
        response = await srv.ana.post(
            "/v1/runs",
            json={"agent": "calc", "input": "hi"},
            headers={"Idempotency-Key": key},
        )
    assert response.status_code == 400
    assert error_of(response)["param"] == "Idempotency-Key"
