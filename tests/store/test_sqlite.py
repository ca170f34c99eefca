"""SQLite-specific behaviour of :class:`SQLiteStore` (the shared rules are in tests/conformance)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from reverie.core.scope import Scope
from reverie.errors import ConfigError, LeaseLost, RunBusy, StoreError
from reverie.store import (
    GateRecord,
    MemoryStore,
    NewItem,
    RunRecord,
    SQLiteStore,
    TranscriptItem,
    default_store_url,
    open_store,
)
from reverie.store.base import JournalWrite, StepWrite
from reverie.store.migrations import SCHEMA_VERSION
from reverie.store.sqlite_schema import ItemCache

ANA = Scope(tenant="acme", user="ana", project="p1")
T0 = 1_000.0


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "nested" / "dir" / "reverie.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(db_path) as opened:
        yield opened


async def _make_run(store: SQLiteStore, run_id: str = "run-1") -> None:
    # A thread per run (run-1 on thr-1): a thread holds one active run at a time.
    thread_id = "thr-" + run_id.removeprefix("run-")
    await store.create_thread(thread_id, ANA)
    await store.create_run(
        RunRecord(run_id=run_id, thread_id=thread_id, scope=ANA, agent_name="assistant")
    )


async def _scalar(path: Path, sql: str) -> object:
    async with aiosqlite.connect(path) as db:
        rows = list(await db.execute_fetchall(sql))
    return rows[0][0]


async def test_open_creates_the_parent_directory_and_the_file(db_path: Path) -> None:
    async with SQLiteStore(db_path):
        pass
    assert await asyncio.to_thread(db_path.is_file)


async def test_data_survives_close_and_reopen(store: SQLiteStore, db_path: Path) -> None:
    await _make_run(store)
    fence = await store.acquire_lease("run-1", "w1", ttl_s=30, now=T0)
    items = await store.append_items(
        "thr-1", "run-1", [NewItem(role="user", content="hi", input_id="in-1")], fence=fence
    )
    await store.save_checkpoint("run-1", "BeforeModel", b"\x00state", fence=fence)
    await store.journal_started("run-1", "call-1", "send_email", fence=fence)
    await store.journal_finished("run-1", "call-1", {"ok": True}, fence=fence)
    await store.enqueue_input("run-1", "steering", {"text": "also"}, input_id="in-2")
    gate = GateRecord(
        ref="gate-1",
        run_id="run-1",
        call_id="call-2",
        tool="send_email",
        arguments={"to": "x"},
        scope=ANA,
        created_at=T0,
    )
    await store.create_gate(gate, fence=fence)
    run = await store.get_run("run-1")
    await store.close()

    async with SQLiteStore(db_path) as reopened:
        assert (await reopened.get_thread("thr-1")).scope == ANA
        assert await reopened.get_run("run-1") == run
        assert await reopened.thread_items("thr-1") == items
        checkpoint = await reopened.load_checkpoint("run-1")
        assert checkpoint is not None and checkpoint.payload == b"\x00state"
        journal = await reopened.journal_get("run-1", ["call-1"])
        assert journal["call-1"].outcome == {"ok": True}
        [queued] = await reopened.poll_inputs("run-1", after_cursor=0)
        assert (queued.input_id, queued.payload) == ("in-2", {"text": "also"})
        assert await reopened.get_gate("gate-1") == gate
        # The fence is durable too: the next lease continues from it.
        assert await reopened.acquire_lease("run-1", "w1", ttl_s=30, now=T0 + 1) == fence + 1


async def test_wal_mode_and_synchronous_normal_are_applied(
    store: SQLiteStore, db_path: Path
) -> None:
    settings = await store.connection_settings()
    assert settings["journal_mode"] == "wal"
    assert settings["synchronous"] == 1  # NORMAL
    assert settings["foreign_keys"] == 1
    assert settings["busy_timeout"] == 5000
    # WAL is a property of the file: a fresh connection sees it too.
    assert await _scalar(db_path, "PRAGMA journal_mode") == "wal"


async def test_synchronous_setting_is_configurable(db_path: Path) -> None:
    async with SQLiteStore(db_path, synchronous="full") as store:
        assert (await store.connection_settings())["synchronous"] == 2  # FULL


def test_invalid_synchronous_setting_raises_config_error(db_path: Path) -> None:
    with pytest.raises(ConfigError, match="synchronous"):
        SQLiteStore(db_path, synchronous="SOMETIMES")


def test_memory_path_is_refused_with_a_pointer_to_memory_store() -> None:
    with pytest.raises(ConfigError, match="MemoryStore"):
        SQLiteStore(":memory:")


async def test_schema_version_is_recorded(store: SQLiteStore, db_path: Path) -> None:
    assert await _scalar(db_path, "SELECT MAX(version) FROM schema_version") == SCHEMA_VERSION


async def test_reopening_does_not_migrate_again(store: SQLiteStore, db_path: Path) -> None:
    await store.close()
    async with SQLiteStore(db_path):
        pass
    assert await _scalar(db_path, "SELECT COUNT(*) FROM schema_version") == SCHEMA_VERSION


async def test_database_from_a_newer_schema_is_refused(store: SQLiteStore, db_path: Path) -> None:
    await store.close()
    async with aiosqlite.connect(db_path) as db:
        await db.execute(
            "INSERT INTO schema_version (version, name, applied_at) VALUES (?, 'future', 0)",
            (SCHEMA_VERSION + 1,),
        )
        await db.commit()
    newer = SQLiteStore(db_path)
    with pytest.raises(StoreError, match=r"schema version \d+, newer .* upgrade reverie"):
        await newer.open()
    with pytest.raises(StoreError, match="not open"):
        await newer.get_run("run-1")


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes(b"this is not a database" * 300 if how == "garbage" else data[:1000])


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
async def test_damaged_database_file_raises_store_error(
    store: SQLiteStore, db_path: Path, damage: str
) -> None:
    await _make_run(store)
    await store.close()
    await asyncio.to_thread(_damage, db_path, damage)
    with pytest.raises(StoreError) as caught:
        await SQLiteStore(db_path).open()
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)


async def test_using_a_closed_store_raises_store_error(store: SQLiteStore) -> None:
    await store.close()
    await store.close()  # closing twice is fine
    with pytest.raises(StoreError, match="not open"):
        await store.create_thread("thr-1", ANA)


async def test_two_instances_opening_a_fresh_file_at_once_both_succeed(tmp_path: Path) -> None:
    for n in range(5):
        a, b = SQLiteStore(tmp_path / f"{n}.db"), SQLiteStore(tmp_path / f"{n}.db")
        await asyncio.gather(a.open(), b.open())
        try:
            await _make_run(a)
            assert (await b.get_run("run-1")).run_id == "run-1"
        finally:
            await asyncio.gather(a.close(), b.close())


async def test_two_instances_racing_for_a_lease_exactly_one_wins(db_path: Path) -> None:
    async with SQLiteStore(db_path) as a, SQLiteStore(db_path) as b:
        for n in range(10):
            run_id = f"run-{n}"
            await _make_run(a, run_id)
            results = await asyncio.gather(
                a.acquire_lease(run_id, "worker-a", ttl_s=30, now=T0),
                b.acquire_lease(run_id, "worker-b", ttl_s=30, now=T0),
                return_exceptions=True,
            )
            fences = [r for r in results if isinstance(r, int)]
            busy = [r for r in results if isinstance(r, RunBusy)]
            assert (len(fences), len(busy)) == (1, 1), results
            winner = "worker-a" if isinstance(results[0], int) else "worker-b"
            rec = await b.get_run(run_id)
            assert (rec.lease_owner, rec.fence) == (winner, fences[0])


_LEASE_RACER = """
import asyncio, sys
from reverie.errors import RunBusy
from reverie.store import SQLiteStore

async def main(path, owner, runs):
    async with SQLiteStore(path) as store:
        for n in range(runs):
            try:
                await store.acquire_lease(f"run-{n}", owner, ttl_s=30, now=1000.0)
                print(f"run-{n}")
            except RunBusy:
                pass

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_two_processes_racing_for_leases_never_both_win(db_path: Path) -> None:
    runs = 40
    async with SQLiteStore(db_path) as store:
        for n in range(runs):
            await _make_run(store, f"run-{n}")
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _LEASE_RACER,
            str(db_path),
            owner,
            str(runs),
            stdout=asyncio.subprocess.PIPE,
        )
        for owner in ("proc-a", "proc-b")
    ]
    outputs = [(await proc.communicate())[0].decode().split() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    won = outputs[0] + outputs[1]
    assert sorted(won) == sorted(f"run-{n}" for n in range(runs))


async def test_takeover_by_another_instance_fences_out_the_old_owner(db_path: Path) -> None:
    async with SQLiteStore(db_path) as a, SQLiteStore(db_path) as b:
        await _make_run(a)
        old = await a.acquire_lease("run-1", "worker-a", ttl_s=30, now=T0)
        await b.acquire_lease("run-1", "worker-b", ttl_s=30, now=T0 + 31)
        with pytest.raises(LeaseLost):
            await a.save_checkpoint("run-1", "BeforeModel", b"stale", fence=old)
        assert await b.load_checkpoint("run-1") is None


async def test_concurrent_appends_from_two_instances_keep_seq_unique_and_gap_free(
    db_path: Path,
) -> None:
    async with SQLiteStore(db_path) as a, SQLiteStore(db_path) as b:
        await a.create_thread("thr-1", ANA)

        async def writer(store: SQLiteStore, name: str) -> None:
            for n in range(20):
                items = [NewItem(role="assistant", content=f"{name}{n}.{k}") for k in range(2)]
                await store.append_items("thr-1", None, items, fence=None)

        await asyncio.gather(writer(a, "a"), writer(b, "b"), writer(a, "c"), writer(b, "d"))
        rows = await a.thread_items("thr-1")
    assert [r.seq for r in rows] == list(range(1, 161))
    # Each call's two items are adjacent: an append is one transaction.
    for first, second in zip(rows[::2], rows[1::2], strict=True):
        assert first.content.endswith(".0") and second.content.endswith(".1")
        assert first.content[:-2] == second.content[:-2]


async def test_cancelled_write_is_rolled_back_whole_and_the_store_stays_usable(
    store: SQLiteStore,
) -> None:
    await store.create_thread("thr-1", ANA)
    batch = [NewItem(role="assistant", content=str(k)) for k in range(100)]
    for delay in (0, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02):
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await store.append_items("thr-1", None, batch, fence=None)
    await store.append_items("thr-1", None, batch[:1], fence=None)
    rows = await store.thread_items("thr-1")
    assert len(rows) % 100 == 1
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))


async def test_transcript_reads_see_supersede_even_when_cached(tmp_path: Path) -> None:
    """Decoded rows are cached; a supersede by another instance still shows at once."""
    async with SQLiteStore(tmp_path / "x.db") as a, SQLiteStore(tmp_path / "x.db") as b:
        await a.create_thread("thr-1", ANA)
        rows = await a.append_items("thr-1", "run-1", [NewItem(role="user")] * 3, fence=None)
        assert await a.thread_items("thr-1") == rows
        await b.supersede_items_after("thr-1", "run-1", 1)
        assert await a.thread_items("thr-1") == rows[:1]
        assert [r.superseded for r in await a.get_items([r.ref for r in rows])] == [
            False,
            True,
            True,
        ]


def test_item_cache_keeps_at_most_its_size() -> None:
    cache = ItemCache(size=2)
    with contextlib.closing(sqlite3.connect(":memory:")) as db:
        db.row_factory = sqlite3.Row
        for n in range(3):
            row = db.execute(
                "SELECT ? AS ref, 1 AS seq, 't' AS thread_id, NULL AS run_id, 'user' AS role,"
                " '' AS content, '[]' AS tool_calls, NULL AS tool_call_id, NULL AS name,"
                " NULL AS input_id, '{}' AS meta, 0 AS superseded",
                (f"itm-{n}",),
            ).fetchone()
            assert cache.decode(row).ref == f"itm-{n}"
            assert cache.decode(row) is cache.decode(row)
    assert len(cache) == 2


_PLAIN = (int, float, str, bytes, type(None))
"""What the ``sqlite3`` module binds at once; any other type (a ``bool`` too) is first looked up
as an adapter, which fails through an ``AttributeError`` raised and cleared per parameter."""


def _record_bound_types(monkeypatch: pytest.MonkeyPatch) -> list[type]:
    """Every connection opened from now on records the types of the parameters it binds."""
    bound: list[type] = []

    class Recording(sqlite3.Connection):
        def execute(self, sql: str, params: Any = (), /) -> sqlite3.Cursor:
            bound.extend(type(p) for p in params)
            return super().execute(sql, params)

        def executemany(self, sql: str, rows: Any, /) -> sqlite3.Cursor:
            rows = [tuple(row) for row in rows]
            bound.extend(type(p) for row in rows for p in row)
            return super().executemany(sql, rows)

    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: connect(*a, **k, factory=Recording))
    return bound


async def test_a_step_commit_binds_only_plain_parameters(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bound = _record_bound_types(monkeypatch)
    async with SQLiteStore(db_path) as store:
        await store.create_thread("thr-1", ANA)
        await store.create_run(
            RunRecord(run_id="run-1", thread_id="thr-1", scope=ANA, agent_name="a")
        )
        fence = await store.acquire_lease("run-1", "w1", ttl_s=60, now=1.0)
        item = TranscriptItem(
            ref="itm-1", seq=1, thread_id="thr-1", run_id="run-1", role="tool", content="1"
        )
        step = StepWrite(
            thread_id="thr-1",
            items=[item],
            after_seq=0,
            journal=[JournalWrite(call_id="c1", tool="t", state="finished", outcome={"ok": True})],
            checkpoint_kind="BeforeModel",
            checkpoint=b"state",
            guard_cursor=0,
        )
        bound.clear()
        await store.commit_step("run-1", step, fence=fence)
    assert bound and {t for t in bound if t not in _PLAIN} == set()


async def test_a_whole_run_binds_only_plain_parameters(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its start, its segment, a tool step, its reply and its end: a bool would pay the
    # sqlite3 module's failed adapter lookup at every one of them.
    from reverie import Agent, Runtime, tool
    from reverie.testing import ScriptedModel, call, reply

    @tool(effects=set())
    async def bump(n: int) -> int:
        """Return n + 1."""
        return n + 1

    bound = _record_bound_types(monkeypatch)
    agent = Agent(name="a", model=ScriptedModel([call("bump", n=1), reply("done")]), tools=[bump])
    async with Runtime.open(f"sqlite:///{db_path}") as rt:
        bound.clear()
        result = await rt.run(agent, "go", scope=ANA)
    assert result.status == "completed"
    assert bound and {t for t in bound if t not in _PLAIN} == set()


def test_item_cache_evicts_its_oldest_entry_first() -> None:
    cache = ItemCache(size=3)
    items = [
        TranscriptItem(
            ref=f"itm-{n}", seq=n, thread_id="t", run_id=None, role="user", content=f"{n}"
        )
        for n in range(1, 8)
    ]
    for item in items:
        cache.add([item])
        assert cache.get(item.ref) is item
    assert cache.missing([item.ref for item in items]) == ["itm-1", "itm-2", "itm-3", "itm-4"]
    assert [cache.get(item.ref) for item in items[4:]] == items[4:]


# open_store / default_store_url --------------------------------------------------------------
def test_open_store_memory_url_gives_a_memory_store() -> None:
    assert isinstance(open_store(":memory:"), MemoryStore)


def test_open_store_sqlite_urls_and_bare_db_paths(tmp_path: Path) -> None:
    relative = open_store("sqlite:///data/x.db")
    assert isinstance(relative, SQLiteStore) and relative.path == Path("data/x.db")
    absolute = open_store(f"sqlite:///{tmp_path}/x.db?synchronous=FULL")
    assert isinstance(absolute, SQLiteStore)
    assert (absolute.path, absolute.synchronous) == (tmp_path / "x.db", "FULL")
    bare = open_store(str(tmp_path / "y.db"))
    assert isinstance(bare, SQLiteStore) and bare.path == tmp_path / "y.db"


@pytest.mark.parametrize(
    "url", ["mysql://localhost/db", "x.txt", "sqlite:///", "sqlite:///x.db?journal=off", ""]
)
def test_open_store_unknown_url_names_the_accepted_forms(url: str) -> None:
    with pytest.raises(ConfigError, match="sqlite:///"):
        open_store(url)


async def test_default_store_url_lives_under_reverie_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("REVERIE_HOME", str(home))
    url = default_store_url()
    assert url == f"sqlite:///{home}/reverie.db"
    store = open_store(url)
    await store.open()
    await store.close()
    assert await asyncio.to_thread((home / "reverie.db").is_file)


def test_default_store_url_defaults_to_dot_reverie(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REVERIE_HOME", raising=False)
    assert default_store_url() == f"sqlite:///{Path.home() / '.reverie' / 'reverie.db'}"
