"""``reverie schedules``: the file's schedules are stored and listed, paused, resumed, run now."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result


@pytest.fixture
def digest_config(write_config: Callable[[str], Path], write_script: Callable[..., Path]) -> Path:
    script = write_script([{"reply": "Inbox: 3 new."}], "digest.json")
    return write_config(
        f"""
[agents.digest]
model = {json.dumps("scripted:" + str(script))}

[schedules.morning]
agent = "digest"
scope = {{ tenant = "acme", user = "ana" }}
cron = "0 8 * * mon-fri"
timezone = "Europe/Berlin"
input = "It is ${{occurrence}}. Summarise my inbox."
"""
    )


def test_schedules_list_shows_the_schedules_of_reverie_toml(
    cli: Callable[..., Result], digest_config: Path
) -> None:
    result = cli("schedules", "list", "--json")

    assert result.exit_code == 0, result.output
    [listed] = json.loads(result.stdout)
    assert (listed["name"], listed["agent"], listed["cron"]) == (
        "morning",
        "digest",
        "0 8 * * mon-fri",
    )
    assert listed["timezone"] == "Europe/Berlin" and listed["paused"] is False
    assert listed["next_at"].endswith(("+01:00", "+02:00"))
    assert listed["next_at"][11:16] == "08:00"


def test_schedules_pause_and_resume_change_what_is_listed(
    cli: Callable[..., Result], digest_config: Path
) -> None:
    paused = cli("schedules", "pause", "morning", "--json")
    listed = json.loads(cli("schedules", "list", "--json").stdout)
    resumed = cli("schedules", "resume", "morning", "--json")

    assert paused.exit_code == 0, paused.output
    assert json.loads(paused.stdout)["paused"] is True
    assert listed[0]["paused"] is True  # re-reading the file keeps the pause
    assert json.loads(resumed.stdout)["paused"] is False


def test_schedules_run_now_starts_a_run_that_history_shows(
    cli: Callable[..., Result], digest_config: Path
) -> None:
    ran = cli("schedules", "run-now", "morning", "--json")
    history = cli("schedules", "history", "morning", "--json")

    assert ran.exit_code == 0, ran.output
    run = json.loads(ran.stdout)
    assert (run["status"], run["text"]) == ("completed", "Inbox: 3 new.")
    [row] = json.loads(history.stdout)
    assert (row["status"], row["run_id"]) == ("started", run["run_id"])


def test_schedules_add_stores_an_interval_schedule(
    cli: Callable[..., Result], digest_config: Path
) -> None:
    added = cli(
        "schedules", "add", "tick", "--agent", "digest", "--tenant", "acme", "--user", "bob",
        "--every", "900", "--overlap", "queue", "--json",
    )  # fmt: skip
    names = [s["name"] for s in json.loads(cli("schedules", "list", "--json").stdout)]

    assert added.exit_code == 0, added.output
    assert json.loads(added.stdout)["every_s"] == 900
    assert names == ["morning", "tick"]


def test_a_bad_schedule_table_is_a_config_error_naming_its_key(
    cli: Callable[..., Result], write_config: Callable[[str], Path]
) -> None:
    write_config(
        """
[schedules.broken]
agent = "digest"
scope = { tenant = "acme", user = "ana" }
cron = "not a cron"
"""
    )
    result = cli("schedules", "list")

    assert result.exit_code == 2
    assert "schedules.broken" in result.output and "cron" in result.output


def test_an_unknown_schedule_is_a_clear_error(
    cli: Callable[..., Result], digest_config: Path
) -> None:
    result = cli("schedules", "pause", "nope")

    assert result.exit_code == 2
    assert "no schedule named 'nope'" in result.output


def test_a_misspelt_schedule_key_is_named_as_the_other_config_errors_are(
    cli: Callable[..., Result], write_config: Callable[[str], Path]
) -> None:
    write_config(
        """
[schedules.broken]
agent = "digest"
scope = { tenant = "acme", user = "ana" }
crom = "0 8 * * *"
"""
    )
    result = cli("schedules", "list")

    assert result.exit_code == 2
    # The unknown key first (it also makes cron/every_s missing), worded as every config error.
    assert "schedules.broken.crom: unknown key" in result.output
