"""PostgreSQL-specific behaviour of :class:`PostgresStore` (the shared rules are in conformance).

Tests that need a server run when ``REVERIE_TEST_POSTGRES_URL`` names one (``.ci/run`` starts
one); each gets a fresh schema of its own (:func:`temporary_schema`). The others (URLs, errors
without a server) always run.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import psycopg
import pytest

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ToolCall
from reverie.errors import ConfigError, ConflictError, LeaseLost, RunBusy, StoreError, ThreadBusy
from reverie.memory import NativeMemory
from reverie.store import GateRecord, NewItem, RunRecord, open_store
from reverie.store.base import SegmentStart
from reverie.store.postgres import PostgresStore, temporary_schema
from reverie.store.postgres_schema import SCHEMA_VERSION
from reverie.testing import ScriptedModel, call, reply

POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")
F = TypeVar("F", bound=Callable[..., Any])


def needs_server(test: F) -> F:
    """Mark a test that needs the server: ``-m postgres`` selects it; skipped without one."""
    skip = pytest.mark.skipif(
        not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL; .ci/run starts a server"
    )
    marked: F = pytest.mark.postgres(skip(test))
    return marked


ANA = Scope(tenant="acme", user="ana", project="p1")
T0 = 1_000.0


@pytest.fixture
async def url() -> AsyncIterator[str]:
    """A URL whose connections use a fresh, empty schema (dropped after the test)."""
    async with temporary_schema(POSTGRES_URL, prefix="reverie_test") as scoped:
        yield scoped


@pytest.fixture
async def store(url: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(url) as opened:
        yield opened


async def _make_run(store: PostgresStore, run_id: str = "run-1") -> None:
    # A thread per run (run-1 on thr-1): a thread holds one active run at a time.
    thread_id = "thr-" + run_id.removeprefix("run-")
    await store.create_thread(thread_id, ANA)
    await store.create_run(
        RunRecord(run_id=run_id, thread_id=thread_id, scope=ANA, agent_name="assistant")
    )


async def _scalar(url: str, sql: str) -> object:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (await conn.execute(sql)).fetchone()
    assert row is not None
    return row[0]


# open_store and URLs (no server needed) ------------------------------------------------------
@pytest.mark.parametrize(
    "url", ["postgresql://ana:pw@db.example:5432/reverie", "postgres://db.example/reverie"]
)
def test_open_store_postgres_urls_give_a_postgres_store(url: str) -> None:
    store = open_store(url)
    assert isinstance(store, PostgresStore)
    assert store.label.startswith("postgresql://db.example:")


def test_open_store_with_a_driver_suffix_names_the_accepted_form() -> None:
    with pytest.raises(ConfigError, match="postgresql://"):
        open_store("postgresql+psycopg://ana@localhost/reverie")


def test_unparseable_url_is_a_config_error_that_does_not_quote_the_password() -> None:
    with pytest.raises(ConfigError) as caught:
        PostgresStore("postgresql://ana:hunter2secret@localhost/reverie?bogus=1")
    assert "hunter2secret" not in str(caught.value)


def test_open_store_without_psycopg_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(sys.modules):
        if name == "psycopg" or name.startswith(("psycopg.", "reverie.store.postgres")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'reverie\[postgres\]'"):
        open_store("postgresql://localhost/reverie")


async def test_unreachable_server_is_a_store_error_without_credentials() -> None:
    # Port 1 on the loopback interface: nothing listens, the connection is refused at once.
    store = PostgresStore("postgresql://ana:hunter2secret@127.0.0.1:1/reverie")
    with pytest.raises(StoreError) as caught:
        await store.open()
    message = str(caught.value)
    assert "hunter2secret" not in message and "ana" not in message
    assert "postgresql://127.0.0.1:1/reverie" in message
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)


def test_max_connections_below_one_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        PostgresStore("postgresql://localhost/reverie", max_connections=0)


# with a server -------------------------------------------------------------------------------
@needs_server
async def test_data_survives_close_and_reopen(store: PostgresStore, url: str) -> None:
    await _make_run(store)
    fence = await store.acquire_lease("run-1", "w1", ttl_s=30, now=T0)
    items = await store.append_items(
        "thr-1", "run-1", [NewItem(role="user", content="hi", input_id="in-1")], fence=fence
    )
    await store.save_checkpoint("run-1", "BeforeModel", b"\x00state", fence=fence)
    await store.journal_finished("run-1", "call-1", {"ok": True}, fence=fence)
    await store.enqueue_input("run-1", "steering", {"text": "also"}, input_id="in-2")
    await store.write_document(ANA, "MEMORY.md", "likes tea", 0)
    await store.close()

    async with PostgresStore(url) as again:
        assert await again.get_items([items[0].ref]) == items
        checkpoint = await again.load_checkpoint("run-1")
        assert checkpoint is not None and checkpoint.payload == b"\x00state"
        assert (await again.journal_get("run-1", ["call-1"]))["call-1"].outcome == {"ok": True}
        assert [i.input_id for i in await again.poll_inputs("run-1", after_cursor=0)] == ["in-2"]
        assert (await again.get_run("run-1")).fence == fence
        assert (await again.search(ANA, "tea"))[0].ref == "MEMORY.md"


@needs_server
async def test_schema_version_is_recorded_and_reopening_does_not_migrate_again(
    store: PostgresStore, url: str
) -> None:
    assert await _scalar(url, "SELECT MAX(version) FROM schema_version") == SCHEMA_VERSION
    await store.close()
    async with PostgresStore(url):
        pass
    assert await _scalar(url, "SELECT COUNT(*) FROM schema_version") == SCHEMA_VERSION


@needs_server
async def test_database_from_a_newer_schema_is_refused(store: PostgresStore, url: str) -> None:
    await store.close()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO schema_version (version, name, applied_at) VALUES (99, 'future', 0)"
        )
    with pytest.raises(StoreError, match="schema version 99, newer"):
        await PostgresStore(url).open()


@needs_server
async def test_two_stores_opening_a_fresh_schema_at_once_both_succeed(url: str) -> None:
    stores = [PostgresStore(url) for _ in range(4)]
    await asyncio.gather(*(s.open() for s in stores))
    await asyncio.gather(*(s.close() for s in stores))
    assert await _scalar(url, "SELECT COUNT(*) FROM schema_version") == SCHEMA_VERSION


@needs_server
async def test_two_stores_racing_for_a_lease_exactly_one_wins(url: str) -> None:
    async with PostgresStore(url) as a, PostgresStore(url) as b:
        for n in range(20):
            run_id = f"run-{n}"
            await _make_run(a, run_id)
            results = await asyncio.gather(
                a.acquire_lease(run_id, "worker-a", ttl_s=30, now=T0),
                b.acquire_lease(run_id, "worker-b", ttl_s=30, now=T0),
                return_exceptions=True,
            )
            wins = [r for r in results if isinstance(r, int)]
            assert len(wins) == 1 and sum(isinstance(r, RunBusy) for r in results) == 1
            assert (await a.get_run(run_id)).fence == wins[0]


@needs_server
async def test_concurrent_appends_from_two_stores_keep_seq_unique_and_gap_free(url: str) -> None:
    async with PostgresStore(url) as a, PostgresStore(url) as b:
        await a.create_thread("thr-1", ANA)

        async def append(store: PostgresStore, n: int) -> None:
            await store.append_items(
                "thr-1",
                None,
                [NewItem(role="user", content=f"{n}-{i}") for i in range(3)],
                fence=None,
            )

        await asyncio.gather(*(append(a if n % 2 else b, n) for n in range(24)))
        rows = await a.thread_items("thr-1")
        assert [r.seq for r in rows] == list(range(1, 73))
        # Each append's rows are consecutive: no other append interleaved with them.
        for start in range(0, 72, 3):
            assert len({r.content.split("-")[0] for r in rows[start : start + 3]}) == 1


@needs_server
async def test_a_fenced_write_racing_a_takeover_never_lands_after_it(
    store: PostgresStore, url: str
) -> None:
    await _make_run(store)
    old = await store.acquire_lease("run-1", "w1", ttl_s=30, now=T0)
    async with await psycopg.AsyncConnection.connect(url) as takeover:
        # A takeover in flight: the new fence is written but not yet committed.
        await takeover.execute("UPDATE runs SET fence = fence + 1 WHERE run_id = 'run-1'")
        write = asyncio.ensure_future(
            store.save_checkpoint("run-1", "BeforeModel", b"late", fence=old)
        )
        await asyncio.sleep(0.2)
        assert not write.done()  # it waits for the takeover instead of reading the old fence
        await takeover.commit()
        with pytest.raises(LeaseLost):
            await write
    assert await store.load_checkpoint("run-1") is None


@needs_server
async def test_integrity_violation_is_a_conflict_error_keeping_the_cause(
    store: PostgresStore,
) -> None:
    await _make_run(store)
    fence = await store.acquire_lease("run-1", "w1", ttl_s=30, now=T0)
    gate = GateRecord(
        ref="gate-1", run_id="run-1", call_id="c1", tool="t", arguments={}, scope=ANA, created_at=T0
    )
    await store.create_gate(gate, fence=fence)
    other_call = GateRecord(
        ref="gate-1", run_id="run-1", call_id="c2", tool="t", arguments={}, scope=ANA, created_at=T0
    )
    with pytest.raises(ConflictError) as caught:
        await store.create_gate(other_call, fence=fence)
    assert isinstance(caught.value.__cause__, psycopg.errors.UniqueViolation)
    assert "SQLSTATE 23505" in str(caught.value)


@needs_server
async def test_nul_characters_in_text_are_kept_as_replacement_characters(
    store: PostgresStore,
) -> None:
    await store.create_thread("thr-1", ANA)
    [item] = await store.append_items(
        "thr-1", None, [NewItem(role="tool", content="a\x00b")], fence=None
    )
    assert item.content == "a\ufffdb"
    assert await store.get_items([item.ref]) == [item]
    written = await store.write_document(ANA, "MEMORY.md", "x\x00y", 0)
    assert await store.read_document(ANA, "MEMORY.md") == written


@needs_server
async def test_rows_inserted_in_one_statement_read_back_as_written(url: str) -> None:
    # Several rows of one insert travel as one JSON parameter: text, NUL, quotes, nested JSON,
    # NULLs and numbers must come back exactly (read by a second store: no item cache).
    items = [
        NewItem(role="user", content='say "hi" \\ \u00e9\U0001f600', meta={"k": [1, 2.5, None]}),
        NewItem(
            role="assistant",
            content="a\x00b",
            tool_calls=(ToolCall(id="c1", name="f", arguments={"x": "\x00\n"}),),
        ),
        NewItem(role="tool", content="", tool_call_id="c1", name="f", input_id="in-1"),
    ]
    events = [{"kind": "text_delta", "n": n, "s": "\x00\u2028"} for n in range(3)]
    async with PostgresStore(url) as writer:
        await writer.create_thread("thr-1", ANA)
        written = await writer.append_items("thr-1", "run-x", items, fence=None)
        await writer.create_thread("thr-2", ANA)
        await writer.create_run(
            RunRecord(run_id="run-1", thread_id="thr-2", scope=ANA, agent_name="a")
        )
        assert await writer.append_run_events("run-1", events) == 3
    assert written[0].content == items[0].content and written[1].content == "a\ufffdb"
    async with PostgresStore(url, item_cache_threads=0) as reader:
        assert await reader.thread_items("thr-1") == written
        assert [e.data for e in await reader.run_events("run-1")] == events


@needs_server
async def test_store_uses_at_most_max_connections_and_closes_them(url: str) -> None:
    name = f"reverie_pool_{os.getpid()}"
    count = f"SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = '{name}'"
    async with PostgresStore(f"{url}&application_name={name}", max_connections=3) as store:
        await store.create_thread("thr-1", ANA)
        appends = [
            store.append_items("thr-1", None, [NewItem(role="user", content="x")], fence=None)
            for _ in range(30)
        ]
        await asyncio.gather(*appends)
        assert len(await store.thread_items("thr-1")) == 30
        assert await _scalar(url, count) in (1, 2, 3)
    # The server notices a closed connection a moment after the client closed it.
    for _ in range(100):
        if await _scalar(url, count) == 0:
            break
        await asyncio.sleep(0.05)
    assert await _scalar(url, count) == 0


@needs_server
async def test_operations_one_after_another_reuse_the_connections_opened_with_the_store(
    url: str,
) -> None:
    name = f"reverie_reuse_{os.getpid()}"
    count = f"SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = '{name}'"
    async with PostgresStore(f"{url}&application_name={name}", max_connections=8) as store:
        assert await _scalar(url, count) == 2  # the loop's and the event recorder's
        await store.create_thread("thr-1", ANA)
        for _ in range(20):
            await store.append_items("thr-1", None, [NewItem(role="user", content="x")], fence=None)
            await store.thread_items("thr-1", last=1)
        assert await _scalar(url, count) == 2
    alone = count.replace(name, f"{name}_1")
    async with PostgresStore(f"{url}&application_name={name}_1", max_connections=1) as store:
        await store.thread_items("thr-1", last=1)
        assert await _scalar(url, alone) == 1


@needs_server
async def test_cancelled_write_is_rolled_back_and_the_store_stays_usable(
    store: PostgresStore, url: str
) -> None:
    await _make_run(store)
    fence = await store.acquire_lease("run-1", "w1", ttl_s=30, now=T0)
    async with await psycopg.AsyncConnection.connect(url) as blocker:
        # Hold the thread row so the append waits inside its transaction.
        await blocker.execute("SELECT 1 FROM threads WHERE thread_id = 'thr-1' FOR UPDATE")
        write = asyncio.ensure_future(
            store.append_items("thr-1", "run-1", [NewItem(role="user", content="x")], fence=fence)
        )
        await asyncio.sleep(0.2)
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
        await blocker.rollback()
    assert await store.thread_items("thr-1") == []
    [row] = await store.append_items(
        "thr-1", "run-1", [NewItem(role="user", content="y")], fence=fence
    )
    assert row.seq == 1


@needs_server
async def test_using_a_closed_store_raises_store_error(store: PostgresStore) -> None:
    await store.close()
    await store.close()  # twice is fine
    with pytest.raises(StoreError, match="not open"):
        await store.get_run("run-1")


@needs_server
async def test_a_run_with_a_tool_call_and_an_approved_gate_completes_across_two_workers(
    url: str,
) -> None:
    sent: list[str] = []

    @tool(effects={"write"}, needs_approval=True, idempotent=False)
    async def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    @tool(effects={"read"})
    async def lookup(name: str) -> str:
        """Look up an address."""
        return f"{name}@example.com"

    model = ScriptedModel(
        [call("lookup", name="bob"), call("send_email", to="bob@example.com"), reply("done")]
    )
    agent = Agent(name="mailer", model=model, tools=[send_email, lookup])
    scope = Scope(tenant="acme", user="ana")
    async with Runtime.open(url, agents=[agent], memory=NativeMemory()) as first:
        blocked = await first.run(agent, "mail bob", scope=scope)
        assert blocked.status == "blocked" and blocked.gate is not None
    assert sent == []
    # Another worker (here: another runtime on the same database) approves and finishes it.
    async with Runtime.open(url, agents=[agent], memory=NativeMemory()) as second:
        done = await second.approve(blocked.gate.ref)
        assert done.status == "completed" and done.text == "done"
        assert sent == ["bob@example.com"]
        run = await second.store.get_run(done.run_id)
        assert run.status == "completed" and run.lease_owner is None
        tool_rows = [i for i in await second.store.thread_items(run.thread_id) if i.role == "tool"]
        assert [i.content for i in tool_rows] == ["bob@example.com", "sent to bob@example.com"]
    # Native memory logged the finished turn in the same database (after the result, before
    # the runtime closed), and search finds it.
    async with Runtime.open(url) as third:
        assert isinstance(third.store, PostgresStore)
        hits = await third.store.search(scope, "mail bob")
        assert hits and hits[0].kind == "log"


@needs_server
async def test_an_append_in_one_store_wakes_a_follower_in_another_through_notify(
    store: PostgresStore, url: str
) -> None:
    async with PostgresStore(url) as elsewhere:
        # The follower waits far longer than the test may take: only NOTIFY can end it early.
        waiting = asyncio.ensure_future(elsewhere.wait_run_events("run-1", timeout_s=600))
        async with asyncio.timeout(30):
            # LISTEN starts with the first wait: append until a notification has come through.
            while not waiting.done():
                await store.append_run_events("run-1", [{"kind": "run_started", "run_id": "r"}])
                await asyncio.wait([waiting], timeout=0.2)
        stored = await elsewhere.run_events("run-1")
    assert waiting.done() and stored and stored[0].kind == "run_started"


def _deltas(runs: list[str]) -> dict[str, list[dict[str, object]]]:
    """One text delta for each run: an event flush of ``runs``."""
    return {run_id: [{"kind": "text_delta", "run_id": run_id}] for run_id in runs}


@needs_server
async def test_a_batch_of_many_runs_wakes_a_follower_of_each_in_another_store(
    store: PostgresStore, url: str
) -> None:
    runs = [f"run-{i}" for i in range(5)]
    async with PostgresStore(url) as elsewhere:
        waiting = {
            run_id: asyncio.ensure_future(elsewhere.wait_run_events(run_id, timeout_s=600))
            for run_id in runs
        }
        async with asyncio.timeout(30):
            # LISTEN starts with the first wait: append until every follower has been woken.
            while not all(w.done() for w in waiting.values()):
                await store.append_event_batches(_deltas(runs))
                await asyncio.wait(list(waiting.values()), timeout=0.2)
        stored = {run_id: await elsewhere.run_events(run_id) for run_id in runs}
    assert all(stored[run_id] for run_id in runs)


@needs_server
async def test_concurrent_batches_over_shared_runs_from_two_stores_number_each_run_gap_free(
    store: PostgresStore, url: str
) -> None:
    # Each batch locks its runs in one statement; two appenders whose batches share runs
    # (in any order of the mappings) never deadlock and never hand out a seq twice.
    runs = [f"run-{i}" for i in range(6)]
    async with PostgresStore(url) as other:

        async def append(target: PostgresStore, start: int) -> None:
            for k in range(10):
                picked = [runs[(start + k + j) % len(runs)] for j in range(4)]
                if k % 2:
                    picked.reverse()
                await target.append_event_batches(_deltas(picked))

        async with asyncio.timeout(60):
            await asyncio.gather(*(append(s, i) for i, s in enumerate([store, other] * 3)))
    total = 0
    for run_id in runs:
        seqs = [r.seq for r in await store.run_events(run_id)]
        assert seqs == list(range(1, len(seqs) + 1))
        total += len(seqs)
    assert total == 6 * 10 * 4


@needs_server
async def test_two_stores_starting_a_run_on_one_new_thread_at_once_start_exactly_one(
    store: PostgresStore, url: str
) -> None:
    # Both take the one-statement start of a new thread: the second's insert of the thread
    # waits for the first's, then writes nothing, and its checked start finds the thread busy.
    async def start(target: PostgresStore, thread_id: str, run_id: str) -> object:
        return await target.start_segment(
            RunRecord(run_id=run_id, thread_id=thread_id, scope=ANA, agent_name="assistant"),
            [NewItem(role="user", content=run_id)],
            owner=run_id,
            ttl_s=60,
            now=T0,
            create_thread=True,
            window=8,
        )

    async with PostgresStore(url) as other:
        for n in range(10):
            thread_id = f"thr-new-{n}"
            outcomes = await asyncio.gather(
                start(store, thread_id, f"run-a{n}"),
                start(other, thread_id, f"run-b{n}"),
                return_exceptions=True,
            )
            failed = [o for o in outcomes if isinstance(o, BaseException)]
            assert len(failed) == 1 and isinstance(failed[0], ThreadBusy), outcomes
            [won] = [o for o in outcomes if not isinstance(o, BaseException)]
            assert isinstance(won, SegmentStart)
            rows = await store.thread_items(thread_id)
            assert [r.content for r in rows] == [won.run.run_id]  # the winner's row, once
            assert (await store.active_run(thread_id)) is not None
