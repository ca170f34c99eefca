"""A run with an image survives a SIGKILL: the resume sends the same image bytes again."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from reverie import Runtime
from reverie.testing import FakeOpenAIServer
from reverie.testing.fake_openai import FakeHang, FakeStep

pytestmark = [pytest.mark.crash, pytest.mark.slow]

CHILD = Path(__file__).with_name("image_crash_child.py")
TIMEOUT_S = 60.0


def _load_child() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("reverie_image_crash_child", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _until(check: Any, what: str, proc: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        assert proc.returncode is None, f"the worker died before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_run_killed_mid_call_resumes_with_the_image_bytes_identical(
    tmp_path: Path,
) -> None:
    child = _load_child()
    answers: list[FakeStep] = [FakeHang(seconds=600), "A tiny square picture."]

    def script(body: dict[str, Any]) -> FakeStep:
        return answers.pop(0)

    db, ids_file = tmp_path / "images.db", tmp_path / "ids.json"
    async with FakeOpenAIServer(script) as srv:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CHILD),
            str(db),
            srv.base_url,
            str(ids_file),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            await _until(lambda: ids_file.exists() and srv.requests, "the first model call", proc)
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGKILL)
            # Reaped: a zombie would still look alive to the resume's owner check.
            await asyncio.wait_for(proc.wait(), TIMEOUT_S)
        assert proc.returncode == -signal.SIGKILL
        ids = json.loads(await asyncio.to_thread(ids_file.read_text, encoding="utf-8"))

        async with Runtime.open(f"sqlite:///{db}", agents=[child.agent(srv.base_url)]) as rt:
            r = await rt.resume(ids["run_id"])
            rows = await rt.store.thread_items(ids["thread_id"])

    assert r.status == "completed", r.exit
    assert r.text == "A tiny square picture."
    before, after = srv.requests
    sent = "data:image/png;base64," + base64.b64encode(child.IMAGE).decode()
    for body in (before, after):
        [user] = [m for m in body["messages"] if m["role"] == "user"]
        assert user["content"] == [
            {"type": "text", "text": child.PROMPT},
            {"type": "image_url", "image_url": {"url": sent}},
        ]
    assert [i.role for i in rows] == ["user", "assistant"]  # the image row was written once
