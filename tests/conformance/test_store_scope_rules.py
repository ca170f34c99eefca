"""One scope rule on every backend: an empty agent/project never aliases the unset scope."""

from __future__ import annotations

import dataclasses
from datetime import date

import pytest

from conformance.support import ANA, BOB, make_run
from reverie.core.scope import Scope
from reverie.errors import UsageError
from reverie.store import DocumentStore, Store

HELPER = Scope(tenant="acme", user="ana", agent="helper")
APOLLO = Scope(tenant="acme", user="ana", project="apollo")
DAY = date(2025, 1, 2)


def docs(store: Store) -> DocumentStore:
    assert isinstance(store, DocumentStore)
    return store


@pytest.mark.parametrize("field", ["agent", "project"])
async def test_an_empty_agent_or_project_cannot_reach_the_unset_scopes_memory(
    store: Store, field: str
) -> None:
    d = docs(store)
    await d.write_document(ANA, "MEMORY.md", "ana likes tea", expected_version=0)
    await d.append_log(ANA, DAY, "ana said she likes tea")

    with pytest.raises(UsageError, match=field):
        dataclasses.replace(ANA, **{field: ""})
    # The unset scope's memory is untouched and only the unset scope reads it.
    assert (await d.read_document(ANA, "MEMORY.md")) is not None
    assert await d.read_document(HELPER, "MEMORY.md") is None
    assert await d.read_document(APOLLO, "MEMORY.md") is None
    assert await d.search(HELPER, "tea") == []
    assert [hit.scope for hit in await d.search(ANA, "tea")] != []


async def test_unset_and_named_agent_memory_stay_apart_on_every_backend(store: Store) -> None:
    d = docs(store)
    await d.write_document(ANA, "MEMORY.md", "unset", expected_version=0)
    await d.write_document(HELPER, "MEMORY.md", "helper", expected_version=0)

    unset = await d.read_document(ANA, "MEMORY.md")
    helper = await d.read_document(HELPER, "MEMORY.md")
    assert unset is not None and unset.text == "unset"
    assert helper is not None and helper.text == "helper"


async def test_a_thread_of_the_unset_scope_reads_back_with_agent_and_project_none(
    store: Store,
) -> None:
    await store.create_thread("thr-unset", ANA)

    thread = await store.get_thread("thr-unset")
    assert thread.scope == ANA
    assert thread.scope.agent is None and thread.scope.project is None


async def test_list_runs_of_a_tenant_lists_every_user_of_that_tenant_only(store: Store) -> None:
    await make_run(store, "run-ana", thread_id="thr-ana", scope=ANA)
    await make_run(store, "run-bob", thread_id="thr-bob", scope=BOB)
    await make_run(store, "run-globex", thread_id="thr-g", scope=Scope(tenant="globex", user="ana"))

    tenant = await store.list_runs(tenant="acme")
    owner = await store.list_runs(scope=BOB)
    both = await store.list_runs(tenant="acme", statuses=["queued"], limit=1)

    assert {r.run_id for r in tenant} == {"run-ana", "run-bob"}
    assert [r.run_id for r in owner] == ["run-bob"]
    assert len(both) == 1 and both[0].scope.tenant == "acme"
