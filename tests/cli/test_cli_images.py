"""``reverie run --image FILE``: image files sent with the message (docs/images.md)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from cli.cli_support import run_reverie
from reverie.testing import FakeOpenAIServer, tiny_png


def _config(write_config: Callable[[str], Path], base_url: str, limits: str = "") -> None:
    write_config(
        f"""
[models.local]
base_url = "{base_url}"

[agents.eyes]
model = "local:gpt-test"
{limits}
"""
    )


def test_run_with_image_files_sends_each_as_an_image_part_after_the_text(
    cli: Callable[..., Result], write_config: Callable[[str], Path], tmp_path: Path
) -> None:
    first, second = tmp_path / "a.png", tmp_path / "b.png"
    first.write_bytes(tiny_png(10))
    second.write_bytes(tiny_png(20))
    with FakeOpenAIServer(["Two squares."]) as srv:
        _config(write_config, srv.base_url)
        result = cli("run", "--image", str(first), "--image", str(second), "Compare them")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "Two squares."
    [user] = [m for m in srv.requests[0]["messages"] if m["role"] == "user"]
    urls = [p["image_url"]["url"] for p in user["content"] if p["type"] == "image_url"]
    assert user["content"][0] == {"type": "text", "text": "Compare them"}
    assert urls == [
        "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
        for path in (first, second)
    ]


def test_run_with_a_file_that_is_not_an_image_exits_2_and_starts_no_run(
    cli: Callable[..., Result], write_config: Callable[[str], Path], tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a picture", encoding="utf-8")
    with FakeOpenAIServer([]) as srv:
        _config(write_config, srv.base_url)
        result = cli("run", "--image", str(notes), "look")
        missing = cli("run", "--image", str(tmp_path / "nope.png"), "look")
    assert result.exit_code == 2
    assert "notes.txt" in result.stderr and "PNG, JPEG, GIF or WebP" in result.stderr
    assert missing.exit_code == 2 and "cannot read it" in missing.stderr
    assert srv.requests == []


def test_run_with_an_image_over_max_image_bytes_exits_2_naming_the_cap(
    cli: Callable[..., Result], write_config: Callable[[str], Path], tmp_path: Path
) -> None:
    big = tmp_path / "big.png"
    big.write_bytes(tiny_png(5000))
    with FakeOpenAIServer([]) as srv:
        _config(write_config, srv.base_url, "limits = { max_image_bytes = 1000 }")
        result = cli("run", "--image", str(big), "look")
        listed = cli("runs", "list", "--json")
    assert result.exit_code == 2, result.output
    assert "max_image_bytes" in result.stderr
    assert srv.requests == []
    assert listed.stdout.strip() in ("[]", "")


@pytest.mark.slow  # starts a Python subprocess
def test_chat_image_command_sends_the_file_with_the_next_message_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    picture, notes = tmp_path / "a.png", tmp_path / "notes.txt"
    picture.write_bytes(tiny_png(7))
    notes.write_text("not a picture", encoding="utf-8")
    with FakeOpenAIServer(["A square.", "Plain text."]) as srv:
        (home / "reverie.toml").write_text(
            f'[models.local]\nbase_url = "{srv.base_url}"\n\n[agents.eyes]\n'
            'model = "local:gpt-test"\n',
            encoding="utf-8",
        )
        result = run_reverie(
            home,
            "chat",
            stdin=f"/image {notes}\n/image {picture}\nWhat is it?\nAnd now?\n",
        )
    assert result.returncode == 0, result.stderr
    assert "PNG, JPEG, GIF or WebP" in result.stdout  # the text file was refused at once
    assert "1 image(s) will go with your next message" in result.stdout
    first, second = (
        [m for m in body["messages"] if m["role"] == "user"][-1] for body in srv.requests
    )
    assert first["content"] == [
        {"type": "text", "text": "What is it?"},
        {
            "type": "image_url",
            "image_url": {
                "url": "data:image/png;base64," + base64.b64encode(picture.read_bytes()).decode()
            },
        },
    ]
    assert second["content"] == "And now?"
