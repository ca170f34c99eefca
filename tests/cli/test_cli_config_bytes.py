"""A ``reverie.toml`` that is not UTF-8 TOML text gets the one-line error and exit 2, everywhere."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from reverie.config import load_config
from reverie.core.tomlfile import MAX_TOML_DEPTH
from reverie.errors import ConfigError

_VALID = '[store]\nurl = "sqlite:///x.db"\n'

BAD_FILES: dict[str, bytes] = {
    "utf16": _VALID.encode("utf-16"),
    "utf16-no-bom": _VALID.encode("utf-16-le"),
    "utf32": _VALID.encode("utf-32"),
    "latin1": '[agents.caf\u00e9]\nmodel = "openai:gpt-4.1-mini"\n'.encode("latin-1"),
    "binary": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00",
    "deep-arrays": b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "deep-tables": b"x = " + b"{a = " * 3000 + b"1" + b"}" * 3000 + b"\n",
    "moderately-deep": b"x = " + b"[" * (MAX_TOML_DEPTH + 1) + b"]" * (MAX_TOML_DEPTH + 1),
}

# Every command that reads reverie.toml (and needs no running server to reach that point).
COMMANDS = [
    ("run", "hi"),
    ("chat",),
    ("runs", "list"),
    ("runs", "show", "run_x"),
    ("gates", "list"),
    ("memory", "show"),
    ("serve",),
    ("worker",),
    ("doctor",),
    ("mcp-memory",),
]


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_config_file_that_is_not_utf8_toml_text_is_one_line_config_error(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / "reverie.toml"
    path.write_bytes(BAD_FILES[name])

    with pytest.raises(ConfigError) as info:
        load_config(path)

    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert ". Fix: " in message
    assert "\n" not in message


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c))
@pytest.mark.parametrize("name", ["utf16", "latin1", "binary", "deep-arrays"])
def test_every_cli_command_reports_an_unreadable_config_in_one_line_and_exits_2(
    cli: Callable[..., Result], home: Path, command: tuple[str, ...], name: str
) -> None:
    (home / "reverie.toml").write_bytes(BAD_FILES[name])

    result = cli(*command)

    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {home / 'reverie.toml'}: ")
    assert "Fix: " in lines[0]
    assert "Traceback" not in result.output


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "reverie.toml"
    path.write_bytes(b"\xef\xbb\xbf" + _VALID.encode())

    assert load_config(path).store.url == "sqlite:///x.db"
