"""Listings: a chat completion's run names the served agent; timestamps are ISO 8601 UTC in the
HTTP API and the CLI's JSON; list items carry what ``GET /v1/runs/{id}`` shows."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from reverie import Agent
from reverie.testing import ScriptedModel, reply
from serve.serve_support import ANA, serving
from serve.test_serve_runs import mailer

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def assert_iso_utc(value: object) -> None:
    """``value`` is an ISO 8601 UTC timestamp with milliseconds, of today."""
    assert isinstance(value, str) and ISO_UTC.match(value), value
    parsed = datetime.fromisoformat(value)
    assert parsed.utcoffset() is not None and parsed.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert abs((datetime.now(UTC) - parsed).total_seconds()) < 24 * 3600


async def test_listings_name_the_agent_that_served_a_chat_completion() -> None:
    agent = Agent(name="calc", model=ScriptedModel([reply("4")]))
    async with serving(agent) as srv, srv.openai() as client:
        completion = await client.chat.completions.create(
            model="calc", messages=[{"role": "user", "content": "2 + 2?"}]
        )
        [listed] = (await srv.ana.get("/v1/runs")).json()["data"]
        shown = (await srv.ana.get(f"/v1/runs/{listed['run_id']}")).json()
    assert completion.id == f"chatcmpl-{listed['run_id']}"
    assert listed["agent"] == shown["agent"] == "calc"
    assert listed["profile"] == "unbound"


async def test_run_and_gate_timestamps_are_iso_8601_utc() -> None:
    async with serving(mailer([])) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "mailer", "input": "mail"})).json()
        handle = srv.rt.attach(started["run_id"])
        if handle is not None:
            await handle.result()
        run = (await srv.ana.get(f"/v1/runs/{started['run_id']}")).json()
        [gate] = (await srv.ana.get("/v1/gates")).json()["data"]
    assert_iso_utc(run["created_at"])
    assert_iso_utc(run["updated_at"])
    assert_iso_utc(gate["created_at"])
    assert gate["resolved_at"] is None


async def test_list_items_carry_text_exit_usage_and_gate() -> None:
    done_agent = Agent(name="helper", model=ScriptedModel([reply("all done")]))
    async with serving(done_agent, mailer([])) as srv:
        done = await srv.rt.run(done_agent, "hi", scope=ANA)
        started = (await srv.ana.post("/v1/runs", json={"agent": "mailer", "input": "mail"})).json()
        handle = srv.rt.attach(started["run_id"])
        if handle is not None:
            await handle.result()
        items = {r["run_id"]: r for r in (await srv.ana.get("/v1/runs")).json()["data"]}
        details = {i: (await srv.ana.get(f"/v1/runs/{i}")).json() for i in items}
    assert items == details  # a list item is the run as GET /v1/runs/{id} shows it
    completed, blocked = items[done.run_id], items[started["run_id"]]
    assert completed["text"] == "all done" and completed["exit"]["status"] == "completed"
    assert completed["usage"]["model_calls"] == 1 and completed["gate"] is None
    assert blocked["status"] == "blocked" and blocked["gate"]["tool"] == "send_email"
