"""A password in a configured endpoint URL and the model key never reach ``reverie run
--json``, ``runs show --json``, ``doctor``, the logs at DEBUG or the database files."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

URL_PASSWORD = "pw-CANARY-cli-6161"
MODEL_KEY = "sk-CANARY-cli-key-2727"


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def store_bytes(home: Path) -> bytes:
    """The SQLite database under ``home`` with its ``-wal`` and ``-shm`` files."""
    files = [p for p in sorted(home.rglob("*")) if p.is_file() and ".db" in p.name]
    assert files, "no database files"
    return b"".join(p.read_bytes() for p in files)


def test_a_url_password_and_the_model_key_never_reach_cli_json_doctor_logs_or_the_database(
    cli: Callable[..., Result],
    write_config: Callable[[str], Path],
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CANARY_MODEL_KEY", MODEL_KEY)
    write_config(
        "[models.corp]\n"
        f'base_url = "http://user:{URL_PASSWORD}@127.0.0.1:{dead_port()}/v1"\n'
        'api_key_env = "CANARY_MODEL_KEY"\n'
        "[agents.assistant]\n"
        'model = "corp:gpt-x"\n'
    )
    ran = cli("run", "--json", "--log-level", "debug", "hi")
    assert ran.exit_code == 1, ran.output
    payload = json.loads(ran.stdout)
    assert payload["status"] == "failed"
    assert "cannot connect to http://***@127.0.0.1" in json.dumps(payload)
    shown = cli("runs", "show", "--json", payload["run_id"])
    assert shown.exit_code == 0, shown.output
    doctor = cli("doctor")
    assert "http://***@127.0.0.1" in doctor.stdout + doctor.stderr
    outputs = {
        "run --json": ran.stdout,
        "run's stderr (logs at DEBUG)": ran.stderr,
        "runs show --json": shown.stdout,
        "doctor": doctor.stdout + doctor.stderr,
    }
    assert " DEBUG " in ran.stderr
    for where, text in outputs.items():
        assert URL_PASSWORD not in text, f"the URL password leaked into {where}"
        assert MODEL_KEY not in text, f"the model key leaked into {where}"
    stored = store_bytes(home)
    assert payload["run_id"].encode() in stored
    assert URL_PASSWORD.encode() not in stored
    assert MODEL_KEY.encode() not in stored
