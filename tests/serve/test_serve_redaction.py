"""Secrets never leave the server: not in a gate's arguments (however deep), not in an error
body, whatever the client put in the path (docs/http.md)."""

from __future__ import annotations

from typing import Any

from reverie import Agent, tool
from reverie.testing import ScriptedModel, call, reply
from serve.serve_support import ANA_TOKEN, BOB_TOKEN, error_of, run_events, serving


def syncer(accounts: list[dict[str, Any]]) -> Agent:
    @tool(effects={"write"}, needs_approval=True)
    async def sync_accounts(accounts: list[dict[str, Any]]) -> str:
        """Sync accounts."""
        return "synced"

    model = ScriptedModel([call("sync_accounts", accounts=accounts), reply("done")])
    return Agent(name="syncer", model=model, tools=[sync_accounts])


async def test_a_password_inside_a_list_is_masked_in_every_gate_view() -> None:
    accounts = [{"name": "main", "password": "hunter2-main"}]
    async with serving(syncer(accounts)) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "syncer", "input": "go"})).json()
        await run_events(srv.ana, started["run_id"])
        run = await srv.ana.get(f"/v1/runs/{started['run_id']}")
        gates = await srv.ana.get("/v1/gates")
    for response in (run, gates):
        assert response.status_code == 200, response.text
        assert "hunter2-main" not in response.text
    [gate] = gates.json()["data"]
    masked = {"accounts": [{"name": "main", "password": "[redacted]"}]}
    assert gate["arguments"] == masked
    assert run.json()["gate"]["arguments"] == masked


async def test_a_bearer_token_in_the_path_is_not_echoed_in_the_404() -> None:
    agent = Agent(name="helper", model=ScriptedModel([reply("hi")]))
    async with serving(agent) as srv:
        own = await srv.ana.get(f"/v1/{ANA_TOKEN}")
        other = await srv.ana.get(f"/v1/runs/x/{BOB_TOKEN}/more")
        method = await srv.ana.delete(f"/v1/{BOB_TOKEN}")
    for response, token in ((own, ANA_TOKEN), (other, BOB_TOKEN), (method, BOB_TOKEN)):
        assert response.status_code in (404, 405), response.text
        assert token not in response.text
        assert error_of(response)["code"] in ("not_found", "method_not_allowed")
    assert error_of(own)["message"] == "no route GET /v1/***"
