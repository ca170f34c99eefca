"""The CLI and ``reverie serve`` in front of a real model server (llama-cpp-python, SmolLM2-135M).

``reverie serve`` runs as an operator runs it (a child process, agents and tokens from
``reverie.toml``) and the official openai SDK is its client, plain and streamed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest

from real_model.llama_support import LlamaServer, free_port

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

TOKEN = "tok-ana-real-model-7c2f"


def _config(home: Path, llama: LlamaServer) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "reverie.toml").write_text(
        f"""
[models.llama]
base_url = {json.dumps(llama.base_url)}

[agents.smol]
model = "llama:smollm2"
instructions = "Answer in one short sentence."

[auth.tokens]
ana = {{ token_env = "API_TOKEN_ANA", tenant = "acme", user = "ana" }}
""",
        encoding="utf-8",
    )


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(REVERIE_HOME=str(home), USER="tester", API_TOKEN_ANA=TOKEN)
    return env


@contextmanager
def _serve(home: Path) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "reverie.cli.app", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(home),
    )
    try:
        deadline = time.monotonic() + 120  # a hang guard for start-up on a loaded machine
        while True:
            if process.poll() is not None:
                raise AssertionError(f"reverie serve exited early: {process.communicate()}")
            try:
                httpx.get(f"{url}/v1/models", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise AssertionError("reverie serve did not start listening") from None
                time.sleep(0.05)
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def test_the_cli_runs_an_agent_on_a_real_server(tmp_path: Path, llama: LlamaServer) -> None:
    home = tmp_path / "home"
    _config(home, llama)
    done = subprocess.run(
        [sys.executable, "-m", "reverie.cli.app", "run", "--agent", "smol", "Say hello."],
        capture_output=True,
        text=True,
        env=_env(home),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_reverie_serve_answers_the_openai_sdk_from_a_real_server(
    tmp_path: Path, llama: LlamaServer
) -> None:
    home = tmp_path / "home"
    _config(home, llama)
    with _serve(home) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=300)
        with client:
            plain = client.chat.completions.create(
                model="smol", messages=[{"role": "user", "content": "Say hello."}]
            )
            stream = client.chat.completions.create(
                model="smol",
                messages=[{"role": "user", "content": "Say hello."}],
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = list(stream)
    assert plain.choices[0].message.content
    assert plain.choices[0].finish_reason == "stop"
    assert plain.usage is not None and plain.usage.prompt_tokens > 0
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage = [c.usage for c in chunks if c.usage is not None]
    assert usage and usage[-1].prompt_tokens > 0
