"""The crash harness of the ``test_crash_*`` modules.

It spawns ``crash_child.py`` workers on one SQLite file, SIGKILLs them and resumes their runs.

Every wait polls with a deadline (:data:`TIMEOUT_S`), so a hang fails the test instead of
stalling CI, and every process a test spawns is killed and reaped when the test ends.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from reverie import Runtime
from reverie.store.base import CheckpointRecord, TranscriptItem

CHILD = Path(__file__).with_name("crash_child.py")
TIMEOUT_S = 20.0
POLL_S = 0.01


def _exists(path: Path) -> bool:
    return path.exists()


def _read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def load_child() -> ModuleType:
    """``crash_child`` as a module, to build the same agents in this process."""
    spec = importlib.util.spec_from_file_location("reverie_crash_child", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Worker:
    """One child process; its stdout and stderr go to files in the marker directory."""

    def __init__(self, proc: subprocess.Popen[bytes], label: str, out: Path, err: Path) -> None:
        self.proc = proc
        self.label = label
        self.out = out
        self.err = err

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        return self.err.read_text(encoding="utf-8", errors="replace")

    def describe(self) -> str:
        code = self.proc.returncode
        return f"worker {self.label} (pid {self.pid}, exit {code}):\n{self.stderr()}"

    async def wait(self) -> int:
        deadline = time.monotonic() + TIMEOUT_S
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {self.describe()}")
            await asyncio.sleep(POLL_S)
        return self.proc.returncode

    async def kill(self) -> None:
        """SIGKILL the process and reap it (a zombie would still look alive to ``kill(pid, 0)``)."""
        assert self.proc.poll() is None, f"died before the kill: {self.describe()}"
        os.kill(self.pid, signal.SIGKILL)
        assert await self.wait() == -signal.SIGKILL

    async def report(self) -> dict[str, Any]:
        """Wait for a ``resume``/``approve`` worker and parse the JSON line it printed."""
        code = await self.wait()
        lines = _read_lines(self.out)
        assert code == 0 and lines, f"no report from {self.describe()}"
        report: dict[str, Any] = json.loads(lines[-1])
        return report


class Crash:
    """A database file, a marker directory, and the workers of one test."""

    script: Path = CHILD
    """The worker script the test's processes run."""

    def __init__(self, root: Path) -> None:
        self.db = root / "crash.db"
        self.url = f"sqlite:///{self.db}"
        self.markers = root / "markers"
        self.markers.mkdir()
        self.workers: list[Worker] = []

    # ------------------------------------------------------------------------------ processes
    def spawn(self, scenario: str, role: str, *args: str) -> Worker:
        label = f"{role}{len(self.workers)}"
        out, err = self.markers / f"{label}.out", self.markers / f"{label}.err"
        argv = [sys.executable, str(self.script), str(self.db), scenario, str(self.markers), role]
        with out.open("wb") as fout, err.open("wb") as ferr:
            proc = subprocess.Popen(
                [*argv, *args],
                stdin=subprocess.DEVNULL,
                stdout=fout,
                stderr=ferr,
            )
        worker = Worker(proc, label, out, err)
        self.workers.append(worker)
        return worker

    async def wait_for(self, name: str, *, worker: Worker | None = None) -> Path:
        """Wait for a marker file; fail at once if ``worker`` exits first."""
        path = self.markers / name
        deadline = time.monotonic() + TIMEOUT_S
        while not _exists(path):
            if worker is not None and worker.proc.poll() is not None:
                pytest.fail(f"{worker.describe()}\nexited before marker {name}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for marker {name}")
            await asyncio.sleep(POLL_S)
        return path

    async def start_and_kill_at(self, scenario: str, marker: str) -> dict[str, str]:
        """Start a run in a child, SIGKILL it once ``marker`` appears; the run's ids."""
        worker = self.spawn(scenario, "start")
        await self.wait_for(marker, worker=worker)
        await worker.kill()
        return self.run_ids()

    async def resume_in_child(self, scenario: str, run_id: str) -> dict[str, Any]:
        return await self.spawn(scenario, "resume", run_id).report()

    def cleanup(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.proc.kill()
            worker.proc.wait()

    # ------------------------------------------------------------------------------ markers
    def touch(self, name: str) -> None:
        (self.markers / name).touch()

    def read_json(self, path: Path) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data

    def run_ids(self) -> dict[str, str]:
        ids: dict[str, str] = json.loads((self.markers / "run.json").read_text(encoding="utf-8"))
        return ids

    def executions(self, tool: str, *, step: int | None = None) -> int:
        """How many times ``tool`` ran, in every process (optionally only for ``step``)."""
        path = self.markers / f"{tool}.count"
        if not path.exists():
            return 0
        lines = path.read_text(encoding="utf-8").splitlines()
        return sum(1 for line in lines if step is None or line.endswith(f" step={step}"))

    def model_requests(self, *, role: str | None = None) -> list[dict[str, Any]]:
        """Every model request any process made (optionally only those of one role)."""
        path = self.markers / "model.jsonl"
        if not path.exists():
            return []
        requests = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        return [r for r in requests if role is None or r["role"] == role]

    # ------------------------------------------------------------------------------ database
    async def transcript(self, thread_id: str) -> list[TranscriptItem]:
        """The thread's live (non-superseded) rows, read through a fresh runtime."""
        async with Runtime.open(self.url) as rt:
            return await rt.store.thread_items(thread_id)

    async def checkpoint(self, run_id: str) -> CheckpointRecord | None:
        async with Runtime.open(self.url) as rt:
            return await rt.store.load_checkpoint(run_id)


def contents(request: dict[str, Any], role: str) -> list[str]:
    """The contents of a logged request's messages of one role."""
    return [m["content"] for m in request["messages"] if m["role"] == role]
