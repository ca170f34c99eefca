"""The SIGKILL campaign of issue "background work survives crashes": processes that write memory
and curate it every 2 turns are killed again and again — mid-turn before and after a memory
write, mid-pass before its read, after its read and after its write, and mid-recovery — each
followed by a fresh process that calls ``recover()`` and runs more turns. At the end every pass
is terminal and recorded, no run is left ``running``, and MEMORY.md was never emptied, lost no
fact and holds none twice.

Kill points never depend on timing: the model is a fake server in this process that answers the
chosen kind of request with a hang, and the child is killed once that request has arrived.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from curation.curation_support import ANA, DUPLICATES
from curation.recovery_support import spec_of
from reverie import Runtime
from reverie.memory import NativeMemory
from reverie.memory.curation import PASS_OPENING
from reverie.store.base import TERMINAL_STATUSES
from reverie.testing import call, reply
from reverie.testing.fake_openai import FakeHang, FakeOpenAIServer, FakeStep

CHILD = Path(__file__).with_name("campaign_child.py")
TIMEOUT_S = 30.0
TURNS_PER_PROCESS = 6

# (kind, phase): the request to hang. A turn's phase 0 asks for its memory write, phase 1
# comes after the write; a pass's phase 0 asks for its read, 1 for its write, 2 for its report.
KILLS: list[tuple[str, int]] = [
    ("pass", 0),
    ("turn", 1),
    ("pass", 1),
    ("turn", 0),
    ("pass", 2),
    ("pass", 1),
    ("turn", 1),
    ("pass", 2),
    ("pass", 0),
    ("turn", 1),
    ("pass", 1),
    ("pass", 2),
]


def _tool_results(body: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for message in body.get("messages", []):
        if message.get("role") == "tool":
            try:
                out.append(json.loads(message.get("content") or ""))
            except ValueError:
                out.append(message.get("content"))
    return out


def _user_texts(body: dict[str, Any]) -> list[str]:
    return [
        m["content"]
        for m in body.get("messages", [])
        if m.get("role") == "user"
        and isinstance(m.get("content"), str)
        and not m["content"].startswith("[memory]")  # the memory context ends the prompt
    ]


def unique_lines(text: str) -> str:
    """``text`` with every repeated line dropped (first occurrences kept, in order)."""
    seen: dict[str, None] = {}
    for line in text.splitlines():
        seen.setdefault(line, None)
    return "".join(f"{line}\n" for line in seen)


@dataclass
class CampaignModel:
    """Every model of the campaign, stateless over request bodies.

    A turn appends its fact (``remember fact X`` → ``- fact X``), then replies. A pass reads
    MEMORY.md, replaces it with its unique lines at the version read, then reports. While
    :attr:`armed` names a (kind, phase), the first such request hangs (and disarms).
    """

    armed: tuple[str, int] | None = None
    hung: list[tuple[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> FakeStep:
        users = _user_texts(body)
        results = _tool_results(body)
        kind = "pass" if PASS_OPENING in users else "turn"
        with self.lock:
            if self.armed == (kind, len(results)):
                self.hung.append((kind, len(results)))
                self.armed = None
                return FakeHang(seconds=120.0)
        if kind == "turn":
            if not results:
                fact = users[-1].removeprefix("remember ")
                return call("memory_write", target="MEMORY.md", content=f"- {fact}", append=True)
            return reply("noted")
        if not results:
            return call("memory_read", path="MEMORY.md")
        if len(results) == 1:
            read = results[0]
            return call(
                "memory_write",
                target="MEMORY.md",
                content=unique_lines(read["content"]),
                expected_version=read["version"],
            )
        return call("structured_result", changed=True, summary="dropped repeated lines")


def _spawn(url: str, spec: str, label: str, err: Path) -> subprocess.Popen[bytes]:
    with err.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, str(CHILD), url, spec, label, str(TURNS_PER_PROCESS)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )


def _wait_hung(model: CampaignModel, kills: int, child: subprocess.Popen[bytes], err: Path) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while len(model.hung) < kills:
        if child.poll() is not None:
            pytest.fail(f"child exited {child.returncode} first:\n{err.read_text()}")
        if time.monotonic() > deadline:
            pytest.fail(f"no request to hang at kill {kills}:\n{err.read_text()}")
        time.sleep(0.01)


@pytest.mark.crash
@pytest.mark.slow
async def test_a_sigkill_campaign_during_memory_writes_and_curation_leaves_every_pass_terminal_and_recorded_and_memory_intact(  # noqa: E501
    db_url: str, tmp_path: Path
) -> None:
    async with Runtime.open(db_url, memory=NativeMemory()) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
    model = CampaignModel()
    children: list[subprocess.Popen[bytes]] = []
    async with FakeOpenAIServer(model) as server:
        spec = spec_of(server)
        try:
            for n, target in enumerate(KILLS, start=1):
                model.armed = target
                err = tmp_path / f"child{n}.err"
                child = _spawn(db_url, spec, f"p{n}", err)
                children.append(child)
                _wait_hung(model, n, child, err)
                os.kill(child.pid, signal.SIGKILL)
                assert child.wait(timeout=TIMEOUT_S) == -signal.SIGKILL
            # A last process, never killed: it recovers, runs its turns and waits its passes.
            err = tmp_path / "last.err"
            last = _spawn(db_url, spec, "last", err)
            children.append(last)
            assert last.wait(timeout=TIMEOUT_S * 2) == 0, err.read_text()
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
    assert model.hung == KILLS  # every kill landed where it was aimed

    async with Runtime.open(db_url, memory=NativeMemory()) as fresh:
        assert await fresh.recover() == []  # the last process left nothing to recover
        runs = await fresh.store.list_runs(limit=10_000)
        passes = await fresh.memory.passes(ANA, limit=1_000)
        history = await fresh.memory.history(ANA, limit=1_000)
    pass_runs = {r.run_id: r for r in runs if r.profile == "unbound_structured"}
    left = [
        (r.run_id, r.status, r.profile, r.agent_name, r.lease_owner, r.lease_expires_at, r.fence)
        for r in runs
        if r.status not in TERMINAL_STATUSES
    ]
    assert left == [], f"runs left non-terminal (id, status, profile, agent, lease): {left}"
    assert len(pass_runs) >= TURNS_PER_PROCESS // 2  # curation ran all along (the last process)
    assert {p.run_id for p in passes} == set(pass_runs)  # every pass recorded, once
    for record in passes:
        assert record.report["status"] == pass_runs[record.run_id].status, record
    assert any(p.report["write"] == "written" for p in passes)

    texts = [v.text for v in reversed(history)]  # oldest first
    assert all(t.strip() for t in texts), "MEMORY.md was emptied"
    ever = {line for t in texts for line in t.splitlines()}
    final = texts[-1].splitlines()
    assert len(final) == len(set(final)), f"a fact is duplicated:\n{texts[-1]}"
    assert set(final) == ever, "a fact was lost"
    facts = [line for line in final if line.startswith("- fact ")]
    assert f"- fact last-{TURNS_PER_PROCESS - 1}" in facts
