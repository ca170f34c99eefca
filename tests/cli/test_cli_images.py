"""``reverie run --image FILE``: image files sent with the message (docs/images.md)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

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
