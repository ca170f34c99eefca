"""Curation rules that held before anything pinned them: a gated declared tool, the pass's
thread, and where the interval comes from (DESIGN §13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from curation.curation_support import (
    ANA,
    DUPLICATES,
    curating,
    curator,
    settled_passes,
    turns,
    user_agent,
)
from reverie import Runtime
from reverie.cli.common import open_session
from reverie.config import load_config
from reverie.core.canonical import digest
from reverie.hooks import CapabilityHookContext, PauseApproval
from reverie.memory import NativeMemory
from reverie.memory.curation import CURATION_HOOK_NAME
from reverie.store import Document

ENV_NAMES = (
    "REVERIE_CURATION_INTERVAL_TURNS",
    "REVERIE_MEMORY_CURATION_INTERVAL_TURNS",
    "CURATION_INTERVAL_TURNS",
)
"""Names an environment override could plausibly have used: none may switch curation."""


async def test_a_pass_whose_declared_tool_is_gated_fails_visibly_and_never_drops_the_tool() -> None:
    def approve_memory_writes(ctx: CapabilityHookContext) -> PauseApproval | None:
        if ctx.tool != "memory_write":
            return None
        return PauseApproval("a person approves memory writes")

    model = curator()
    async with curating(model) as rt:
        rt.hooks.register("before_capability", approve_memory_writes, name="approve-writes")
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        await turns(rt, user_agent(), ANA, 2)
        (record,) = await settled_passes(rt, ANA)
        pass_run = await rt.get_result(record.run_id)
        doc = await rt.memory.read(ANA)
        gates = await rt.gates.list(scope=ANA, status=None)
    # The tool was offered (not silently dropped), its call reached the gate, and the pass
    # failed with a kind that says so; nothing was written and no gate waits for nobody.
    offered = {t.name for t in model.requests[0].tools or ()}
    assert {"memory_read", "memory_write", "structured_result"} <= offered
    assert pass_run.status == "failed"
    assert pass_run.exit.kind == "gate_not_supported"  # type: ignore[union-attr]
    assert record.report["status"] == "failed"
    assert "gate_not_supported" in record.report["error"]
    assert record.report["write"] == "none" and record.report["changed"] is False
    assert doc == Document(DUPLICATES, 1)
    assert [g for g in gates if g.status == "pending"] == []


async def test_a_passs_thread_id_is_derived_from_its_idempotency_key() -> None:
    async with curating(curator()) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        await turns(rt, user_agent(), ANA, 4)  # two intervals: two passes
        records = await settled_passes(rt, ANA)
        runs = [await rt.store.get_run(r.run_id) for r in records]
    assert len(runs) == 2
    for record, run in zip(records, runs, strict=True):
        assert run.idempotency_key == record.pass_id
        assert run.thread_id == f"thr_{digest([ANA.tenant, ANA.user, record.pass_id])[:32]}"
    assert runs[0].thread_id != runs[1].thread_id  # one thread per pass


async def test_the_curation_interval_comes_from_configuration_only_never_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ENV_NAMES:
        monkeypatch.setenv(name, "2")
    monkeypatch.setenv("REVERIE_HOME", str(tmp_path / "home"))  # the sessions' default store
    # No interval configured: no hook, whatever the environment says.
    async with Runtime.open(":memory:", memory=NativeMemory()) as rt:
        assert CURATION_HOOK_NAME not in rt.hooks
        await turns(rt, user_agent(), ANA, 4)
        assert await rt.memory.passes(ANA) == []
    path = tmp_path / "reverie.toml"
    path.write_text(
        '[memory]\nprovider = "native"\n[agents.assistant]\nmodel = "openai:gpt-4.1-mini"\n',
        encoding="utf-8",
    )
    async with open_session(load_config(path), None, memory=True) as session:
        assert CURATION_HOOK_NAME not in session.rt.hooks
    # Configured: the file's number, not the environment's.
    path.write_text(
        '[memory]\nprovider = "native"\ncuration_interval_turns = 3\n'
        '[agents.assistant]\nmodel = "openai:gpt-4.1-mini"\n',
        encoding="utf-8",
    )
    async with open_session(load_config(path), None, memory=True) as session:
        curator_ = session.rt._curator
        assert curator_ is not None and curator_.interval == 3
