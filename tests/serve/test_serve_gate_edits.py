"""``POST /v1/gates/{id}/approve`` with edited arguments (DESIGN §20)."""

from __future__ import annotations

from typing import Any

from reverie import Agent, tool
from reverie.core.canonical import digest
from reverie.testing import ScriptedModel, call, reply
from serve.serve_support import error_of, run_events, serving


def payer(log: list[dict[str, Any]], *, editable: bool = True) -> Agent:
    @tool(effects={"write"}, needs_approval=True, editable=editable)
    async def pay(to: str, amount: int) -> str:
        """Pay an amount to someone."""
        log.append({"to": to, "amount": amount})
        return f"paid {amount} to {to}"

    model = ScriptedModel([call("pay", to="bob", amount=500), reply("done")])
    return Agent(name="payer", model=model, tools=[pay])


async def test_approve_over_http_with_edited_arguments_runs_the_edit_and_records_the_owner() -> (
    None
):
    log: list[dict[str, Any]] = []
    async with serving(payer(log)) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "payer", "input": "pay"})).json()
        await run_events(srv.ana, started["run_id"])
        [gate] = (await srv.ana.get("/v1/gates")).json()["data"]
        approved = await srv.ana.post(
            f"/v1/gates/{gate['ref']}/approve", json={"arguments": {"to": "bob", "amount": 5}}
        )
        assert approved.status_code == 200, approved.text
        await run_events(srv.ana, started["run_id"])
        [listed] = (await srv.ana.get("/v1/gates?status=approved")).json()["data"]
    assert log == [{"to": "bob", "amount": 5}]
    assert listed["resolved_by"] == "acme/ana"
    assert listed["edited_arguments"] == {"to": "bob", "amount": 5}
    assert listed["shown_digest"] == digest({"to": "bob", "amount": 500})
    assert listed["approved_digest"] == digest({"to": "bob", "amount": 5})
    assert listed["resolved_at"] is not None


async def test_edited_arguments_that_do_not_fit_are_422_and_the_gate_stays_pending() -> None:
    log: list[dict[str, Any]] = []
    async with serving(payer(log)) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "payer", "input": "pay"})).json()
        await run_events(srv.ana, started["run_id"])
        [gate] = (await srv.ana.get("/v1/gates")).json()["data"]
        bad = await srv.ana.post(
            f"/v1/gates/{gate['ref']}/approve", json={"arguments": {"to": "bob", "amount": "x"}}
        )
        pending = (await srv.ana.get("/v1/gates")).json()["data"]
    assert bad.status_code == 422, bad.text
    assert error_of(bad)["code"] == "invalid_gate_edit"
    assert [g["ref"] for g in pending] == [gate["ref"]]
    assert log == []


async def test_a_tool_that_is_not_editable_answers_422_over_http_and_stays_pending() -> None:
    log: list[dict[str, Any]] = []
    async with serving(payer(log, editable=False)) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "payer", "input": "pay"})).json()
        await run_events(srv.ana, started["run_id"])
        [gate] = (await srv.ana.get("/v1/gates")).json()["data"]
        refused = await srv.ana.post(
            f"/v1/gates/{gate['ref']}/approve", json={"arguments": {"to": "bob", "amount": 1}}
        )
        pending = (await srv.ana.get("/v1/gates")).json()["data"]
    assert refused.status_code == 422, refused.text
    assert "editable=False" in error_of(refused)["message"]
    assert [g["status"] for g in pending] == ["pending"]
    assert log == []


async def test_a_deny_with_arguments_is_422() -> None:
    async with serving(payer([])) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "payer", "input": "pay"})).json()
        await run_events(srv.ana, started["run_id"])
        [gate] = (await srv.ana.get("/v1/gates")).json()["data"]
        bad = await srv.ana.post(
            f"/v1/gates/{gate['ref']}/deny", json={"arguments": {"to": "bob", "amount": 1}}
        )
        pending = (await srv.ana.get("/v1/gates")).json()["data"]
    assert bad.status_code == 422 and error_of(bad)["param"] == "arguments"
    assert [g["status"] for g in pending] == ["pending"]
