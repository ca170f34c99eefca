"""reverie's own API over real HTTP: ``/v1/runs`` and ``/v1/gates``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reverie import Agent, tool
from reverie.testing import ScriptedModel, call, reply
from serve.serve_support import ANA, error_of, run_events, serving


def mailer(log: list[str], *script: Any, release: asyncio.Event | None = None) -> Agent:
    """An agent whose ``send_email`` needs approval (default: mail bob, then reply); with
    ``release``, an approved send waits for it (the resumed segment stays live meanwhile)."""

    @tool(effects={"write"}, needs_approval=True, idempotent=False)
    async def send_email(to: str, body: str) -> str:
        """Send an email."""
        if release is not None:
            await release.wait()
        log.append(f"send:{to}")
        return f"sent to {to}"

    steps = list(script) or [call("send_email", to="bob@x", body="hi"), reply("mail sent")]
    return Agent(name="mailer", model=ScriptedModel(steps), tools=[send_email])


def waiter(release: asyncio.Event, *script: Any) -> Agent:
    """An agent whose ``lookup`` tool waits for ``release`` (the run stays live meanwhile)."""

    @tool(effects={"read"})
    async def lookup(key: str) -> str:
        """Look a key up."""
        await release.wait()
        return f"value of {key}"

    steps = list(script) or [call("lookup", key="k"), reply("The value is known.")]
    return Agent(name="waiter", model=ScriptedModel(steps), tools=[lookup])


async def test_start_get_and_list_a_run() -> None:
    agent = Agent(name="helper", model=ScriptedModel([reply("hello there"), reply("again")]))
    async with serving(agent) as srv:
        started = await srv.ana.post("/v1/runs", json={"agent": "helper", "input": "hi"})
        assert started.status_code == 201, started.text
        body = started.json()
        assert set(body) == {"run_id", "thread_id", "status"}
        assert body["status"] in ("queued", "running")
        assert started.headers["location"] == f"/v1/runs/{body['run_id']}"

        events = await run_events(srv.ana, body["run_id"])
        run = (await srv.ana.get(f"/v1/runs/{body['run_id']}")).json()

        again = await srv.ana.post(
            "/v1/runs", json={"agent": "helper", "input": "more", "thread_id": body["thread_id"]}
        )
        assert again.status_code == 201
        assert again.json()["thread_id"] == body["thread_id"]  # the same conversation
        await run_events(srv.ana, again.json()["run_id"])
        listed = (await srv.ana.get("/v1/runs")).json()
        completed = (await srv.ana.get("/v1/runs?status=completed&limit=1")).json()

    assert events[-1]["kind"] == "run_finished" and events[-1]["status"] == "completed"
    assert run["status"] == "completed" and run["text"] == "hello there"
    assert run["agent"] == "helper" and run["profile"] == "interactive"
    assert run["exit"]["status"] == "completed" and run["gate"] is None
    assert set(run["usage"]) >= {"model_calls", "input_tokens", "output_tokens", "usd"}
    assert listed["object"] == "list"
    assert [r["run_id"] for r in listed["data"]] == [again.json()["run_id"], body["run_id"]]
    assert len(completed["data"]) == 1


async def test_events_stream_the_live_segment_as_typed_json_until_the_run_ends() -> None:
    release = asyncio.Event()
    async with serving(waiter(release)) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "waiter", "input": "go"})).json()
        reading = asyncio.ensure_future(run_events(srv.ana, started["run_id"]))
        await asyncio.sleep(0.05)
        assert not reading.done()  # the run waits in its tool: the stream stays open
        running = (await srv.ana.get(f"/v1/runs/{started['run_id']}")).json()
        release.set()
        events = await reading

    assert running["status"] == "running" and running["text"] is None and running["exit"] is None
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "run_started"
    assert "model_request" in kinds and "text_delta" in kinds and "checkpoint" in kinds
    assert kinds.index("tool_started") < kinds.index("tool_finished") < kinds.index("run_finished")
    assert kinds[-1] == "run_finished"
    finished = [e for e in events if e["kind"] == "tool_finished"]
    assert [(e["tool"], e["outcome"]) for e in finished] == [("lookup", "completed")]
    assert all(e["run_id"] == started["run_id"] for e in events)
    text = "".join(e["text"] for e in events if e["kind"] == "text_delta")
    assert text == "The value is known."
    assert events[-1]["status"] == "completed"
    assert events[-1]["exit"]["status"] == "completed"


async def test_events_of_an_ended_run_replay_its_last_segment_from_the_store() -> None:
    agent = Agent(name="helper", model=ScriptedModel([reply("done")]))
    async with serving(agent) as srv:
        result = await srv.rt.run(agent, "hi", scope=ANA)
        events = await run_events(srv.ana, result.run_id)
    assert events[0] == {"kind": "run_started", "run_id": result.run_id, "resumed": False}
    assert "assistant_message" in [e["kind"] for e in events]
    assert events[-1]["kind"] == "run_finished" and events[-1]["status"] == "completed"
    assert events[-1]["exit"]["status"] == "completed"


async def test_a_gate_is_listed_and_approved_over_http_and_the_run_completes() -> None:
    log: list[str] = []
    release = asyncio.Event()
    async with serving(mailer(log, release=release)) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "mailer", "input": "mail"})).json()
        blocked_events = await run_events(srv.ana, started["run_id"])
        blocked = (await srv.ana.get(f"/v1/runs/{started['run_id']}")).json()
        gates = (await srv.ana.get("/v1/gates")).json()["data"]
        assert log == []  # nothing was sent before the approval

        approved = await srv.ana.post(f"/v1/gates/{gates[0]['ref']}/approve")
        # The answer comes once the run has resumed: its events follow the new segment.
        reading = asyncio.ensure_future(run_events(srv.ana, started["run_id"]))
        await asyncio.sleep(0.05)
        assert not reading.done()
        release.set()
        resumed_events = await reading
        done = (await srv.ana.get(f"/v1/runs/{started['run_id']}")).json()
        again = await srv.ana.post(f"/v1/gates/{gates[0]['ref']}/approve")
        denied_after = await srv.ana.post(
            f"/v1/gates/{gates[0]['ref']}/deny", json={"reason": "too late"}
        )
        pending = (await srv.ana.get("/v1/gates")).json()["data"]
        resolved = (await srv.ana.get("/v1/gates?status=all")).json()["data"]

    assert blocked_events[-1]["kind"] == "run_finished"
    assert blocked_events[-1]["status"] == "blocked"
    assert "gate_opened" in [e["kind"] for e in blocked_events]
    assert blocked["status"] == "blocked"
    assert blocked["gate"]["tool"] == "send_email"
    assert blocked["gate"]["arguments"] == {"to": "bob@x", "body": "hi"}
    assert [(g["tool"], g["status"], g["run_id"]) for g in gates] == [
        ("send_email", "pending", started["run_id"])
    ]
    assert approved.status_code == 200, approved.text
    assert approved.json()["gate"]["status"] == "approved"
    assert approved.json()["run"]["run_id"] == started["run_id"]
    assert resumed_events[0]["kind"] == "run_started"
    assert resumed_events[0]["resumed"] is True
    assert [e["kind"] for e in resumed_events][-1] == "run_finished"
    assert ("send_email", "completed") in [
        (e["tool"], e["outcome"]) for e in resumed_events if e["kind"] == "tool_finished"
    ]
    assert done["status"] == "completed" and done["text"] == "mail sent"
    assert log == ["send:bob@x"]
    # A gate resolves once: the second resolution is a conflict, whichever it is.
    assert again.status_code == 409 and error_of(again)["code"] == "gate_resolved"
    assert denied_after.status_code == 409
    assert "already approved" in error_of(denied_after)["message"]
    assert pending == []
    assert [g["status"] for g in resolved] == ["approved"]


async def test_the_run_of_an_approve_or_deny_answer_has_the_one_shape_of_a_run() -> None:
    log: list[str] = []
    release = asyncio.Event()
    script = [
        call("send_email", to="bob@x", body="hi"),
        call("send_email", to="eve@x", body="hi"),
        reply("done"),
    ]
    async with serving(mailer(log, *script, release=release)) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "mailer", "input": "mail"})).json()
        run_id = started["run_id"]
        await run_events(srv.ana, run_id)
        [first] = (await srv.ana.get("/v1/gates")).json()["data"]
        approved = (await srv.ana.post(f"/v1/gates/{first['ref']}/approve")).json()
        shown = (await srv.ana.get(f"/v1/runs/{run_id}")).json()
        release.set()
        await run_events(srv.ana, run_id)
        [second] = (await srv.ana.get("/v1/gates")).json()["data"]
        denied = (await srv.ana.post(f"/v1/gates/{second['ref']}/deny", json={})).json()
        await run_events(srv.ana, run_id)
        final = (await srv.ana.get(f"/v1/runs/{run_id}")).json()
    assert set(approved["run"]) == set(shown) == set(denied["run"]) == set(final)
    assert {"text", "output", "exit", "usage", "gate"} <= set(approved["run"])
    assert approved["run"]["run_id"] == run_id and approved["run"]["status"] == "running"
    assert approved["run"]["text"] is None and approved["run"]["gate"] is None
    assert final["status"] == "completed" and final["text"] == "done"


async def test_a_gate_denied_over_http_tells_the_model_and_the_run_goes_on() -> None:
    log: list[str] = []
    agent = mailer(log)
    async with serving(agent) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "mailer", "input": "mail"})).json()
        await run_events(srv.ana, started["run_id"])
        [gate] = (await srv.ana.get("/v1/gates")).json()["data"]
        denied = await srv.ana.post(f"/v1/gates/{gate['ref']}/deny", json={"reason": "not today"})
        await run_events(srv.ana, started["run_id"])
        done = (await srv.ana.get(f"/v1/runs/{started['run_id']}")).json()

    assert denied.status_code == 200
    assert denied.json()["gate"]["status"] == "denied"
    assert denied.json()["gate"]["reason"] == "not today"
    assert done["status"] == "completed"
    assert log == []
    assert isinstance(agent.model, ScriptedModel)
    told = [m.content for m in agent.model.requests[-1].messages if m.role == "tool"]
    assert any("not today" in text for text in told)


async def test_steering_and_follow_up_reach_a_live_run() -> None:
    release = asyncio.Event()
    agent = waiter(release, call("lookup", key="k"), reply("first"), reply("second"))
    async with serving(agent) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "waiter", "input": "go"})).json()
        run_id = started["run_id"]
        steered = await srv.ana.post(f"/v1/runs/{run_id}/steer", json={"text": "also check X"})
        followed = await srv.ana.post(f"/v1/runs/{run_id}/follow_up", json={"text": "then Y"})
        release.set()
        events = await run_events(srv.ana, run_id)
        done = (await srv.ana.get(f"/v1/runs/{run_id}")).json()

    assert steered.status_code == 202 and steered.json()["kind"] == "steering"
    assert followed.status_code == 202 and followed.json()["kind"] == "follow_up"
    delivered = [(e["input_kind"], e["input_id"]) for e in events if e["kind"] == "input_delivered"]
    assert delivered == [
        ("steering", steered.json()["input_id"]),
        ("follow_up", followed.json()["input_id"]),
    ]
    assert done["status"] == "completed" and done["text"] == "second"
    assert isinstance(agent.model, ScriptedModel)
    users = [m.content for m in agent.model.requests[-1].messages if m.role == "user"]
    assert users == ["go", "also check X", "then Y"]


@pytest.mark.parametrize("route", ["steer", "follow_up"])
async def test_an_input_to_an_ended_run_is_409_saying_how_to_continue(route: str) -> None:
    agent = Agent(name="helper", model=ScriptedModel([reply("done")]))
    async with serving(agent) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "helper", "input": "hi"})).json()
        await run_events(srv.ana, started["run_id"])
        response = await srv.ana.post(f"/v1/runs/{started['run_id']}/{route}", json={"text": "x"})

    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "run_ended"
    assert "has ended (completed)" in error["message"]
    assert started["thread_id"] in error["message"]  # how to go on: a new run on the thread


async def test_cancel_ends_a_blocked_run_and_a_second_cancel_is_409() -> None:
    log: list[str] = []
    async with serving(mailer(log)) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "mailer", "input": "mail"})).json()
        await run_events(srv.ana, started["run_id"])
        cancelled = await srv.ana.post(f"/v1/runs/{started['run_id']}/cancel")
        run = (await srv.ana.get(f"/v1/runs/{started['run_id']}")).json()
        again = await srv.ana.post(f"/v1/runs/{started['run_id']}/cancel")
        gates = (await srv.ana.get("/v1/gates")).json()["data"]

    assert cancelled.status_code == 202
    assert cancelled.json() == {
        "run_id": started["run_id"],
        "status": "cancelled",
        "cancel_requested": True,
    }
    assert run["status"] == "cancelled" and run["exit"]["status"] == "cancelled"
    assert again.status_code == 409 and error_of(again)["code"] == "run_ended"
    assert gates == []  # a cancelled run's gate can no longer be approved
    assert log == []


async def test_cancel_stops_a_live_run() -> None:
    release = asyncio.Event()
    async with serving(waiter(release)) as srv:
        started = (await srv.ana.post("/v1/runs", json={"agent": "waiter", "input": "go"})).json()
        reading = asyncio.ensure_future(run_events(srv.ana, started["run_id"]))
        await asyncio.sleep(0.05)
        cancelled = await srv.ana.post(f"/v1/runs/{started['run_id']}/cancel")
        events = await reading
        run = (await srv.ana.get(f"/v1/runs/{started['run_id']}")).json()

    assert cancelled.status_code == 202
    assert events[-1]["kind"] == "run_finished" and events[-1]["status"] == "cancelled"
    assert run["status"] == "cancelled"


@pytest.mark.parametrize(
    ("path", "body", "status", "needle"),
    [
        ("/v1/runs", b"{oops", 400, "not valid JSON"),
        ("/v1/runs", b"", 400, "body is empty"),
        ("/v1/runs", b'"text"', 400, "JSON object"),
        ("/v1/runs", b'{"agent": "helper"}', 422, "input: Field required"),
        ("/v1/runs", b'{"agent": "helper", "input": ""}', 422, "input: String should have"),
        ("/v1/runs", b'{"agent": "helper", "input": "x", "thread": "t"}', 422, "thread: Extra"),
        ("/v1/runs", b'{"agent": "helper", "input": 3}', 422, "input: Input should be a valid"),
        ("/v1/runs", b'{"agent": "nobody", "input": "x"}', 404, "no agent named 'nobody'"),
        ("/v1/runs", b'{"agent": "helper", "input": "x", "thread_id": "thr_x"}', 404, "thread"),
        ("/v1/runs/RUN/steer", b"{}", 422, "text: Field required"),
        ("/v1/runs/RUN/follow_up", b'{"text": 1}', 422, "text: Input should be"),
        ("/v1/gates/g_x/deny", b'{"reason": 5}', 422, "reason: Input should be"),
        ("/v1/gates/g_x/approve", b'{"because": "x"}', 422, "because: Extra inputs"),
    ],
)
async def test_a_malformed_body_is_4xx_with_a_clear_message(
    path: str, body: bytes, status: int, needle: str
) -> None:
    agent = Agent(name="helper", model=ScriptedModel([reply("done")]))
    async with serving(agent) as srv:
        if "RUN" in path:
            started = await srv.ana.post("/v1/runs", json={"agent": "helper", "input": "hi"})
            path = path.replace("RUN", started.json()["run_id"])
        response = await srv.ana.post(
            path, content=body, headers={"content-type": "application/json"}
        )
    assert response.status_code == status, response.text
    assert needle in error_of(response)["message"]


@pytest.mark.parametrize("query", ["limit=0", "limit=x", "limit=501", "status=done"])
async def test_bad_list_parameters_are_422(query: str) -> None:
    agent = Agent(name="helper", model=ScriptedModel([reply("done")]))
    async with serving(agent) as srv:
        runs = await srv.ana.get(f"/v1/runs?{query}")
        gates = await srv.ana.get(f"/v1/gates?{query}")
    assert runs.status_code == 422
    assert gates.status_code == 422
    assert error_of(runs)["param"] in ("limit", "status")


async def test_a_run_on_a_thread_with_a_blocked_run_is_409_thread_busy_unless_a_policy_says() -> (
    None
):
    log: list[str] = []
    agent = mailer(log, call("send_email", to="bob@x", body="hi"), reply("x"), reply("fresh"))
    async with serving(agent) as srv:
        first = (await srv.ana.post("/v1/runs", json={"agent": "mailer", "input": "mail"})).json()
        await run_events(srv.ana, first["run_id"])  # until it blocks
        body = {"agent": "mailer", "input": "again", "thread_id": first["thread_id"]}

        busy = await srv.ana.post("/v1/runs", json=body)
        assert busy.status_code == 409, busy.text
        assert error_of(busy)["code"] == "thread_busy"
        assert busy.headers["x-should-retry"] == "false"

        body["thread_policy"] = "interrupt"
        started = await srv.ana.post("/v1/runs", json=body)
        assert started.status_code == 201, started.text
        old = (await srv.ana.get(f"/v1/runs/{first['run_id']}")).json()
        assert old["status"] == "cancelled"
