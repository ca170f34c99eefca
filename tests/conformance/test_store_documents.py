"""DESIGN §12, native memory storage: every backend passes the same ``DocumentStore`` suite."""

from __future__ import annotations

import asyncio
from datetime import date

import pytest

from conformance.support import ANA, BOB
from reverie.core.scope import Scope
from reverie.errors import ConflictError
from reverie.store import Document, DocumentStore, MemoryPassRecord, Store

OTHER_TENANT = Scope(tenant="globex", user="ana")
ANA_PROJECT = Scope(tenant="acme", user="ana", project="apollo")
DAY = date(2025, 1, 2)


def docs(store: Store) -> DocumentStore:
    assert isinstance(store, DocumentStore)
    return store


async def test_every_backend_is_a_document_store(store: Store) -> None:
    assert isinstance(store, DocumentStore)


async def test_missing_document_reads_none_and_first_write_is_version_one(store: Store) -> None:
    d = docs(store)
    assert await d.read_document(ANA, "MEMORY.md") is None
    written = await d.write_document(ANA, "MEMORY.md", "likes tea", expected_version=0)
    assert written == Document(text="likes tea", version=1)
    assert await d.read_document(ANA, "MEMORY.md") == Document(text="likes tea", version=1)


async def test_write_with_the_current_version_bumps_it(store: Store) -> None:
    d = docs(store)
    await d.write_document(ANA, "MEMORY.md", "v1", 0)
    second = await d.write_document(ANA, "MEMORY.md", "v2", 1)
    assert second.version == 2
    assert (await d.read_document(ANA, "MEMORY.md")) == Document("v2", 2)


async def test_stale_write_raises_conflict_naming_the_current_version_and_changes_nothing(
    store: Store,
) -> None:
    d = docs(store)
    await d.write_document(ANA, "MEMORY.md", "v1", 0)
    await d.write_document(ANA, "MEMORY.md", "v2", 1)
    with pytest.raises(ConflictError) as caught:
        await d.write_document(ANA, "MEMORY.md", "stale", 1)
    assert caught.value.current_version == 2
    assert "stale" not in str(caught.value)
    assert (await d.read_document(ANA, "MEMORY.md")) == Document("v2", 2)
    with pytest.raises(ConflictError):
        await d.write_document(ANA, "MEMORY.md", "recreate", 0)


async def test_concurrent_writes_on_one_version_exactly_one_wins(store: Store) -> None:
    d = docs(store)
    await d.write_document(ANA, "MEMORY.md", "base", 0)
    results = await asyncio.gather(
        *(d.write_document(ANA, "MEMORY.md", f"writer {i}", 1) for i in range(8)),
        return_exceptions=True,
    )
    winners = [r for r in results if isinstance(r, Document)]
    losers = [r for r in results if isinstance(r, ConflictError)]
    assert len(winners) == 1 and len(losers) == 7
    assert await d.read_document(ANA, "MEMORY.md") == winners[0]


async def test_history_keeps_every_version_newest_first(store: Store) -> None:
    d = docs(store)
    for version, text in enumerate(["one", "two", "three"]):
        await d.write_document(ANA, "MEMORY.md", text, version)
    history = await d.history(ANA, "MEMORY.md")
    assert [(h.version, h.text) for h in history] == [(3, "three"), (2, "two"), (1, "one")]
    assert [h.version for h in await d.history(ANA, "MEMORY.md", limit=1)] == [3]
    assert await d.history(BOB, "MEMORY.md") == []


async def test_documents_are_isolated_by_every_scope_field(store: Store) -> None:
    d = docs(store)
    await d.write_document(ANA, "MEMORY.md", "ana's", 0)
    for other in (BOB, OTHER_TENANT, ANA_PROJECT, Scope(tenant="acme", user="ana", agent="x")):
        assert await d.read_document(other, "MEMORY.md") is None
        assert await d.list_documents(other) == []
        assert await d.history(other, "MEMORY.md") == []
        # Each scope has its own version sequence: creating it elsewhere is not a conflict.
        assert (await d.write_document(other, "MEMORY.md", "theirs", 0)).version == 1
    assert await d.read_document(ANA, "MEMORY.md") == Document("ana's", 1)


async def test_list_documents_is_sorted(store: Store) -> None:
    d = docs(store)
    await d.write_document(ANA, "notes/b.md", "b", 0)
    await d.write_document(ANA, "MEMORY.md", "m", 0)
    assert await d.list_documents(ANA) == ["MEMORY.md", "notes/b.md"]


async def test_daily_log_is_appended_and_read_per_day_and_scope(store: Store) -> None:
    d = docs(store)
    await d.append_log(ANA, DAY, "first")
    await d.append_log(ANA, DAY, "second")
    await d.append_log(ANA, date(2025, 1, 3), "next day")
    await d.append_log(BOB, DAY, "bob's")
    entries = await d.read_log(ANA, DAY)
    assert [e.text for e in entries] == ["first", "second"]
    assert all(e.scope == ANA and e.day == DAY for e in entries)
    assert [e.text for e in await d.read_log(BOB, DAY)] == ["bob's"]


async def test_search_finds_log_entries_and_documents_of_the_scope(store: Store) -> None:
    d = docs(store)
    await d.append_log(ANA, DAY, "user: my favourite colour is teal")
    await d.append_log(ANA, DAY, "user: the weather is nice")
    await d.write_document(ANA, "MEMORY.md", "Ana prefers teal notebooks", 0)
    hits = await d.search(ANA, "What is my favourite colour?", limit=5)
    assert hits and hits[0].kind == "log" and "teal" in hits[0].text
    assert all(h.scope == ANA for h in hits)
    assert {h.kind for h in await d.search(ANA, "notebooks")} == {"document"}
    assert await d.search(ANA, "teal", limit=1) == (await d.search(ANA, "teal", limit=5))[:1]


async def test_search_follows_document_rewrites(store: Store) -> None:
    d = docs(store)
    await d.write_document(ANA, "MEMORY.md", "likes espresso", 0)
    await d.write_document(ANA, "MEMORY.md", "likes matcha", 1)
    assert await d.search(ANA, "espresso") == []
    [hit] = await d.search(ANA, "matcha")
    assert (hit.kind, hit.ref, hit.text) == ("document", "MEMORY.md", "likes matcha")


async def test_search_never_returns_another_scopes_rows(store: Store) -> None:
    d = docs(store)
    for scope in (BOB, OTHER_TENANT, ANA_PROJECT):
        await d.append_log(scope, DAY, "secret plan zebra")
        await d.write_document(scope, "MEMORY.md", "zebra facts", 0)
    assert await d.search(ANA, "zebra secret plan facts", limit=20) == []
    await d.append_log(ANA, DAY, "zebra too")
    hits = await d.search(ANA, "zebra", limit=20)
    assert [h.text for h in hits] == ["zebra too"]


@pytest.mark.parametrize(
    "query",
    ['"', 'zebra" OR scope_token : *', "NEAR(a b)", "body:*", "-- ;", "'); DROP TABLE x; --"],
)
async def test_search_treats_query_syntax_as_plain_words(store: Store, query: str) -> None:
    d = docs(store)
    await d.append_log(BOB, DAY, "zebra body near drop table")
    await d.append_log(ANA, DAY, "nothing here")
    hits = await d.search(ANA, query, limit=20)
    assert all(h.scope == ANA for h in hits)


async def test_search_with_no_words_finds_nothing(store: Store) -> None:
    d = docs(store)
    await d.append_log(ANA, DAY, "the a of")
    assert await d.search(ANA, "the a of ?!", limit=5) == []
    assert await d.search(ANA, "anything", limit=0) == []


async def test_memory_passes_are_kept_once_and_listed_per_scope(store: Store) -> None:
    d = docs(store)
    rec = MemoryPassRecord(
        pass_id="memory-curation-acme-ana-run_1",
        scope=ANA,
        run_id="run_p1",
        report={"changed": True, "summary": "merged two notes"},
    )
    first = await d.save_memory_pass(rec)
    again = await d.save_memory_pass(
        MemoryPassRecord(pass_id=rec.pass_id, scope=ANA, run_id="run_other", report={})
    )
    assert again == first and first.run_id == "run_p1"
    assert first.report == {"changed": True, "summary": "merged two notes"}
    assert [p.pass_id for p in await d.list_memory_passes(ANA)] == [rec.pass_id]
    assert await d.list_memory_passes(BOB) == []


async def test_a_memory_pass_saved_with_replace_updates_its_report_and_keeps_created_at(
    store: Store,
) -> None:
    d = docs(store)
    rec = MemoryPassRecord(pass_id="p-1", scope=ANA, run_id="run_1", report={"status": "a"})
    first = await d.save_memory_pass(rec)
    updated = await d.save_memory_pass(
        MemoryPassRecord(pass_id="p-1", scope=ANA, run_id="run_1", report={"status": "b"}),
        replace=True,
    )
    assert updated.report == {"status": "b"} and updated.created_at == first.created_at
    [listed] = await d.list_memory_passes(ANA)
    assert listed.report == {"status": "b"}


async def test_count_turn_is_due_exactly_every_nth_turn_per_owner_under_concurrency(
    store: Store,
) -> None:
    d = docs(store)
    # A turn in another agent's or project's scope is the same owner's turn.
    results = await asyncio.gather(
        *(d.count_turn(ANA_PROJECT if i % 2 else ANA, 3) for i in range(12))
    )
    assert sum(results) == 4  # one in three, however the increments interleave
    assert [await d.count_turn(BOB, 3) for _ in range(3)] == [False, False, True]
    assert [await d.count_turn(OTHER_TENANT, 2) for _ in range(2)] == [False, True]


async def test_changed_scopes_are_the_owners_documents_written_after_their_last_pass(
    store: Store,
) -> None:
    d = docs(store)
    for scope in (ANA, ANA_PROJECT, BOB):
        await d.write_document(scope, "MEMORY.md", "x", 0)
    await d.write_document(ANA, "notes.md", "x", 0)
    assert set(await d.changed_scopes(ANA, "MEMORY.md")) == {ANA, ANA_PROJECT}
    await asyncio.sleep(0.01)  # a later timestamp for the pass (clocks are coarse on some hosts)
    await d.save_memory_pass(MemoryPassRecord(pass_id="p-ana", scope=ANA, run_id="r"))
    assert await d.changed_scopes(ANA, "MEMORY.md") == [ANA_PROJECT]
    await asyncio.sleep(0.01)
    await d.write_document(ANA, "MEMORY.md", "y", 1)
    assert set(await d.changed_scopes(ANA, "MEMORY.md")) == {ANA, ANA_PROJECT}
    assert await d.changed_scopes(OTHER_TENANT, "MEMORY.md") == []
