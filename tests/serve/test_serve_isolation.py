"""A token's scope can never read or act on another scope's runs, threads or gates (DESIGN §16):
another owner's run id answers 404, exactly as a missing one, so existence does not leak."""

from __future__ import annotations

from reverie import Agent, tool
from reverie.testing import ScriptedModel, call, reply
from serve.serve_support import BOB, BOB_TOKEN, error_of, run_events, serving


def mailer(log: list[str]) -> Agent:
    @tool(effects={"write"}, needs_approval=True, idempotent=False)
    async def send_email(to: str) -> str:
        """Send an email."""
        log.append(f"send:{to}")
        return "sent"

    model = ScriptedModel([call("send_email", to="carol@x"), reply("mail sent")])
    return Agent(name="mailer", model=model, tools=[send_email])


async def test_ana_cannot_see_steer_cancel_or_resolve_bobs_run_or_gate() -> None:
    log: list[str] = []
    async with serving(mailer(log)) as srv:
        started = (await srv.bob.post("/v1/runs", json={"agent": "mailer", "input": "mail"})).json()
        run_id, thread_id = started["run_id"], started["thread_id"]
        await run_events(srv.bob, run_id)  # bob's run is now blocked on its gate
        [gate] = (await srv.bob.get("/v1/gates")).json()["data"]
        ref = gate["ref"]

        attempts = {
            "get": await srv.ana.get(f"/v1/runs/{run_id}"),
            "events": await srv.ana.get(f"/v1/runs/{run_id}/events"),
            "steer": await srv.ana.post(f"/v1/runs/{run_id}/steer", json={"text": "x"}),
            "follow_up": await srv.ana.post(f"/v1/runs/{run_id}/follow_up", json={"text": "x"}),
            "cancel": await srv.ana.post(f"/v1/runs/{run_id}/cancel"),
            "approve": await srv.ana.post(f"/v1/gates/{ref}/approve"),
            "deny": await srv.ana.post(f"/v1/gates/{ref}/deny", json={"reason": "no"}),
            "thread": await srv.ana.post(
                "/v1/runs", json={"agent": "mailer", "input": "hi", "thread_id": thread_id}
            ),
        }
        missing = {
            "get": await srv.ana.get("/v1/runs/run_does_not_exist"),
            "approve": await srv.ana.post("/v1/gates/g_does_not_exist/approve"),
            "thread": await srv.ana.post(
                "/v1/runs", json={"agent": "mailer", "input": "hi", "thread_id": "thr_nope"}
            ),
        }
        ana_runs = (await srv.ana.get("/v1/runs")).json()["data"]
        ana_gates = (await srv.ana.get("/v1/gates?status=all")).json()["data"]
        bobs_view = (await srv.bob.get(f"/v1/runs/{run_id}")).json()
        bobs_gates = (await srv.bob.get("/v1/gates")).json()["data"]

    for name, response in attempts.items():
        assert response.status_code == 404, (name, response.text)
        error = error_of(response)
        assert "not found" in error["message"], name
        assert BOB.user not in response.text  # nothing about the owner leaks
    # The same answer as for ids that do not exist at all.
    assert error_of(attempts["get"])["code"] == error_of(missing["get"])["code"]
    assert error_of(attempts["approve"])["code"] == error_of(missing["approve"])["code"]
    assert error_of(attempts["thread"])["code"] == error_of(missing["thread"])["code"]
    assert ana_runs == [] and ana_gates == []
    # Bob's run and gate are untouched.
    assert bobs_view["status"] == "blocked"
    assert [g["ref"] for g in bobs_gates] == [ref]
    assert log == []


async def test_chat_completion_runs_belong_to_the_caller_only() -> None:
    agent = Agent(name="helper", model=ScriptedModel([reply("for bob")]))
    async with serving(agent) as srv:
        async with srv.openai(BOB_TOKEN) as bob_client:
            completion = await bob_client.chat.completions.create(
                model="helper", messages=[{"role": "user", "content": "hi"}]
            )
        run_id = completion.id.removeprefix("chatcmpl-")
        bob_sees = await srv.bob.get(f"/v1/runs/{run_id}")
        ana_sees = await srv.ana.get(f"/v1/runs/{run_id}")
        ana_lists = (await srv.ana.get("/v1/runs")).json()["data"]

    assert bob_sees.status_code == 200 and bob_sees.json()["text"] == "for bob"
    assert ana_sees.status_code == 404
    assert ana_lists == []
