"""``/v1/schedules``: a caller's schedules act for the caller's scope and only the caller sees
them; another owner's schedule answers 404 exactly as a missing one does."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from reverie import Agent, Runtime, Schedule
from reverie.core.messages import ModelResponse
from reverie.serve import background_server, create_app
from reverie.testing import ScriptedModel, reply
from serve.serve_support import ANA, TIMEOUT_S, TOKENS, error_of, serving

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def digest() -> Agent:
    return Agent(name="digest", model=ScriptedModel(lambda _: reply("Inbox: 3 new.")))


async def test_a_schedule_made_over_http_runs_for_the_callers_scope() -> None:
    async with serving(digest()) as srv:
        made = await srv.ana.post(
            "/v1/schedules",
            json={"name": "morning", "agent": "digest", "cron": "0 8 * * *",
                  "timezone": "Europe/Berlin"},
        )  # fmt: skip
        ran = await srv.ana.post("/v1/schedules/morning/run")
        run_id = ran.json()["run_id"]
        handle = srv.rt.attach(run_id)
        if handle is not None:
            await handle.result()
        run = (await srv.ana.get(f"/v1/runs/{run_id}")).json()
        history = (await srv.ana.get("/v1/schedules/morning/history")).json()["data"]
        stored = await srv.rt.store.get_run(run_id)

    assert made.status_code == 201, made.text
    assert made.json()["next_at"][11:16] == "08:00"
    assert ran.status_code == 202
    assert run["status"] == "completed"
    assert stored.scope == ANA
    assert [(h["status"], h["run_id"]) for h in history] == [("started", run_id)]


async def test_another_owners_schedule_answers_404_like_a_missing_one() -> None:
    async with serving(digest()) as srv:
        await srv.bob.post(
            "/v1/schedules", json={"name": "bobs", "agent": "digest", "every_s": 600}
        )
        attempts = {
            "get": await srv.ana.get("/v1/schedules/bobs"),
            "pause": await srv.ana.post("/v1/schedules/bobs/pause"),
            "run": await srv.ana.post("/v1/schedules/bobs/run"),
            "history": await srv.ana.get("/v1/schedules/bobs/history"),
            "delete": await srv.ana.delete("/v1/schedules/bobs"),
        }
        missing = await srv.ana.get("/v1/schedules/nope")
        ana_list = (await srv.ana.get("/v1/schedules")).json()["data"]
        bob_list = (await srv.bob.get("/v1/schedules")).json()["data"]
        bob_runs = (await srv.bob.get("/v1/runs")).json()["data"]

    assert {k: r.status_code for k, r in attempts.items()} == dict.fromkeys(attempts, 404)
    assert missing.status_code == 404
    assert error_of(attempts["get"])["code"] == error_of(missing)["code"] == "schedule_not_found"
    assert ana_list == [] and [s["name"] for s in bob_list] == ["bobs"]
    assert bob_list[0]["paused"] is False and bob_runs == []


async def test_pause_resume_and_delete_over_http() -> None:
    async with serving(digest()) as srv:
        await srv.ana.post("/v1/schedules", json={"name": "s", "agent": "digest", "every_s": 60})
        paused = (await srv.ana.post("/v1/schedules/s/pause")).json()
        resumed = (await srv.ana.post("/v1/schedules/s/resume")).json()
        deleted = await srv.ana.delete("/v1/schedules/s")
        after = await srv.ana.get("/v1/schedules/s")

    assert paused["paused"] is True and resumed["paused"] is False
    assert deleted.status_code == 200 and after.status_code == 404


async def test_a_bad_schedule_body_is_a_422_naming_the_problem() -> None:
    async with serving(digest()) as srv:
        bad_cron = await srv.ana.post(
            "/v1/schedules", json={"name": "s", "agent": "digest", "cron": "99 * * * *"}
        )
        no_agent = await srv.ana.post(
            "/v1/schedules", json={"name": "s", "agent": "ghost", "every_s": 60}
        )
        listed = (await srv.ana.get("/v1/schedules")).json()["data"]

    assert bad_cron.status_code == 422 and "cron" in error_of(bad_cron)["message"]
    assert no_agent.status_code == 404
    assert listed == []


async def test_the_served_app_fires_due_schedules_in_the_background() -> None:
    called = asyncio.Event()

    def answer(_: object) -> ModelResponse:
        called.set()
        return reply("fired")

    agent = Agent(name="digest", model=ScriptedModel(answer))
    async with Runtime.open(":memory:") as rt:
        rt.schedules.clock = lambda: T0
        await rt.schedules.add(Schedule(name="s", agent="digest", scope=ANA, every_s=60))
        rt.schedules.clock = lambda: T0 + timedelta(minutes=1)  # the occurrence is due
        app = create_app(rt, agents={"digest": agent}, tokens=TOKENS, schedules=True)
        async with background_server(app):
            await asyncio.wait_for(called.wait(), TIMEOUT_S)
        [occurrence] = await rt.schedules.history("s")
    assert occurrence.at == (T0 + timedelta(minutes=1)).timestamp()
    assert occurrence.run_id is not None
