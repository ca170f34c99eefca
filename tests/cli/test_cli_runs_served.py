"""Runs that ``reverie serve``'s chat completions made are listed under the served agent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import httpx
from typer.testing import Result

from reverie import Agent, Runtime, Scope
from reverie.serve import background_server, create_app
from reverie.testing import ScriptedModel, reply

TOKEN = "tok-ana-4b1e"


async def _one_chat_completion(store: str) -> str:
    agent = Agent(name="helpdesk", model=ScriptedModel([reply("Hi there.")]))
    async with Runtime.open(store) as rt:
        app = create_app(rt, agents={"helpdesk": agent}, tokens={TOKEN: Scope.local("ana")})
        async with (
            background_server(app) as url,
            httpx.AsyncClient(base_url=url, timeout=20.0) as client,
        ):
            response = await client.post(
                "/v1/chat/completions",
                headers={"authorization": f"Bearer {TOKEN}"},
                json={"model": "helpdesk", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert response.status_code == 200, response.text
            return str(response.headers["x-reverie-run-id"])


def test_runs_list_shows_the_served_agent_of_a_chat_completion(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'served.db'}"
    run_id = asyncio.run(_one_chat_completion(store))

    table = cli("runs", "list", "--store", store)
    listed = cli("runs", "list", "--store", store, "--json")
    shown = cli("runs", "show", "--store", store, run_id)

    assert table.exit_code == 0, table.output
    row = next(line for line in table.stdout.splitlines() if run_id in line)
    assert "helpdesk" in row and "unbound:" not in row
    assert [run["agent"] for run in json.loads(listed.stdout)] == ["helpdesk"]
    assert "agent:   helpdesk" in shown.stdout
