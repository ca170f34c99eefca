"""Interrupted passes are never left ``running`` (DESIGN §13/§14): a pass stopped by
``aclose()``, by a crash at any store await or by SIGKILL is resumed by ``recover()`` in a new
process — with its tools, limits, contract and model spec from the store — or ended ``failed``;
either way it is terminal and recorded, and memory is intact with no fact duplicated."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from curation.curation_support import ANA, DUPLICATES, TIDY, turns, user_agent
from curation.recovery_support import BodyCurator, spec_of, wait_for_requests
from integration.test_crash_any_await import CrashingStore
from reverie import Runtime
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.memory import NativeMemory
from reverie.store import Document, MemoryStore
from reverie.store.base import TERMINAL_STATUSES, Store
from reverie.testing import ScriptedModel
from reverie.testing.fake_openai import FakeOpenAIServer

CHILD = Path(__file__).with_name("curation_child.py")


async def _pass_runs(store: Store) -> list[str]:
    return [r.status for r in await store.list_runs() if r.profile == "unbound_structured"]


async def test_a_pass_stopped_by_aclose_is_resumed_by_recover_in_a_new_process(db_url: str) -> None:
    async with FakeOpenAIServer(BodyCurator(TIDY, hang=frozenset({2}))) as server:
        rt = await Runtime.open(
            db_url,
            memory=NativeMemory(),
            curation_interval_turns=2,
            curation_model=spec_of(server),
        )
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        await turns(rt, user_agent(), ANA, 2)
        await wait_for_requests(server, 2)  # the pass has read and waits for the model
        await rt.aclose()

        # A new process: no curation settings, no agents — the run row has what it needs.
        async with Runtime.open(db_url, memory=NativeMemory()) as fresh:
            assert await _pass_runs(fresh.store) == ["running"]
            results = await fresh.recover()
            (record,) = await fresh.memory.passes(ANA)
            doc = await fresh.memory.read(ANA)
            assert await _pass_runs(fresh.store) == ["completed"]
    assert [r.status for r in results] == ["completed"]
    assert record.report["status"] == "completed" and record.report["write"] == "written"
    assert doc == Document(TIDY, 2)


async def test_a_pass_whose_model_was_an_instance_is_failed_on_recovery_with_a_pass_record(
    db_url: str,
) -> None:
    async def never(request: ModelRequest) -> ModelResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    model = ScriptedModel(never, name="in-process")
    rt = await Runtime.open(
        db_url, memory=NativeMemory(), curation_interval_turns=2, curation_model=model
    )
    await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
    await turns(rt, user_agent(), ANA, 2)
    deadline = time.monotonic() + 20
    while not model.requests:
        assert time.monotonic() < deadline, "the pass never asked its model"
        await asyncio.sleep(0.01)
    await rt.aclose()

    async with Runtime.open(db_url, memory=NativeMemory()) as fresh:
        (result,) = await fresh.recover()
        (record,) = await fresh.memory.passes(ANA)
        doc = await fresh.memory.read(ANA)
    assert result.status == "failed" and result.exit.kind == "not_resumable"  # type: ignore[union-attr]
    assert record.report["status"] == "failed" and "not_resumable" in record.report["error"]
    assert record.report["write"] == "none"
    assert doc == Document(DUPLICATES, 1)


@pytest.mark.crash
async def test_a_pass_crashed_at_a_store_await_is_terminal_and_recorded_after_recover() -> None:
    async with FakeOpenAIServer(BodyCurator(TIDY)) as server:
        spec = spec_of(server)

        async def attempt(at: int | None, when: str) -> tuple[MemoryStore, CrashingStore]:
            inner = MemoryStore()
            store = CrashingStore(inner, at=at, when=when)
            rt = Runtime(store, memory=NativeMemory())
            await rt.__aenter__()
            await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
            store.armed = True
            try:
                await rt.memory.curate(ANA, model=spec)
            finally:
                store.armed = False
                await rt.aclose()
            return inner, store

        _, clean = await attempt(None, "before")
        total = clean.calls
        assert total > 10
        # Every 6th await, before and after it takes effect (each attempt costs real HTTP
        # model calls; the integration suite covers every await of an ordinary run).
        for when in ("before", "after"):
            for at in range(1 if when == "before" else 4, total + 1, 6):
                where = f"crash {when} store call {at} of {total}"
                inner = MemoryStore()
                store = CrashingStore(inner, at=at, when=when)
                rt = Runtime(store, memory=NativeMemory())
                await rt.__aenter__()
                await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
                store.armed = True
                # The crash surfaces here, or not at all: a run left queued by a crash in its
                # first store call is continued by the pass's own waiter in this process.
                with contextlib.suppress(BaseException):
                    await rt.memory.curate(ANA, model=spec)
                store.armed = False
                await rt.aclose()
                for run in await inner.list_runs():
                    if run.status not in TERMINAL_STATUSES:  # the dead worker's lease runs out
                        await inner.acquire_lease(
                            run.run_id, "gone:0:0", ttl_s=0, now=time.time() - 1, force=True
                        )
                async with Runtime(inner, memory=NativeMemory()) as fresh:
                    await fresh.recover()
                    runs = [r for r in await inner.list_runs() if r.profile == "unbound_structured"]
                    passes = await fresh.memory.passes(ANA)
                    doc = await fresh.memory.read(ANA)
                assert all(r.status in TERMINAL_STATUSES for r in runs), where
                assert {p.run_id for p in passes} == {r.run_id for r in runs}, where
                for record, run in zip(
                    sorted(passes, key=lambda p: p.run_id),
                    sorted(runs, key=lambda r: r.run_id),
                    strict=True,
                ):
                    assert record.report["status"] == run.status, where
                assert doc.text in (DUPLICATES, TIDY), where  # intact; no fact duplicated


def _spawn(db: Path, spec: str, err: Path) -> subprocess.Popen[bytes]:
    with err.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, str(CHILD), str(db), spec],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )


@pytest.mark.crash
@pytest.mark.parametrize("kill_at", [1, 2, 3], ids=["before-read", "after-read", "after-write"])
async def test_a_pass_killed_by_sigkill_is_resumed_by_recover_and_writes_once(
    tmp_path: Path, kill_at: int
) -> None:
    db = tmp_path / "kill.db"
    async with Runtime.open(f"sqlite:///{db}", memory=NativeMemory()) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
    async with FakeOpenAIServer(BodyCurator(TIDY, hang=frozenset({kill_at}))) as server:
        err = tmp_path / "child.err"
        child = _spawn(db, spec_of(server), err)
        try:
            try:
                await wait_for_requests(server, kill_at)
            except AssertionError:
                raise AssertionError(err.read_text(encoding="utf-8")) from None
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait(timeout=20) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        async with Runtime.open(f"sqlite:///{db}", memory=NativeMemory()) as fresh:
            (result,) = await fresh.recover()
            (record,) = await fresh.memory.passes(ANA)
            doc = await fresh.memory.read(ANA)
            history = await fresh.memory.history(ANA)
    assert result.status == "completed", result.exit
    assert record.report["status"] == "completed" and record.report["write"] == "written"
    assert doc == Document(TIDY, 2)
    assert [v.text for v in history] == [TIDY, DUPLICATES]  # one write, never two
