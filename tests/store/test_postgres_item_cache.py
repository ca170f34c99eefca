"""The item cache of :class:`PostgresStore` (reverie.store.item_cache): never stale, bounded.

The cache keeps decoded transcript rows per thread; every read still asks the database which
rows the answer holds, so another worker's appends and supersedes are always seen. Tests with
two stores on one database need ``REVERIE_TEST_POSTGRES_URL`` (each gets a fresh schema); the
bounds of the cache itself are also tested without a server.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import pytest

from reverie import Agent, Runtime, Scope
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.core.transcript import TranscriptItem
from reverie.store import NewItem, RunRecord
from reverie.store.base import StepWrite
from reverie.store.item_cache import ItemCache, row_size
from reverie.store.postgres import PostgresStore, temporary_schema
from reverie.testing import ScriptedModel, reply

POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")
F = TypeVar("F", bound=Callable[..., Any])
ANA = Scope(tenant="acme", user="ana")


def needs_server(test: F) -> F:
    """Mark a test that needs the server: ``-m postgres`` selects it; skipped without one."""
    skip = pytest.mark.skipif(
        not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL; .ci/run starts a server"
    )
    marked: F = pytest.mark.postgres(skip(test))
    return marked


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with temporary_schema(POSTGRES_URL, prefix="reverie_test") as scoped:
        yield scoped


async def _thread(store: PostgresStore, thread_id: str, n: int, *, size: int = 10) -> None:
    await store.create_thread(thread_id, ANA)
    rows = [NewItem(role="user", content=f"{i:04d}" + "x" * size) for i in range(n)]
    await store.append_items(thread_id, None, rows, fence=None)


def _texts(items: list[TranscriptItem]) -> list[str]:
    return [i.content[:4] for i in items]


async def _fresh_read(url: str, thread_id: str, **kwargs: Any) -> list[TranscriptItem]:
    """What a store with nothing cached reads."""
    async with PostgresStore(url, item_cache_threads=0) as fresh:
        return await fresh.thread_items(thread_id, **kwargs)


# never stale -------------------------------------------------------------------------------
@needs_server
@pytest.mark.parametrize("last", [None, 3])
async def test_a_cached_thread_shows_the_rows_another_store_appended(
    url: str, last: int | None
) -> None:
    async with PostgresStore(url) as a, PostgresStore(url) as b:
        await _thread(a, "t", 4)
        first = await a.thread_items("t", last=last)
        assert a.item_cache.threads == 1
        # Another worker appends: once plainly, once with a run's step commit.
        await b.append_items("t", None, [NewItem(role="user", content="0004")], fence=None)
        await b.create_run(RunRecord(run_id="r", thread_id="t", scope=ANA, agent_name="x"))
        fence = await b.acquire_lease("r", "worker-b", ttl_s=60, now=1.0)
        row = TranscriptItem(
            ref="itm-b", seq=6, thread_id="t", run_id="r", role="assistant", content="0005"
        )
        step = StepWrite(thread_id="t", items=[row], after_seq=5)
        await b.commit_step("r", step, fence=fence)
        second = await a.thread_items("t", last=last)
        assert second == await _fresh_read(url, "t", last=last)
    assert _texts(first) == ["0000", "0001", "0002", "0003"][-(last or 4) :]
    assert _texts(second)[-2:] == ["0004", "0005"]


@needs_server
async def test_a_cached_thread_never_shows_rows_another_store_superseded(url: str) -> None:
    async with PostgresStore(url) as a, PostgresStore(url) as b:
        await a.create_thread("t", ANA)
        await a.create_run(RunRecord(run_id="r", thread_id="t", scope=ANA, agent_name="x"))
        rows = [NewItem(role="user", content=f"{i:04d}") for i in range(5)]
        await a.append_items("t", "r", rows, fence=None)
        assert _texts(await a.thread_items("t")) == ["0000", "0001", "0002", "0003", "0004"]
        # A takeover on another worker drops what the crashed segment wrote past seq 2; the
        # thread's head does not move, but a's cached rows 3 and 4 must not come back.
        await b.supersede_items_after("t", "r", 2)
        assert _texts(await a.thread_items("t")) == ["0000", "0001"]
        assert _texts(await a.thread_items("t", last=4)) == ["0000", "0001"]
        assert _texts(await a.thread_items("t", upto_seq=4)) == ["0000", "0001"]
        assert await a.thread_items("t") == await _fresh_read(url, "t")


@needs_server
async def test_a_runtime_sees_the_turns_another_runtime_took_on_the_thread(url: str) -> None:
    seen: list[list[str]] = []

    def answer(request: ModelRequest) -> ModelResponse:
        seen.append([m.content for m in request.messages if m.role == "user"])
        return reply(f"answer {len(seen)}")

    agent = Agent(name="chat", model=ScriptedModel(answer))
    async with Runtime(PostgresStore(url)) as first, Runtime(PostgresStore(url)) as second:
        one = await first.run(agent, "one", scope=ANA)
        await second.run(agent, "two", scope=ANA, thread_id=one.thread_id)
        await first.run(agent, "three", scope=ANA, thread_id=one.thread_id)
    assert seen[-1] == ["one", "two", "three"]


@needs_server
async def test_a_second_read_of_a_thread_reuses_the_decoded_rows(url: str) -> None:
    async with PostgresStore(url) as store:
        await _thread(store, "t", 5)
        first = await store.thread_items("t", last=3)
        again = await store.thread_items("t")
    assert again[-3:] == first
    assert all(x is y for x, y in zip(again[-3:], first, strict=True))


# bounded ---------------------------------------------------------------------------------
@needs_server
async def test_the_item_cache_keeps_at_most_its_thread_bound(url: str) -> None:
    async with PostgresStore(url, item_cache_threads=3) as store:
        for n in range(6):
            await _thread(store, f"t{n}", 2)
            assert _texts(await store.thread_items(f"t{n}")) == ["0000", "0001"]
            assert store.item_cache.threads <= 3
        assert _texts(await store.thread_items("t0")) == ["0000", "0001"]  # read again in full


@needs_server
async def test_the_item_cache_keeps_at_most_its_byte_bound(url: str) -> None:
    budget = 8_000
    async with PostgresStore(url, item_cache_bytes=budget) as store:
        await _thread(store, "big", 40, size=1_000)  # ~50 KB: more than the whole budget
        rows = await store.thread_items("big")
        assert store.item_cache.bytes <= budget
        assert _texts(rows) == [f"{i:04d}" for i in range(40)]
        assert await store.thread_items("big") == rows  # the newest rows cached, the rest read
        for n in range(5):
            await _thread(store, f"t{n}", 3, size=500)
            await store.thread_items(f"t{n}")
            assert store.item_cache.bytes <= budget


def _item(seq: int, content: str = "", run_id: str | None = None) -> TranscriptItem:
    return TranscriptItem(
        ref=f"itm-{seq}", seq=seq, thread_id="t", run_id=run_id, role="user", content=content
    )


def test_the_item_cache_drops_the_least_recently_used_thread_first() -> None:
    cache = ItemCache(max_threads=2)
    cache.read("a", [_item(1)])
    cache.read("b", [_item(1)])
    assert cache.entry("a") is not None  # a is now the most recently used
    cache.read("c", [_item(1)])
    assert cache.entry("b") is None
    assert cache.entry("a") is not None and cache.entry("c") is not None
    assert cache.threads == 2


def test_the_item_cache_counts_its_bytes_and_keeps_a_large_threads_newest_rows() -> None:
    one = row_size(_item(1, "x" * 100))
    cache = ItemCache(max_bytes=3 * one)
    cache.read("t", [_item(seq, "x" * 100) for seq in range(1, 11)])
    entry = cache.entry("t")
    assert entry is not None
    assert sorted(entry.rows) == [8, 9, 10] and entry.span == (8, 10)
    assert cache.bytes == 3 * one


def test_the_item_cache_extends_a_range_only_with_rows_right_after_it() -> None:
    cache = ItemCache()
    cache.read("t", [_item(1), _item(2)])
    cache.appended("t", [_item(4)])  # seq 3 was written by someone else: not cached
    entry = cache.entry("t")
    assert entry is not None and entry.span == (1, 2)
    cache.appended("t", [_item(3), _item(4)])
    assert entry.span == (1, 4) and sorted(entry.rows) == [1, 2, 3, 4]


def test_the_item_cache_forgets_rows_the_store_superseded() -> None:
    cache = ItemCache()
    cache.read("t", [_item(1, run_id="r"), _item(2, run_id="r"), _item(3, run_id="q")])
    before = cache.bytes
    cache.superseded("t", "r", 1)
    entry = cache.entry("t")
    assert entry is not None and sorted(entry.rows) == [1, 3]
    assert cache.bytes == before - row_size(_item(2, run_id="r"))
