"""``reverie serve`` as an operator runs it: agents and tokens from reverie.toml, a child process
listening on 127.0.0.1, the official SDK as the client, Ctrl-C to stop."""

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
from typer.testing import CliRunner

from reverie.cli.app import app

pytestmark = pytest.mark.slow  # each test starts a Python subprocess

REPO = Path(__file__).resolve().parent.parent.parent
SCRIPT = REPO / "examples" / "scripted_hello.json"
TOKEN = "tok-ana-from-env-5d1e"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _write_config(home: Path, extra: str = "") -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "reverie.toml").write_text(
        f"""{extra}
[agents.assistant]
model = {json.dumps("scripted:" + str(SCRIPT))}
instructions = "You add."
tools = ["reverie.cli.demo_tools:add"]

[auth.tokens]
ana = {{ token_env = "API_TOKEN_ANA", tenant = "acme", user = "ana" }}
""",
        encoding="utf-8",
    )


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(REVERIE_HOME=str(home), USER="tester", **extra)
    return env


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


def test_reverie_serve_answers_the_openai_sdk_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _write_config(home)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "reverie.cli.app", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(home, API_TOKEN_ANA=TOKEN),
    )
    try:
        _wait_until_up(url, process)
        refused = httpx.get(f"{url}/v1/models", timeout=5)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=20)
        with client:
            models = [m.id for m in client.models.list()]
            completion = client.chat.completions.create(
                model="assistant", messages=[{"role": "user", "content": "What is 2 + 3?"}]
            )
        runs = httpx.get(
            f"{url}/v1/runs", headers={"authorization": f"Bearer {TOKEN}"}, timeout=5
        ).json()["data"]
    finally:
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()

    assert refused.status_code == 401
    assert models == ["assistant"]
    assert completion.choices[0].message.content == "Hello! I asked the add tool: 2 + 3 = 5."
    assert [r["status"] for r in runs] == ["completed"]
    assert process.returncode == 0, stderr
    assert f"http://127.0.0.1:{port}/v1" in stderr
    assert TOKEN not in stderr  # the token is never printed
    assert (home / "reverie.db").exists()  # runs are durable in the configured store
    assert "garbage collector tuned for a server" in stderr  # docs/scaling.md


def test_reverie_serve_applies_the_body_limit_and_cors_origins_of_the_serve_table(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    origin = "https://app.example"
    _write_config(home, f'[serve]\nmax_body_bytes = 512\ncors_origins = ["{origin}"]\n')
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "reverie.cli.app", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(home, API_TOKEN_ANA=TOKEN),
    )
    try:
        _wait_until_up(url, process)
        auth = {"authorization": f"Bearer {TOKEN}"}
        big = httpx.post(
            f"{url}/v1/runs", json={"agent": "assistant", "input": "x" * 600}, headers=auth
        )
        preflight = httpx.options(
            f"{url}/v1/runs",
            headers={"origin": origin, "access-control-request-method": "POST"},
        )
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            _, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
    assert big.status_code == 413
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == origin
    assert process.returncode == 0, stderr


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("REVERIE_HOME", str(path))
    monkeypatch.delenv("API_TOKEN_ANA", raising=False)
    return path


def test_serve_without_tokens_exits_2_saying_what_to_add(home: Path) -> None:
    (home / "reverie.toml").write_text(
        f"[agents.assistant]\nmodel = {json.dumps('scripted:' + str(SCRIPT))}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 2
    assert "no bearer tokens are configured" in result.output
    assert "[auth.tokens]" in result.output


def test_serve_with_an_unset_token_variable_exits_2_naming_it(home: Path) -> None:
    _write_config(home)
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 2
    assert "auth.tokens.ana.token_env" in result.output
    assert "API_TOKEN_ANA is not set" in result.output


def test_reverie_imports_without_the_serve_extra_and_serve_names_it() -> None:
    code = (
        "import sys\n"
        "for name in ('starlette', 'uvicorn', 'sse_starlette'):\n"
        "    sys.modules[name] = None\n"
        "import reverie, reverie.config, reverie.cli.app\n"
        "try:\n"
        "    import reverie.serve\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'reverie[serve]'" in result.stdout
