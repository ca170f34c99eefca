"""``Agent.run`` / ``Agent.run_sync``: a turn on the embedded default runtime, for the
three-line program (docs/index.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from reverie import Agent, Runtime, Scope
from reverie.errors import UsageError
from reverie.testing import ScriptedModel, reply


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("REVERIE_HOME", str(path))
    monkeypatch.setenv("USER", "ana")
    return path


def test_run_sync_runs_a_turn_on_the_default_store_in_the_local_scope(home: Path) -> None:
    agent = Agent(name="assistant", model=ScriptedModel([reply("Hello!")]))
    result = agent.run_sync("Hi")
    assert (result.status, result.text) == ("completed", "Hello!")
    assert (home / "reverie.db").exists()

    async def stored() -> Scope:
        async with Runtime.open() as rt:
            return (await rt.runs.get(result.run_id)).scope

    assert asyncio.run(stored()) == Scope(tenant="local", user="ana")


def test_agent_run_awaits_a_turn_and_continues_its_thread(home: Path) -> None:
    agent = Agent(name="assistant", model=ScriptedModel([reply("one"), reply("two")]))

    async def main() -> tuple[str | None, str | None, str, str]:
        first = await agent.run("a")
        second = await agent.run("b", thread_id=first.thread_id)
        return first.text, second.text, first.thread_id, second.thread_id

    one, two, thread_a, thread_b = asyncio.run(main())
    assert (one, two) == ("one", "two")
    assert thread_a == thread_b


def test_agent_run_keeps_an_explicit_scope(home: Path) -> None:
    agent = Agent(name="assistant", model=ScriptedModel([reply("ok")]))
    acme = Scope(tenant="acme", user="bo")
    result = agent.run_sync("hi", scope=acme)

    async def stored() -> Scope:
        async with Runtime.open() as rt:
            return (await rt.runs.get(result.run_id)).scope

    assert asyncio.run(stored()) == acme


def test_run_sync_inside_an_event_loop_is_a_usage_error(home: Path) -> None:
    agent = Agent(name="assistant", model=ScriptedModel([reply("ok")]))

    async def main() -> None:
        with pytest.raises(UsageError, match=r"await agent\.run"):
            agent.run_sync("hi")

    asyncio.run(main())
