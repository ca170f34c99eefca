"""``reverie serve`` on a port in use exits 4 (not 3, "blocked") with one line saying so."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reverie.cli.app import app
from reverie.cli.common import ExitCode
from reverie.errors import ListenError
from reverie.serve import listen

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "scripted_hello.json"


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another listener holds for the test's duration."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("REVERIE_HOME", str(path))
    (path / "reverie.toml").write_text(
        f"[agents.assistant]\nmodel = {json.dumps('scripted:' + str(SCRIPT))}\n\n"
        '[auth.tokens]\ntok-ana = { tenant = "acme", user = "ana" }\n',
        encoding="utf-8",
    )
    return path


def test_serve_on_a_port_in_use_exits_with_the_cannot_listen_code(
    home: Path, busy_port: int
) -> None:
    result = CliRunner().invoke(app, ["serve", "--port", str(busy_port)])

    assert result.exit_code == int(ExitCode.CANNOT_LISTEN)
    assert int(ExitCode.CANNOT_LISTEN) == 4
    assert result.exit_code != int(ExitCode.BLOCKED)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"127.0.0.1:{busy_port}" in lines[0]
    assert "already in use" in lines[0]
    assert "Traceback" not in result.output
    # Nothing was opened: the check comes before the store.
    assert not (home / "reverie.db").exists()


def test_listen_raises_a_typed_error_for_a_busy_port_and_an_unknown_host(busy_port: int) -> None:
    with pytest.raises(ListenError, match="already in use") as info:
        listen("127.0.0.1", busy_port)
    assert info.value.port == busy_port
    with pytest.raises(ListenError, match="cannot be resolved"):
        listen("no-such-host.invalid", 8400)


def test_listen_on_port_zero_binds_a_free_port() -> None:
    with listen("127.0.0.1", 0) as sock:
        assert sock.getsockname()[1] > 0
