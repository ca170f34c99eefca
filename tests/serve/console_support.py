"""What the console's HTTP tests share: two tenants, a served runtime with memory, a browser-like
client per person (cookies kept, redirects not followed), and the forms' CSRF tokens."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from reverie import Agent, Runtime, Scope, tool
from reverie.memory import NativeMemory
from reverie.serve import background_server, create_app
from reverie.testing import ScriptedModel, call, reply

ANA = Scope(tenant="acme", user="ana")
EVE = Scope(tenant="globex", user="eve")
ANA_TOKEN = "tok-console-ana-5d1e88"
EVE_TOKEN = "tok-console-eve-0b7a42"
TOKENS: Mapping[str, Scope] = {ANA_TOKEN: ANA, EVE_TOKEN: EVE}

TIMEOUT_S = 20.0

SCRIPT = "<script>document.title='pwned'</script>"
IMG = "<img src=x onerror=\"document.body.dataset.pwned='1'\">"
"""Markup a hostile model, tool or memory writer sends; the console must show it as text."""


@dataclass
class ConsoleServed:
    """A runtime served over real HTTP, with a console client per person."""

    rt: Runtime
    url: str
    ana: httpx.AsyncClient
    eve: httpx.AsyncClient
    anon: httpx.AsyncClient
    api_ana: httpx.AsyncClient
    api_eve: httpx.AsyncClient


def mailer(reply_text: str = "mail sent", *, to: str = "carol@example.com") -> Agent:
    """An agent whose one tool needs approval, then replies ``reply_text``."""

    @tool(effects={"write"}, needs_approval=True, idempotent=False)
    async def send_email(to: str) -> str:
        """Send an email."""
        return f"sent to {to}"

    model = ScriptedModel(lambda request: _next(request, to, reply_text))
    return Agent(name="mailer", model=model, tools=[send_email])


def _next(request: Any, to: str, reply_text: str) -> Any:
    """Call the tool once per turn, then reply (a function script: any number of turns)."""
    last = request.messages[-1]
    return reply(reply_text) if last.role == "tool" else call("send_email", to=to)


def echo() -> Agent:
    """An agent that replies at once, with an idempotent pure tool it never calls."""

    @tool(effects=set(), idempotent=True)
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    return Agent(name="echo", model=ScriptedModel(lambda r: reply("hello")), tools=[add])


@contextlib.asynccontextmanager
async def console_serving(*agents: Agent, **app_options: Any) -> AsyncIterator[ConsoleServed]:
    """An in-memory runtime with native memory, serving ``agents`` and the console."""
    async with Runtime.open(":memory:", memory=NativeMemory()) as rt:
        app = create_app(rt, agents={a.name: a for a in agents}, tokens=TOKENS, **app_options)
        async with (
            background_server(app) as url,
            _client(url) as ana,
            _client(url) as eve,
            _client(url) as anon,
            _client(url, ANA_TOKEN) as api_ana,
            _client(url, EVE_TOKEN) as api_eve,
        ):
            yield ConsoleServed(
                rt=rt, url=url, ana=ana, eve=eve, anon=anon, api_ana=api_ana, api_eve=api_eve
            )


def _client(url: str, token: str | None = None) -> httpx.AsyncClient:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(
        base_url=url, headers=headers, timeout=TIMEOUT_S, follow_redirects=False
    )


async def login(client: httpx.AsyncClient, token: str) -> None:
    """Log ``client`` in the way ``reverie dev``'s URL does (``?token=`` exchanged once)."""
    response = await client.get("/console/", params={"token": token})
    assert response.status_code == 303, response.text
    assert "token" not in response.headers["location"]


def csrf_of(html: str) -> str:
    """The CSRF token of the first form on a page."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, "no CSRF field on the page"
    return found.group(1)


async def csrf(client: httpx.AsyncClient, path: str = "/console/runs") -> str:
    """The client's session CSRF token, read from a page."""
    page = await client.get(path)
    assert page.status_code == 200, page.text
    return csrf_of(page.text)


async def blocked_run(api: httpx.AsyncClient, agent: str = "mailer") -> dict[str, Any]:
    """Start a run over the API and wait until it blocks on its gate; its ids and gate ref."""
    started = (await api.post("/v1/runs", json={"agent": agent, "input": "mail"})).json()
    run_id = started["run_id"]
    async with api.stream("GET", f"/v1/runs/{run_id}/events") as events:
        async for _ in events.aiter_lines():
            pass
    [gate] = (await api.get("/v1/gates")).json()["data"]
    return {"run_id": run_id, "thread_id": started["thread_id"], "ref": gate["ref"]}


async def settled(api: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """The run once it settles (its event stream ended), as the API shows it."""
    async with api.stream("GET", f"/v1/runs/{run_id}/events") as events:
        async for _ in events.aiter_lines():
            pass
    return dict((await api.get(f"/v1/runs/{run_id}")).json())
