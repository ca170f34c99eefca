"""What the HTTP tests share: two owners and their tokens, a served runtime, SSE reading."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from openai import AsyncOpenAI

from reverie import Agent, Runtime, Scope
from reverie.serve import background_server, create_app

ANA = Scope(tenant="acme", user="ana")
BOB = Scope(tenant="acme", user="bob")
ANA_TOKEN = "tok-ana-7f3c9e2b"
BOB_TOKEN = "tok-bob-91d04a6e"
TOKENS: Mapping[str, Scope] = {ANA_TOKEN: ANA, BOB_TOKEN: BOB}

TIMEOUT_S = 20.0
"""No HTTP exchange in these tests should take anywhere near this long."""


@dataclass
class Served:
    """A runtime served over real HTTP on 127.0.0.1, with a client per caller."""

    rt: Runtime
    url: str
    ana: httpx.AsyncClient
    bob: httpx.AsyncClient
    anon: httpx.AsyncClient
    """No ``Authorization`` header."""

    def openai(self, token: str = ANA_TOKEN) -> AsyncOpenAI:
        """The official SDK pointed at the server (use as ``async with``)."""
        return AsyncOpenAI(
            base_url=f"{self.url}/v1", api_key=token, max_retries=0, timeout=TIMEOUT_S
        )


@contextlib.asynccontextmanager
async def serving(*agents: Agent) -> AsyncIterator[Served]:
    """An in-memory runtime serving ``agents`` with the two owners' tokens."""
    async with Runtime.open(":memory:") as rt:
        app = create_app(rt, agents={a.name: a for a in agents}, tokens=TOKENS)
        async with (
            background_server(app) as url,
            _client(url, ANA_TOKEN) as ana,
            _client(url, BOB_TOKEN) as bob,
            _client(url, None) as anon,
        ):
            yield Served(rt=rt, url=url, ana=ana, bob=bob, anon=anon)


def _client(url: str, token: str | None) -> httpx.AsyncClient:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=url, headers=headers, timeout=TIMEOUT_S)


async def sse_data(client: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> list[str]:
    """Every ``data:`` payload of an SSE response, in order, until the server closes it."""
    out: list[str] = []
    async with asyncio.timeout(TIMEOUT_S), client.stream(method, path, **kwargs) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                out.append(line[len("data: ") :])
    return out


async def run_events(client: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    """The typed events ``GET /v1/runs/{id}/events`` streams (JSON objects)."""
    return [json.loads(d) for d in await sse_data(client, "GET", f"/v1/runs/{run_id}/events")]


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The OpenAI-style error object of a response (asserting its shape)."""
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    expected_type = "server_error" if response.status_code >= 500 else "invalid_request_error"
    assert error["type"] == expected_type
    assert "Traceback" not in error["message"]
    return dict(error)
