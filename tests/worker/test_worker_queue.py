"""``reverie worker`` processes advance runs a queue-dispatching runtime enqueues (DESIGN §15).

Two workers run as child processes (``python -m reverie.cli.app worker``) on a fresh schema of
the server ``REVERIE_TEST_POSTGRES_URL`` names; the test is the producer. Skipped without it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from reverie import Agent, Runtime, Scope
from reverie.serve import background_server, create_app
from reverie.store.postgres import temporary_schema
from worker.worker_fixture_tools import record, send

POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL; .ci/run starts a server"
    ),
]

HERE = Path(__file__).resolve().parent
ANA = Scope(tenant="acme", user="ana")
COUNTER_SCRIPT = [{"call": "record", "arguments": {"note": "n"}}, {"reply": "recorded it"}]
MAILER_SCRIPT = [{"call": "send", "arguments": {"to": "ana"}}, {"reply": "sent it"}]
READY_TIMEOUT_S = 20.0
RESULT_TIMEOUT_S = 20.0


@dataclass
class Pool:
    """Worker child processes on one schema, and where their tools log."""

    url: str
    log: Path
    children: list[subprocess.Popen[str]]
    stderr: list[Path]

    def executions(self) -> Counter[tuple[str, str]]:
        """How often each (tool, run id) executed, over every worker."""
        if not self.log.exists():
            return Counter()
        lines = self.log.read_text(encoding="utf-8").splitlines()
        return Counter((line.split()[0], line.split()[1]) for line in lines)


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with temporary_schema(POSTGRES_URL, prefix="reverie_worker") as scoped:
        yield scoped


def _wait_ready(child: subprocess.Popen[str], stderr: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if "ready" in stderr.read_text(encoding="utf-8"):
            return
        if child.poll() is not None:
            pytest.fail(f"worker exited {child.returncode}: {stderr.read_text()}")
        time.sleep(0.05)
    pytest.fail(f"worker not ready after {READY_TIMEOUT_S} s: {stderr.read_text()}")


@pytest.fixture
def pool(url: str, tmp_path: Path) -> Iterator[Pool]:
    """Two ``reverie worker`` processes; on teardown SIGTERM must stop each with exit 0."""
    home = tmp_path / "home"
    home.mkdir()
    counter = tmp_path / "counter.json"
    counter.write_text(json.dumps(COUNTER_SCRIPT), encoding="utf-8")
    mailer = tmp_path / "mailer.json"
    mailer.write_text(json.dumps(MAILER_SCRIPT), encoding="utf-8")
    (home / "reverie.toml").write_text(
        f"pythonpath = [{json.dumps(str(HERE))}]\n"
        "[agents.counter]\n"
        f"model = {json.dumps('scripted:' + str(counter))}\n"
        'tools = ["worker_fixture_tools:record"]\n'
        "[agents.mailer]\n"
        f"model = {json.dumps('scripted:' + str(mailer))}\n"
        'tools = ["worker_fixture_tools:send"]\n',
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(REVERIE_HOME=str(home), REVERIE_TEST_TOOL_LOG=str(tmp_path / "tools.log"))
    created = Pool(url=url, log=tmp_path / "tools.log", children=[], stderr=[])
    try:
        for index in range(2):
            err = tmp_path / f"worker{index}.err"
            with err.open("w") as sink:
                created.children.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "reverie.cli.app", "worker", "--store", url],
                        stdout=subprocess.DEVNULL,
                        stderr=sink,
                        text=True,
                        env=env,
                    )
                )
            created.stderr.append(err)
        for child, err in zip(created.children, created.stderr, strict=True):
            _wait_ready(child, err)
        yield created
        for child in created.children:
            child.send_signal(signal.SIGTERM)
        for child, err in zip(created.children, created.stderr, strict=True):
            code = child.wait(timeout=15)
            assert code == 0, err.read_text(encoding="utf-8")
    finally:
        for child in created.children:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=5)


def _agents() -> list[Agent]:
    # The producer only records runs: the model never runs here.
    return [
        Agent(name="counter", model="scripted:unused.json", tools=[record]),
        Agent(name="mailer", model="scripted:unused.json", tools=[send]),
    ]


async def test_ten_runs_complete_on_the_workers_each_tool_once(pool: Pool) -> None:
    async with Runtime.open(pool.url, dispatch="queue", agents=_agents()) as rt:
        counter = _agents()[0]
        handles = [
            await rt.start(counter, f"note {i}", scope=ANA, thread_id=None) for i in range(10)
        ]
        async with asyncio.timeout(RESULT_TIMEOUT_S):
            results = await asyncio.gather(*(h.result() for h in handles))

        assert [r.status for r in results] == ["completed"] * 10
        assert [r.text for r in results] == ["recorded it"] * 10
        executions = pool.executions()
        assert executions == Counter({("record", h.run_id): 1 for h in handles})
        for handle in handles:
            items = await rt.store.thread_items(handle.thread_id)
            assert [i.role for i in items] == ["user", "assistant", "tool", "assistant"]
            assert len({i.seq for i in items}) == len(items)
            # Every event the worker recorded reaches the producer's handle, in order.
            events = [e async for e in handle.events()]
            kinds = [e.kind for e in events]
            assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
            assert {"model_request", "tool_started", "tool_finished"} <= set(kinds)


async def test_a_gated_run_approved_through_the_producer_completes_on_a_worker(
    pool: Pool,
) -> None:
    async with Runtime.open(pool.url, dispatch="queue", agents=_agents()) as rt:
        handle = await rt.start(_agents()[1], "message ana", scope=ANA)
        async with asyncio.timeout(RESULT_TIMEOUT_S):
            blocked = await handle.result()
        assert blocked.status == "blocked"
        assert blocked.gate is not None
        assert pool.executions() == Counter()

        async with asyncio.timeout(RESULT_TIMEOUT_S):
            done = await rt.approve(blocked.gate.ref)

        assert done.status == "completed"
        assert done.text == "sent it"
        assert pool.executions() == Counter({("send", handle.run_id): 1})
        items = await rt.store.thread_items(handle.thread_id)
        assert [i.role for i in items] == ["user", "assistant", "tool", "assistant"]


async def test_resume_after_a_gate_is_its_own_job_kind(pool: Pool) -> None:
    async with Runtime.open(pool.url, dispatch="queue", agents=_agents()) as rt:
        handle = await rt.start(_agents()[1], "message ana", scope=ANA)
        async with asyncio.timeout(RESULT_TIMEOUT_S):
            blocked = await handle.result()
        assert blocked.gate is not None
        async with asyncio.timeout(RESULT_TIMEOUT_S):
            done = await rt.approve(blocked.gate.ref)
    assert done.status == "completed"
    logs = "".join(err.read_text(encoding="utf-8") for err in pool.stderr)
    assert logs.count(f"job: advance run {handle.run_id}") == 1, logs  # its first segment only
    assert f"job: resume run {handle.run_id} after its gate" in logs, logs


async def test_the_worker_logs_each_job_it_runs_at_info(pool: Pool) -> None:
    async with Runtime.open(pool.url, dispatch="queue", agents=_agents()) as rt:
        handle = await rt.start(_agents()[0], "note", scope=ANA)
        async with asyncio.timeout(RESULT_TIMEOUT_S):
            result = await handle.result()
    assert result.status == "completed"
    wanted = [f"job: advance run {handle.run_id}", f"job: run {handle.run_id} is completed"]
    deadline = time.monotonic() + RESULT_TIMEOUT_S
    while True:
        logs = "".join(err.read_text(encoding="utf-8") for err in pool.stderr)
        if all(w in logs for w in wanted) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert all(w in logs for w in wanted), logs
    assert f"run {handle.run_id} resumed (agent counter" in logs  # a worker resumes a queued run


async def test_an_sse_client_of_a_separate_serve_sees_every_event_of_a_worker_run(
    pool: Pool,
) -> None:
    token = "tok-worker-events-0f3a"
    async with Runtime.open(pool.url, dispatch="queue", agents=_agents()) as rt:
        app = create_app(rt, agents={a.name: a for a in _agents()}, tokens={token: ANA})
        headers = {"authorization": f"Bearer {token}"}
        async with (
            background_server(app) as base,
            httpx.AsyncClient(base_url=base, headers=headers, timeout=RESULT_TIMEOUT_S) as client,
        ):
            started = await client.post("/v1/runs", json={"agent": "counter", "input": "note"})
            run_id = started.json()["run_id"]
            first = await _sse(client, run_id, stop_after=2)
            # The client reconnects after the second event and gets the rest, in order.
            rest = await _sse(client, run_id, last_event_id=first[-1][0])
            replayed = await _sse(client, run_id, last_event_id="0")

    assert first + rest == replayed
    ids = [int(i) for i, _ in replayed if i is not None]
    assert ids == list(range(1, len(replayed) + 1))
    kinds = [e["kind"] for _, e in replayed]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert {"model_request", "tool_started", "tool_finished", "assistant_message"} <= set(kinds)
    assert replayed[-1][1]["status"] == "completed"
    assert pool.executions() == Counter({("record", run_id): 1})


async def _sse(
    client: httpx.AsyncClient,
    run_id: str,
    *,
    last_event_id: str | None = None,
    stop_after: int | None = None,
) -> list[tuple[str | None, dict[str, object]]]:
    headers = {} if last_event_id is None else {"last-event-id": last_event_id}
    out: list[tuple[str | None, dict[str, object]]] = []
    current: str | None = None
    async with (
        asyncio.timeout(RESULT_TIMEOUT_S),
        client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                current = line[len("id: ") :]
            elif line.startswith("data: "):
                out.append((current, json.loads(line[len("data: ") :])))
                current = None
                if stop_after is not None and len(out) >= stop_after:
                    break
    return out
