"""Queue mode's background work (DESIGN §13/§15): on PostgreSQL with ``reverie worker``, a
curation pass is its own job kind (``reverie.curation_pass``, one waiting job per owner), never
run inline where the turn that made it due finished.

Two workers run as child processes (``python -m reverie.cli.app worker``) on a fresh schema of
the server ``REVERIE_TEST_POSTGRES_URL`` names; their agent's model and the passes' model is a
fake server in this process. Skipped without it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from curation.test_curation_campaign import CampaignModel
from reverie import Agent, Runtime, Scope
from reverie.memory import NativeMemory
from reverie.runtime.dispatch import PASS_TASK, QueueDispatcher
from reverie.store.base import TERMINAL_STATUSES
from reverie.store.postgres import temporary_schema
from reverie.testing.fake_openai import FakeOpenAIServer

POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL; .ci/run starts a server"
    ),
]

ANA = Scope(tenant="acme", user="ana")
BOB = Scope(tenant="acme", user="bob")
TIMEOUT_S = 30.0


@dataclass
class Pool:
    """Worker child processes on one schema, and their logs."""

    url: str
    spec: str
    stderr: list[Path]

    def logs(self) -> str:
        return "".join(err.read_text(encoding="utf-8") for err in self.stderr)


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with temporary_schema(POSTGRES_URL, prefix="reverie_curation_jobs") as scoped:
        yield scoped


def _ready(child: subprocess.Popen[str], stderr: Path, deadline: float) -> bool:
    text = stderr.read_text(encoding="utf-8")
    if child.poll() is not None:
        pytest.fail(f"worker exited {child.returncode}: {text}")
    if time.monotonic() > deadline:
        pytest.fail(f"worker not ready after {TIMEOUT_S} s: {text}")
    return "ready" in text


async def _wait_ready(child: subprocess.Popen[str], stderr: Path) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    ready = False
    while not ready:
        await asyncio.sleep(0.05)
        ready = _ready(child, stderr, deadline)


def _spawn(url: str, env: dict[str, str], err: Path) -> subprocess.Popen[str]:
    with err.open("w") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "reverie.cli.app", "worker", "--store", url],
            stdout=subprocess.DEVNULL,
            stderr=sink,
            text=True,
            env=env,
        )


@pytest.fixture
async def pool(url: str, tmp_path: Path) -> AsyncIterator[Pool]:
    """Two workers with native memory and curation every 2 turns; SIGTERM stops each (exit 0)."""
    async with FakeOpenAIServer(CampaignModel()) as server:
        spec = f"openai-compat:{server.base_url}#fake-model"
        home = tmp_path / "home"
        home.mkdir()
        (home / "reverie.toml").write_text(
            "[agents.assistant]\n"
            f"model = {json.dumps(spec)}\n"
            "[memory]\n"
            'provider = "native"\n'
            "curation_interval_turns = 2\n",
            encoding="utf-8",
        )
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env.update(REVERIE_HOME=str(home))
        children: list[subprocess.Popen[str]] = []
        created = Pool(url=url, spec=spec, stderr=[])
        try:
            for index in range(2):
                err = tmp_path / f"worker{index}.err"
                children.append(_spawn(url, env, err))
                created.stderr.append(err)
            for child, err in zip(children, created.stderr, strict=True):
                await _wait_ready(child, err)
            yield created
            for child in children:
                child.send_signal(signal.SIGTERM)
            for child, err in zip(children, created.stderr, strict=True):
                code = await asyncio.to_thread(child.wait, 15)
                assert code == 0, err.read_text(encoding="utf-8")
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait(timeout=5)


async def test_in_queue_mode_a_curation_pass_is_its_own_job_never_run_inline_where_the_turn_finished(  # noqa: E501
    pool: Pool,
) -> None:
    agent = Agent(name="assistant", model="scripted:unused.json")  # runs on the workers only
    async with Runtime.open(
        pool.url, dispatch="queue", agents=[agent], memory=NativeMemory()
    ) as rt:
        for i in range(2):
            handle = await rt.start(agent, f"remember fact {i}", scope=ANA)
            async with asyncio.timeout(TIMEOUT_S):
                assert (await handle.result()).status == "completed"
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            runs = [r for r in await rt.store.list_runs(scope=ANA) if r.profile.startswith("unb")]
            if runs and all(r.status in TERMINAL_STATUSES for r in runs):
                break
            assert time.monotonic() < deadline, f"no finished pass: {runs}\n{pool.logs()}"
            await asyncio.sleep(0.05)
        (record,) = await rt.memory.passes(ANA)
        doc = await rt.memory.read(ANA)
    (run,) = runs
    assert run.status == "completed", run.exit
    assert record.run_id == run.run_id and record.report["write"] == "written"
    assert doc.text == "- fact 0\n- fact 1\n"
    logs = pool.logs()
    # Advanced by a curation job of its owner, not by the turn's job where it finished.
    assert f"job: curation pass run {run.run_id} of acme/ana" in logs, logs
    assert f"job: advance run {run.run_id}" not in logs


async def test_one_curation_job_per_owner_waits_in_the_queue(url: str) -> None:
    queue = QueueDispatcher(url)
    await queue.open()
    try:
        for owner in (ANA, ANA, BOB, ANA):
            await queue.enqueue_pass(owner)
    finally:
        await queue.aclose()
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT args FROM procrastinate_jobs WHERE task_name = %s AND status = 'todo'",
            (PASS_TASK,),
        )
        waiting = sorted(json.dumps(row[0], sort_keys=True) for row in await cur.fetchall())
    assert waiting == [
        json.dumps({"tenant": "acme", "user": "ana"}, sort_keys=True),
        json.dumps({"tenant": "acme", "user": "bob"}, sort_keys=True),
    ]
