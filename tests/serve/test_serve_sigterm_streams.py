"""SIGTERM to a real ``reverie serve`` process: a stream still open after the grace is closed
with an error the official SDK surfaces — never cut silently as if the answer were complete."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.responses import ResponseFailedEvent

pytestmark = [
    pytest.mark.slow,  # starts a Python subprocess
    pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM needs POSIX signals"),
]

TESTS = Path(__file__).resolve().parent.parent
TOKEN = "tok-ana-sigterm-3c9d1e"
SCRIPT = [{"call": "wait", "arguments": {"seconds": 600}}, {"reply": "never reached"}]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(tmp_path: Path, port: int) -> subprocess.Popen[str]:
    home = tmp_path / "home"
    home.mkdir()
    script = tmp_path / "waits.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    (home / "reverie.toml").write_text(
        f"""[serve]
shutdown_grace_s = 0.5

[agents.waiter]
model = {json.dumps("scripted:" + str(script))}
tools = ["cli_fixture_tools:wait"]

[auth.tokens]
ana = {{ token_env = "API_TOKEN_ANA", tenant = "acme", user = "ana" }}
""",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    path = [str(TESTS / "cli"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env.update(
        REVERIE_HOME=str(home), USER="tester", API_TOKEN_ANA=TOKEN, PYTHONPATH=os.pathsep.join(path)
    )
    return subprocess.Popen(
        [sys.executable, "-m", "reverie.cli.app", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_until_up(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120  # start-up on a loaded machine; a hang guard only
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"reverie serve exited early: {process.communicate()}")
        try:
            httpx.get(f"{url}/v1/models", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError("reverie serve did not start listening")


def test_after_the_grace_sigterm_ends_open_streams_with_an_error_the_sdk_raises(
    tmp_path: Path,
) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    process = _start(tmp_path, port)
    chat_error: openai.APIError | None = None
    chat_text: list[str] = []
    response_events: list[str] = []
    last: object = None
    try:
        _wait_until_up(url, process)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=60)
        chat = client.chat.completions.create(
            model="waiter", messages=[{"role": "user", "content": "wait"}], stream=True
        )
        chat_chunks = iter(chat)
        next(chat_chunks)  # the opening chunk: the turn runs and its stream is open
        responses = client.responses.create(model="waiter", input="wait", stream=True)
        response_stream = iter(responses)
        response_events.append(next(response_stream).type)

        process.send_signal(signal.SIGTERM)
        try:
            for chunk in chat_chunks:
                chat_text.extend(c.delta.content or "" for c in chunk.choices)
        except openai.APIError as exc:
            chat_error = exc
        rest = list(response_stream)
        response_events.extend(event.type for event in rest)
        last = rest[-1] if rest else None
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()

    # Chat: the SDK raises on the error chunk instead of ending its loop as if complete.
    assert chat_error is not None, chat_text
    assert "shutting down" in chat_error.message
    assert isinstance(chat_error.body, dict) and chat_error.body["code"] == "server_shutdown"
    assert "".join(chat_text) == ""
    # Responses: the stream ends with response.failed, not silently.
    assert response_events[0] == "response.created"
    assert response_events[-1] == "response.failed"
    assert isinstance(last, ResponseFailedEvent) and last.response.error is not None
    assert "shutting down" in last.response.error.message
    assert process.returncode == 0, stderr
    assert TOKEN not in stderr
