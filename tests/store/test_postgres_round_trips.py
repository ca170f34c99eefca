"""Round trips of :class:`PostgresStore` step commits (docs/benchmarks.md: a step's cost).

A relay between the store and the server reads the client's protocol messages: the statements
it sends (``Parse``) and the points where it asks for results and waits for them (``Sync``,
``Flush``). A step commit is one statement (a call of the schema's ``reverie_commit_step``),
so one round trip. Needs ``REVERIE_TEST_POSTGRES_URL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
from collections.abc import AsyncIterator

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from reverie import Scope
from reverie.core.transcript import TranscriptItem
from reverie.errors import LeaseLost, TranscriptConflict
from reverie.store import NewItem, RunRecord
from reverie.store.base import SegmentStart, StepWrite
from reverie.store.postgres import PostgresStore, temporary_schema

POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL; .ci/run starts a server"
    ),
]
ANA = Scope(tenant="acme", user="ana")


class Relay:
    """Forwards connections to the server and counts the client's ``Sync``/``Flush`` messages."""

    def __init__(self, url: str) -> None:
        params = conninfo_to_dict(url)
        self.host = str(params.get("host") or "localhost")
        self.port = int(params.get("port") or 5432)
        self.url = url
        self.sent: list[str] = []
        """``"BEGIN"``, ``"COMMIT"``, … per statement, ``"wait"`` per Sync or Flush."""
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> tuple[asyncio.Server, str]:
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        # No TLS or GSS negotiation: the first message is the startup packet.
        url = make_conninfo(
            self.url, host="127.0.0.1", port=port, sslmode="disable", gssencmode="disable"
        )
        return server, url

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        try:
            await asyncio.gather(self._client(reader, up_writer), self._copy(up_reader, writer))
        finally:
            self._tasks.discard(task)

    async def _client(self, reader: asyncio.StreamReader, out: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            (length,) = struct.unpack("!i", head := await reader.readexactly(4))
            out.write(head + await reader.readexactly(length - 4))  # the startup packet
            while True:
                head = await reader.readexactly(5)
                kind, length = head[:1], struct.unpack("!i", head[1:])[0]
                body = await reader.readexactly(length - 4)
                if kind in (b"S", b"H"):
                    self.sent.append("wait")
                elif kind == b"P":  # Parse: statement name, then the query text
                    query = body.split(b"\x00")[1].decode()
                    self.sent.append(query.split(None, 1)[0].upper())
                out.write(head + body)
                await out.drain()
        out.close()

    async def _copy(self, reader: asyncio.StreamReader, out: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(1 << 16):
                out.write(data)
                await out.drain()
        out.close()


@pytest.fixture
async def relayed() -> AsyncIterator[tuple[PostgresStore, Relay]]:
    async with temporary_schema(POSTGRES_URL, prefix="reverie_test") as url:
        relay = Relay(url)
        server, through = await relay.start()
        try:
            async with PostgresStore(through, max_connections=1) as store:  # one connection reused
                yield store, relay
        finally:
            server.close()


async def _running(store: PostgresStore) -> int:
    await store.create_thread("t", ANA)
    await store.create_run(RunRecord(run_id="r", thread_id="t", scope=ANA, agent_name="x"))
    await store.append_items("t", "r", [NewItem(role="user", content="go")], fence=None)
    return await store.acquire_lease("r", "me", ttl_s=60, now=1.0)


def _step(seq: int, *, guard: int | None = None) -> StepWrite:
    row = TranscriptItem(
        ref=f"itm-{seq}", seq=seq, thread_id="t", run_id="r", role="assistant", content="hi"
    )
    return StepWrite(
        thread_id="t",
        items=[row],
        after_seq=seq - 1,
        checkpoint_kind="BeforeModel",
        checkpoint=b"state",
        ack_cursor=0,
        guard_cursor=guard,
    )


def _waits_before_the_last_statement(sent: list[str]) -> int:
    """How often the client waited for results before it had sent all its statements."""
    last = max(i for i, token in enumerate(sent) if token != "wait")
    return sent[:last].count("wait")


async def test_a_step_commit_is_one_round_trip(relayed: tuple[PostgresStore, Relay]) -> None:
    store, relay = relayed
    fence = await _running(store)
    start = len(relay.sent)
    receipt = await store.commit_step("r", _step(2, guard=0), fence=fence)
    assert _waits_before_the_last_statement(relay.sent[start:]) == 0
    assert receipt.head_seq == 2 and not receipt.inputs_waiting
    cp = await store.load_checkpoint("r")
    assert cp is not None and cp.payload == b"state"


async def test_a_step_commit_is_one_statement(relayed: tuple[PostgresStore, Relay]) -> None:
    store, relay = relayed
    fence = await _running(store)
    for seq in (2, 3):
        start = len(relay.sent)
        await store.commit_step("r", _step(seq, guard=0), fence=fence)
        assert relay.sent[start:] == ["SELECT", "wait"]  # a call of reverie_commit_step


async def test_a_refused_step_commit_writes_nothing_and_leaves_the_connection_usable(
    relayed: tuple[PostgresStore, Relay],
) -> None:
    store, _ = relayed
    fence = await _running(store)
    with pytest.raises(LeaseLost):
        await store.commit_step("r", _step(2), fence=fence + 1)
    with pytest.raises(TranscriptConflict):
        await store.commit_step("r", _step(3), fence=fence)
    assert await store.load_checkpoint("r") is None
    assert [i.seq for i in await store.thread_items("t")] == [1]
    receipt = await store.commit_step("r", _step(2), fence=fence)
    assert receipt.head_seq == 2


async def test_a_step_with_an_input_waiting_writes_its_rows_but_not_its_checkpoint_in_one_trip(
    relayed: tuple[PostgresStore, Relay],
) -> None:
    store, relay = relayed
    fence = await _running(store)
    await store.enqueue_input("r", "steering", {"text": "also"}, input_id="in-1")
    start = len(relay.sent)
    receipt = await store.commit_step("r", _step(2, guard=0), fence=fence)
    assert _waits_before_the_last_statement(relay.sent[start:]) == 0
    assert receipt.inputs_waiting
    assert await store.load_checkpoint("r") is None
    assert [i.seq for i in await store.thread_items("t")] == [1, 2]


async def test_an_event_batch_is_one_statement_for_fifty_runs_as_for_two(
    relayed: tuple[PostgresStore, Relay],
) -> None:
    # A call of reverie_append_events: the locks, the seqs, the rows, the bound and the
    # notifications of every run of the flush. A flush of a thousand runs' events costs the
    # client one statement, as one of two runs does.
    store, relay = relayed
    sent: list[list[str]] = []
    for width in (2, 50):
        start = len(relay.sent)
        await store.append_event_batches(
            {f"run-{width}-{i}": [{"kind": "run_started"}] for i in range(width)}
        )
        sent.append([token for token in relay.sent[start:] if token != "wait"])
    assert sent == [["SELECT"], ["SELECT"]]  # no BEGIN, no COMMIT: its own transaction


async def test_a_segment_end_is_one_statement_in_a_transaction_of_its_own(
    relayed: tuple[PostgresStore, Relay],
) -> None:
    store, relay = relayed
    fence = await _running(store)
    start = len(relay.sent)
    ended = await store.end_segment("r", "completed", fence=fence, exit={"kind": "completed"})
    assert relay.sent[start:] == ["UPDATE", "wait"]  # no BEGIN, no COMMIT
    assert ended.status == "completed" and ended.lease_owner is None
    assert (await store.get_run("r")).status == "completed"


async def test_a_segment_end_under_a_stale_fence_writes_nothing_and_says_lease_lost(
    relayed: tuple[PostgresStore, Relay],
) -> None:
    store, _ = relayed
    fence = await _running(store)
    with pytest.raises(LeaseLost):
        await store.end_segment("r", "completed", fence=fence + 1, exit={"kind": "completed"})
    run = await store.get_run("r")
    assert run.status != "completed" and run.lease_owner == "me"
    # The connection (the store's only one) is still usable: the right fence ends the run.
    ended = await store.end_segment("r", "failed", fence=fence, exit={"kind": "failed"})
    assert ended.status == "failed"


async def _start_on_thread_t(store: PostgresStore) -> SegmentStart:
    """Run ``r`` started with its segment on thread ``t`` (created if missing), saying "go"."""
    return await store.start_segment(
        RunRecord(run_id="r", thread_id="t", scope=ANA, agent_name="x"),
        [NewItem(role="user", content="go")],
        owner="me",
        ttl_s=60,
        now=1.0,
        create_thread=True,
        window=8,
    )


async def test_a_run_started_on_a_new_thread_is_one_statement_in_a_transaction_of_its_own(
    relayed: tuple[PostgresStore, Relay],
) -> None:
    store, relay = relayed
    start = len(relay.sent)
    started = await _start_on_thread_t(store)
    # The thread, the run (leased, running) and its opening row: one statement, no BEGIN.
    assert relay.sent[start:] == ["WITH", "wait"]
    assert started.run.status == "running" and started.head_seq == 1
    assert [i.content for i in started.items] == ["go"]
    assert [i.content for i in await store.thread_items("t")] == ["go"]
    assert (await store.get_run("r")).lease_owner == "me"


async def test_a_run_started_on_an_existing_thread_takes_the_checked_path_and_writes_once(
    relayed: tuple[PostgresStore, Relay],
) -> None:
    store, _ = relayed
    await store.create_thread("t", ANA)
    await store.append_items("t", None, [NewItem(role="user", content="before")], fence=None)
    started = await _start_on_thread_t(store)
    # The one-statement start wrote nothing (the thread existed); the checked one wrote once.
    assert started.head_seq == 2
    assert [i.content for i in await store.thread_items("t")] == ["before", "go"]
