"""Every example under ``examples/`` runs offline, as the README says to run it.

The project example is copied to a temporary folder first (its store is a file next to its
``reverie.toml``), then driven like a newcomer would: from that folder, with no ``--config``.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from cli.cli_support import REPO, run_reverie
from reverie.config import build_agents, load_config

pytestmark = pytest.mark.slow  # each test starts Python subprocesses

EXAMPLES = REPO / "examples"


def _python(script: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["REVERIE_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
        cwd=REPO,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of ``examples/project`` (without any store a previous run left there)."""
    copy = tmp_path / "project"
    shutil.copytree(
        EXAMPLES / "project", copy, ignore=shutil.ignore_patterns("reverie.db*", "__pycache__")
    )
    return copy


def test_the_hello_example_prints_the_reply(tmp_path: Path) -> None:
    result = _python(EXAMPLES / "hello.py", tmp_path / "home")

    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello! How can I help?\n"
    assert (tmp_path / "home" / "reverie.db").exists()


def test_the_hello_example_is_three_lines_of_code() -> None:
    body = ast.parse((EXAMPLES / "hello.py").read_text(encoding="utf-8")).body
    code = [node for node in body if not isinstance(node, ast.Expr | ast.ImportFrom)]
    code += [n for n in body if isinstance(n, ast.Expr) and not isinstance(n.value, ast.Constant)]
    imports = [node for node in body if isinstance(node, ast.ImportFrom)]
    # The agent and the print (and, for a real model, the import of Agent alone).
    assert len(code) == 2
    assert [node.module for node in imports] == ["reverie", "reverie.testing"]


def test_the_quickstart_prints_its_reply_and_readable_usage(tmp_path: Path) -> None:
    result = _python(EXAMPLES / "quickstart.py", tmp_path / "home")

    assert result.returncode == 0, result.stderr
    assert "completed: 2 + 3 = 5" in result.stdout
    assert "2 model calls, 1 tool call, 0 tokens" in result.stdout
    assert "Usage(" not in result.stdout


def test_the_example_project_blocks_on_a_gate_and_a_pasted_approve_sends(
    project: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    blocked = run_reverie(home, "run", "--agent", "mailer", "Invite Ana to lunch", cwd=project)
    assert blocked.returncode == 3, blocked.stderr
    approve = re.search(r"approve:\s+reverie (gates approve \S+)", blocked.stdout)
    assert approve is not None, blocked.stdout

    listed = run_reverie(home, "gates", "list", "--json", cwd=project)
    approved = run_reverie(home, *approve.group(1).split(), cwd=project)

    assert [g["tool"] for g in json.loads(listed.stdout)] == ["send_email"]
    assert approved.returncode == 0, approved.stderr
    assert "Sent: Ana has the invitation." in approved.stdout
    assert (project / "reverie.db").exists()  # the project's own store, next to its file
    assert not (home / "reverie.db").exists()


def test_the_example_project_chats_and_shows_a_curation_pass(project: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    chat = run_reverie(
        home, "chat", "--agent", "assistant", cwd=project, stdin="What is 2 + 3?\nAgain?\n"
    )
    assert chat.returncode == 0, chat.stderr
    assert "2 + 3 = 5." in chat.stdout

    passes = run_reverie(home, "memory", "passes", "--json", cwd=project)
    now = run_reverie(home, "memory", "curate", "--now", cwd=project)

    # Two completed turns: curation_interval_turns = 2 made a pass in the background.
    assert passes.returncode == 0, passes.stderr
    assert [p["report"]["status"] for p in json.loads(passes.stdout)] == ["completed"]
    assert now.returncode == 0, now.stderr
    assert "Read MEMORY.md: nothing to merge or remove." in now.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_example_project_serves_chat_completions_with_its_token(
    project: Path, tmp_path: Path
) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["REVERIE_HOME"] = str(tmp_path / "home")
    server = subprocess.Popen(
        [sys.executable, "-m", "reverie.cli.app", "serve", "--port", str(port)],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120  # start-up on a loaded machine; a hang guard only
        while True:
            assert server.poll() is None, server.communicate()
            try:
                httpx.get(f"{url}/models", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "reverie serve did not start"
                time.sleep(0.05)
        answer = httpx.post(
            f"{url}/chat/completions",
            headers={"authorization": "Bearer demo-token"},
            json={"model": "assistant", "messages": [{"role": "user", "content": "2 + 3?"}]},
            timeout=60,
        )
    finally:
        server.terminate()
        server.communicate(timeout=60)

    assert answer.status_code == 200, answer.text
    assert "2 + 3 = 5." in answer.json()["choices"][0]["message"]["content"]


def test_the_real_model_example_loads_without_a_key_or_a_network() -> None:
    config = load_config(EXAMPLES / "real-models.toml")
    agents = {agent.name: agent for agent in build_agents(config)}

    assert sorted(agents) == ["assistant", "local", "mailer"]
    try:
        assert [str(getattr(m, "name", m)) for m in agents["assistant"].models] == [
            "ollama:llama3.1"
        ]
        assert "send_email" in {tool.descriptor.name for tool in agents["mailer"].tools}
    finally:
        for agent in agents.values():
            for model in agent.models:
                close = getattr(model, "aclose", None)
                if close is not None:
                    asyncio.run(close())
