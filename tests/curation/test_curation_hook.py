"""The curation hook through the runtime (DESIGN §13): what counts, when a pass is submitted,
what a pass gets, and that the user's turn never depends on it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import pytest

from curation.curation_support import (
    ANA,
    BOB,
    DUPLICATES,
    TIDY,
    curating,
    curator,
    is_pass,
    settled_passes,
    tidy_curator,
    turns,
    user_agent,
)
from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.hooks import AfterTurnContext
from reverie.memory import NativeMemory
from reverie.memory.curation import CURATION_HOOK_NAME, pass_id, pass_instructions, pass_limits
from reverie.memory.native import native_manifest
from reverie.testing import ScriptedModel, call, error, reply


@pytest.fixture(params=["memory", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return ":memory:" if request.param == "memory" else f"sqlite:///{tmp_path / 'rt.db'}"


async def test_n_minus_one_completed_turns_submit_no_pass_and_the_nth_exactly_one(url: str) -> None:
    model = curator()
    async with curating(model, url=url, interval=3) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        agent = user_agent()
        await turns(rt, agent, ANA, 2)
        assert await settled_passes(rt, ANA) == []
        assert model.requests == []
        (third,) = await turns(rt, agent, ANA, 1)
        passes = await settled_passes(rt, ANA)
        doc = await rt.memory.read(ANA)
    assert [p.pass_id for p in passes] == [pass_id(ANA, third)]
    assert passes[0].report["status"] == "completed" and passes[0].report["write"] == "written"
    assert doc.text == TIDY


async def test_the_2nth_turn_submits_a_second_pass_with_a_different_id() -> None:
    async with curating(curator()) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        ids = await turns(rt, user_agent(), ANA, 4)
        passes = await settled_passes(rt, ANA)
        runs = {p.run_id for p in passes}
    assert [p.pass_id for p in passes] == [pass_id(ANA, ids[1]), pass_id(ANA, ids[3])]
    assert passes[0].pass_id == f"memory-curation-acme-ana-{ids[1]}"
    assert len(runs) == 2


async def test_turns_are_counted_per_owner() -> None:
    async with curating(curator()) as rt:
        agent = user_agent()
        await turns(rt, agent, ANA, 1)
        await turns(rt, agent, BOB, 1)
        assert await settled_passes(rt, ANA) == await settled_passes(rt, BOB) == []
        await turns(rt, agent, BOB, 1)
        assert await settled_passes(rt, ANA) == []
        assert len(await settled_passes(rt, BOB)) == 1


@tool(effects={"write"}, needs_approval=True)
def send(to: str) -> str:
    """Send something."""
    return "sent"


async def test_failed_cancelled_blocked_unbound_actorless_and_scheduled_runs_never_count() -> None:
    async with curating(curator()) as rt:

        def broken(request: ModelRequest) -> ModelResponse:
            raise error("internal")

        failing = Agent(name="failing", model=ScriptedModel(broken))
        for _ in range(2):
            assert (await rt.run(failing, "hi", scope=ANA)).status == "failed"
        gated = Agent(
            name="gated", model=ScriptedModel(lambda r: call("send", to="x")), tools=[send]
        )
        for _ in range(2):
            blocked = await rt.run(gated, "send it", scope=ANA)
            assert blocked.status == "blocked"
            await rt.cancel(blocked.run_id)
            assert (await rt.get_result(blocked.run_id)).status == "cancelled"
        agent = user_agent()
        for profile, actor in (("interactive", False), ("scheduled_trigger", True)):
            for _ in range(2):
                handle = await rt.start(agent, "tick", scope=ANA, profile=profile, has_actor=actor)
                assert (await handle.result()).status == "completed"
        for i in range(2):
            done = await rt.unbound.run(
                system_prompt="Work.",
                messages=["go"],
                scope=ANA,
                agent=agent,
                idempotency_key=f"u{i}",
            )
            assert done.status == "completed"
        assert await settled_passes(rt, ANA) == []
        # None of them counted: one completed interactive turn is still one short of a pass.
        await turns(rt, agent, ANA, 1)
        assert await settled_passes(rt, ANA) == []
        await turns(rt, agent, ANA, 1)
        assert len(await settled_passes(rt, ANA)) == 1


async def test_the_pass_never_fires_another_pass_even_when_its_own_run_completes() -> None:
    seen: list[AfterTurnContext] = []
    async with curating(curator()) as rt:
        rt.hooks.register("after_turn", seen.append, name="audit")
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        ids = await turns(rt, user_agent(), ANA, 2)
        (record,) = await settled_passes(rt, ANA)
        pass_run = await rt.store.get_run(record.run_id)
        # Give anything the pass's completion might have set off every chance to run.
        for _ in range(20):
            await asyncio.sleep(0)
        assert await rt.memory.wait_for_passes() == []
        again = await settled_passes(rt, ANA)
    assert pass_run.status == "completed" and pass_run.profile == "unbound_structured"
    assert not pass_run.has_actor
    assert [c.run_id for c in seen] == ids  # after_turn never fired for the pass's run
    assert again == [record]


async def test_a_pass_acts_as_the_owner_with_the_declared_tools_prompt_and_report_contract() -> (
    None
):
    model = curator()
    async with curating(model) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        await turns(rt, user_agent(), ANA, 2)
        (record,) = await settled_passes(rt, ANA)
        run = await rt.store.get_run(record.run_id)
        other = await rt.memory.read(BOB)
    first = model.requests[0]
    op = native_manifest().op_for("after_turn")
    assert op is not None
    prompt = (Path(str(native_manifest().base_dir)) / op.pass_.prompt).read_text(encoding="utf-8")
    assert (run.scope.tenant, run.scope.user) == ("acme", "ana") and record.scope == ANA
    assert run.idempotency_key == record.pass_id
    assert sorted(t.name for t in first.tools or ()) == [
        "memory_read",
        "memory_write",
        "structured_result",
    ]
    assert first.messages[0].role == "system"
    assert first.messages[0].content == pass_instructions(prompt, op.pass_)
    assert first.output_schema is not None
    assert first.output_schema["required"] == ["changed", "summary"]
    assert first.output_schema["properties"]["summary"]["maxLength"] == 500
    assert other.version == 0  # acting as ana touched nobody else's memory


async def test_a_pass_is_bounded_by_the_declared_limits() -> None:
    op = native_manifest().op_for("after_turn")
    assert op is not None
    limits = pass_limits(op.pass_)
    assert limits.max_model_calls == op.pass_.max_model_calls == 10
    assert limits.max_capability_calls == max(4 * len(op.pass_.tools), 4) == 8
    assert limits.wall_clock_s == 90

    def read_forever(request: ModelRequest) -> ModelResponse:
        return call("memory_read", path="MEMORY.md")

    model = ScriptedModel(read_forever)
    async with curating(model) as rt:
        await turns(rt, user_agent(), ANA, 2)
        (record,) = await settled_passes(rt, ANA)
    reads = sum(1 for r in model.requests[-1].messages if r.role == "tool")
    assert record.report["status"] == "failed"
    assert reads <= 8 and len(model.requests) <= 10


async def test_a_pass_uses_the_triggering_agents_model_unless_curation_model_names_another() -> (
    None
):
    def assistant(request: ModelRequest) -> ModelResponse:
        return tidy_curator()(request) if is_pass(request) else reply("ok")

    own = ScriptedModel(assistant, name="own")
    async with Runtime.open(":memory:", memory=NativeMemory(), curation_interval_turns=2) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        await turns(rt, Agent(name="assistant", model=own), ANA, 2)
        (record,) = await settled_passes(rt, ANA)
        assert (await rt.memory.read(ANA)).text == TIDY
    assert record.report["status"] == "completed"
    assert sum(1 for r in own.requests if is_pass(r)) == 3

    named = curator()
    other = ScriptedModel(lambda r: reply("ok"), name="other")
    async with curating(named) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        await turns(rt, Agent(name="assistant", model=other), ANA, 2)
        (record,) = await settled_passes(rt, ANA)
    assert record.report["status"] == "completed"
    assert not any(is_pass(r) for r in other.requests) and len(named.requests) == 3


async def test_the_hook_submits_and_returns_without_waiting_for_the_pass() -> None:
    release = asyncio.Event()
    inner = tidy_curator()

    async def slow(request: ModelRequest) -> ModelResponse:
        await release.wait()
        return inner(request)

    async with curating(ScriptedModel(slow)) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        agent = user_agent()
        await turns(rt, agent, ANA, 2)  # returns while the pass is still waiting on its model
        assert await rt.memory.passes(ANA) == []
        later = await rt.run(agent, "still here?", scope=ANA)
        assert later.status == "completed"
        release.set()
        (record,) = await settled_passes(rt, ANA)
    assert record.report["status"] == "completed"


async def test_hook_failures_are_logged_at_debug_and_never_affect_the_users_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="reverie.memory.curation")
    async with curating(curator()) as rt:

        async def broken_submit(*args: object, **kwargs: object) -> str:
            raise RuntimeError("queue is down")

        rt.unbound.submit = broken_submit  # type: ignore[method-assign]
        results = [await rt.run(user_agent(), f"turn {i}", scope=ANA) for i in range(2)]
        assert await settled_passes(rt, ANA) == []
    assert [r.status for r in results] == ["completed", "completed"]
    records = [r for r in caplog.records if r.name == "reverie.memory.curation"]
    assert records and all(r.levelno == logging.DEBUG for r in records)
    assert "RuntimeError" in records[0].getMessage()
    assert "queue is down" not in caplog.text


async def test_many_owners_keep_no_counts_in_process_memory_they_live_in_the_store() -> None:
    async with curating(curator(), interval=5) as rt:
        registration = rt.hooks.get(CURATION_HOOK_NAME)
        assert registration is not None and registration.trust == "builtin"
        hook = registration.fn
        for i in range(500):
            scope = Scope(tenant="acme", user=f"user-{i}")
            await hook(  # type: ignore[misc]
                AfterTurnContext(
                    scope=scope,
                    run_id=f"run-{i}",
                    profile="interactive",
                    completed=True,
                    status="completed",
                )
            )
        assert len(rt._curator.counter) == 0  # type: ignore[union-attr]
        assert await rt.memory.wait_for_passes() == []


async def test_a_new_process_continues_each_owners_count_from_the_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rt.db'}"

    def opened() -> contextlib.AbstractAsyncContextManager[Runtime]:
        return curating(curator(), url=url, interval=3)

    agent = user_agent()
    async with opened() as rt:
        await turns(rt, agent, ANA, 2)
        assert await settled_passes(rt, ANA) == []
    async with opened() as rt:
        (third,) = await turns(rt, agent, ANA, 1)  # the 3rd turn, in a new process
        (first,) = await settled_passes(rt, ANA)
    assert first.pass_id == pass_id(ANA, third)
    async with opened() as rt:
        ids = await turns(rt, agent, ANA, 2)  # counting starts after the latest pass
        assert await settled_passes(rt, ANA) == [first]
        ids += await turns(rt, agent, ANA, 1)
        passes = await settled_passes(rt, ANA)
    assert [p.pass_id for p in passes] == [first.pass_id, pass_id(ANA, ids[2])]


async def test_a_retried_submit_for_the_same_turn_returns_the_same_pass() -> None:
    release, answer = asyncio.Event(), tidy_curator()

    async def held(request: ModelRequest) -> ModelResponse:
        await release.wait()  # the pass runs until the test has submitted again
        return answer(request)

    model = ScriptedModel(held, name="curator")
    async with Runtime.open(":memory:", memory=NativeMemory(), curation_model=model) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        curation = rt._curator
        assert curation is not None
        first, twin = await asyncio.gather(  # two submits racing: one pass
            curation.submit(ANA, trigger="run_x"), curation.submit(ANA, trigger="run_x")
        )
        again = await curation.submit(ANA, trigger="run_x")  # while it runs: the same pass
        assert twin is first and again is first
        release.set()
        record = await first
        later = await curation.submit(ANA, trigger="run_x")  # after it ended: still the same
        assert await later == record
        runs = [r for r in await rt.store.list_runs(scope=ANA) if r.idempotency_key]
    assert record.pass_id == "memory-curation-acme-ana-run_x"
    assert [r.run_id for r in runs] == [record.run_id]
    assert len(model.requests) == 3  # one pass's read, write and report


async def test_turn_counts_live_in_the_store_so_the_cadence_is_exact_across_processes(
    db_url: str,
) -> None:
    agent = user_agent()
    async with (
        curating(curator(), url=db_url, interval=3) as one,
        curating(curator(), url=db_url, interval=3) as two,
    ):
        await one.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        ids: list[str] = []
        for worker in (one, two, one, two, one, two):  # every turn in the other process
            ids += await turns(worker, agent, ANA, 1)
            # Its count is after-turn work, in the background: the next turn (in the other
            # runtime, which does not wait for this one's) counts after it, as a later turn
            # does in a real deployment, with no race on which increment comes third.
            await worker._after_turn.settle(ANA)
        await one.memory.wait_for_passes()
        await two.memory.wait_for_passes()
        passes = list(reversed(await one.memory.passes(ANA)))
    # Exactly every 3rd turn, wherever it ran: not every 3rd turn *each process* saw.
    assert [p.pass_id for p in passes] == [pass_id(ANA, ids[2]), pass_id(ANA, ids[5])]


async def test_a_pass_covers_each_scope_of_the_owner_that_changed_since_its_last_pass(
    db_url: str,
) -> None:
    coach = Scope(tenant="acme", user="ana", agent="coach")
    work = Scope(tenant="acme", user="ana", project="work")
    async with curating(curator(), url=db_url, interval=2) as rt:
        for scope in (ANA, coach, work, BOB):
            await rt.memory.write(scope, "MEMORY.md", DUPLICATES, expected_version=0)
        first = await turns(rt, user_agent(), ANA, 2)
        await rt.memory.wait_for_passes()
        # Only the coach's document changes after the first round of passes.
        doc = await rt.memory.read(coach)
        await rt.memory.write(coach, "MEMORY.md", DUPLICATES, expected_version=doc.version)
        second = await turns(rt, user_agent(), ANA, 2)
        await rt.memory.wait_for_passes()
        passes = {
            s.key(): [p.pass_id for p in await rt.memory.passes(s)] for s in (ANA, coach, work, BOB)
        }
        docs = [await rt.memory.read(s) for s in (ANA, coach, work)]
    assert passes[ANA.key()] == [pass_id(ANA, second[1]), pass_id(ANA, first[1])]
    assert passes[coach.key()] == [pass_id(coach, second[1]), pass_id(coach, first[1])]
    assert passes[work.key()] == [pass_id(work, first[1])]  # unchanged since its pass
    assert passes[BOB.key()] == []  # another owner's scopes are never curated for Ana
    assert all(d.text == TIDY for d in docs)
