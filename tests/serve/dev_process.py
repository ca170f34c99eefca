"""A ``reverie`` server child process for tests that drive it as a user does: started with a
``reverie.toml`` of their own, read until it prints where it listens, stopped with Ctrl-C."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

START_TIMEOUT_S = 120.0
"""A hang guard for start-up on a loaded machine, never a timing assumption."""


def child_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a child: this one without model keys, ``REVERIE_HOME`` set."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(REVERIE_HOME=str(home), USER="tester", **extra)
    return env


@contextmanager
def reverie_process(
    args: Sequence[str], env: dict[str, str], *, wait_for: str
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``python -m reverie.cli.app ARGS``; yields it and its first stderr line containing
    ``wait_for`` (e.g. the console URL), then stops it with SIGINT."""
    process = subprocess.Popen(
        [sys.executable, "-m", "reverie.cli.app", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        seen: list[str] = []
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                raise AssertionError(f"the server exited early: {''.join(seen)}")
            seen.append(line)
            if wait_for in line:
                break
        yield process, line.strip()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        reader.join(timeout=10)
        if process.stderr is not None:
            process.stderr.close()


def wait_until_up(base: str) -> None:
    """Until the server answers (it prints its URL just before it listens)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{base}/console/login", timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError("the server did not start listening")
