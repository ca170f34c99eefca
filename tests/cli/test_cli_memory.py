"""``reverie memory show|edit|search|history|passes|curate`` (DESIGN §12, §13, §16)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import Result

from cli.cli_support import HERE
from reverie import Runtime, Scope
from reverie.memory import NativeMemory
from reverie.store import Document, MemoryPassRecord
from reverie.testing import ScriptedModel, call

ME = Scope(tenant="local", user="tester")
"""The scope the commands act for by default (``--tenant local``, ``$USER=tester``)."""
DUPLICATES = "- likes tea\n- likes tea\n- lives in Lisbon\n"
TIDY = "- likes tea\n- lives in Lisbon\n"

CURATOR_STEPS: list[dict[str, Any]] = [
    {"call": "memory_read", "arguments": {"path": "MEMORY.md"}},
    {
        "call": "memory_write",
        "arguments": {"target": "MEMORY.md", "content": TIDY, "expected_version": 1},
    },
    {
        "call": "structured_result",
        "arguments": {"changed": True, "summary": "merged 1 duplicate", "entries_merged": 1},
    },
]
"""A curation pass as a scripted file: read, one conditional rewrite, the report."""


@pytest.fixture
def url(home: Path) -> str:
    return f"sqlite:///{home / 'reverie.db'}"


@pytest.fixture
def memory_config(write_config: Callable[[str], Path], url: str) -> Path:
    return write_config(f'[store]\nurl = "{url}"\n\n[memory]\nprovider = "native"\n')


def seed(url: str, text: str, scope: Scope = ME) -> Document:
    async def write() -> Document:
        async with Runtime.open(url, memory=NativeMemory()) as rt:
            current = await rt.memory.read(scope, "MEMORY.md")
            return await rt.memory.write(scope, "MEMORY.md", text, expected_version=current.version)

    return asyncio.run(write())


def read(url: str, scope: Scope = ME) -> Document:
    async def get() -> Document:
        async with Runtime.open(url, memory=NativeMemory()) as rt:
            return await rt.memory.read(scope, "MEMORY.md")

    return asyncio.run(get())


def test_memory_show_prints_the_standing_document_of_the_scope(
    cli: Callable[..., Result], memory_config: Path, url: str
) -> None:
    seed(url, DUPLICATES)
    seed(url, "- bob's secret\n", Scope(tenant="local", user="bob"))

    shown = cli("memory", "show")
    as_json = json.loads(cli("memory", "show", "MEMORY.md", "--json").stdout)
    bobs = cli("memory", "show", "--user", "bob")

    assert shown.exit_code == 0 and shown.stdout == DUPLICATES
    assert as_json == {"path": "MEMORY.md", "version": 1, "text": DUPLICATES}
    assert bobs.stdout == "- bob's secret\n"


def test_memory_show_of_a_missing_document_says_it_does_not_exist(
    cli: Callable[..., Result], memory_config: Path
) -> None:
    shown = cli("memory", "show", "notes/people.md")
    assert shown.exit_code == 0 and shown.stdout == ""
    assert "does not exist yet" in shown.stderr


def test_memory_commands_need_memory_configured(
    cli: Callable[..., Result], write_config: Callable[[str], Path]
) -> None:
    write_config("")
    result = cli("memory", "show")
    assert result.exit_code == 2
    assert "memory is off" in result.stderr and 'provider = "native"' in result.stderr


def test_memory_show_refuses_an_invalid_path(
    cli: Callable[..., Result], memory_config: Path
) -> None:
    result = cli("memory", "show", "../etc/passwd")
    assert result.exit_code == 2 and "error:" in result.stderr


@pytest.fixture
def editor(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Set $EDITOR to the fake editor with the given behaviour."""

    def use(**env: str) -> None:
        monkeypatch.delenv("VISUAL", raising=False)
        monkeypatch.setenv("EDITOR", f"{sys.executable} {HERE / 'cli_fake_editor.py'}")
        for key, value in env.items():
            monkeypatch.setenv(f"FAKE_EDIT_{key.upper()}", value)

    return use


def test_memory_edit_saves_the_edit_conditionally_on_the_version_read(
    cli: Callable[..., Result], memory_config: Path, url: str, editor: Callable[..., None]
) -> None:
    seed(url, DUPLICATES)
    editor(text=TIDY)

    result = cli("memory", "edit")

    assert result.exit_code == 0, result.output
    assert "saved as version 2" in result.stdout
    assert read(url) == Document(TIDY, 2)


def test_memory_edit_without_changes_writes_nothing(
    cli: Callable[..., Result], memory_config: Path, url: str, editor: Callable[..., None]
) -> None:
    seed(url, DUPLICATES)
    editor()
    result = cli("memory", "edit")
    assert result.exit_code == 0 and "no changes" in result.stdout
    assert read(url).version == 1


def test_memory_edit_that_loses_a_race_exits_1_keeps_the_draft_and_the_other_write(
    cli: Callable[..., Result], memory_config: Path, url: str, editor: Callable[..., None]
) -> None:
    seed(url, DUPLICATES)
    editor(text="- my edit\n", race_store=url, race_text="- the other write\n")

    result = cli("memory", "edit")

    assert result.exit_code == 1
    message = " ".join(result.stderr.split())
    assert "changed while you were editing it" in message and "NOT saved" in message
    assert "version 1" in message and "version 2" in message
    draft = Path(message.split("kept in ")[1].split(". Run")[0])
    assert draft.read_text(encoding="utf-8") == "- my edit\n"  # nothing lost
    assert read(url) == Document("- the other write\n", 2)
    draft.unlink()


def test_memory_edit_whose_editor_fails_saves_nothing(
    cli: Callable[..., Result], memory_config: Path, url: str, editor: Callable[..., None]
) -> None:
    seed(url, DUPLICATES)
    editor(text="- half an edit", exit="3")
    result = cli("memory", "edit")
    assert result.exit_code == 1 and "nothing was saved" in result.stderr
    assert read(url).version == 1


def test_memory_search_finds_the_scopes_documents_only(
    cli: Callable[..., Result], memory_config: Path, url: str
) -> None:
    seed(url, "- plays the cello on sundays\n")
    seed(url, "- cello teacher\n", Scope(tenant="local", user="bob"))

    table = cli("memory", "search", "cello")
    hits = json.loads(cli("memory", "search", "cello", "--json").stdout)
    nothing = cli("memory", "search", "trombone")

    assert table.exit_code == 0 and "plays the cello" in table.stdout
    assert [(h["kind"], h["ref"]) for h in hits] == [("document", "MEMORY.md")]
    assert "teacher" not in table.stdout
    assert "no matches" in nothing.stdout


def test_memory_history_lists_versions_newest_first(
    cli: Callable[..., Result], memory_config: Path, url: str
) -> None:
    seed(url, DUPLICATES)
    seed(url, TIDY)

    table = cli("memory", "history")
    versions = json.loads(cli("memory", "history", "MEMORY.md", "--json").stdout)

    assert table.exit_code == 0 and "lives in Lisbon" in table.stdout
    assert [(v["version"], v["text"]) for v in versions] == [(2, TIDY), (1, DUPLICATES)]


def test_memory_passes_lists_the_scopes_passes_and_their_reports(
    cli: Callable[..., Result], memory_config: Path, url: str
) -> None:
    seed(url, DUPLICATES)

    async def curate() -> MemoryPassRecord:
        model = ScriptedModel(
            [
                call("memory_read", path="MEMORY.md"),
                call("memory_write", target="MEMORY.md", content=TIDY, expected_version=1),
                call("structured_result", changed=True, summary="merged 1 duplicate"),
            ]
        )
        async with Runtime.open(url, memory=NativeMemory()) as rt:
            return await rt.memory.curate(ME, model=model)

    record = asyncio.run(curate())
    empty = cli("memory", "passes")
    assert empty.exit_code == 0  # nothing for bob... but ours is listed:

    table = cli("memory", "passes")
    listed = json.loads(cli("memory", "passes", "--json").stdout)
    others = json.loads(cli("memory", "passes", "--json", "--user", "bob").stdout)

    assert record.pass_id in table.stdout and "merged 1 duplicate" in table.stdout
    assert [p["pass_id"] for p in listed] == [record.pass_id]
    assert listed[0]["report"]["write"] == "written" and listed[0]["run_id"] == record.run_id
    assert others == []


def test_memory_curate_now_runs_one_pass_waits_and_prints_its_report(
    cli: Callable[..., Result],
    write_config: Callable[[str], Path],
    write_script: Callable[..., Path],
    url: str,
) -> None:
    script = write_script(CURATOR_STEPS, "curator.json")
    write_config(
        f'[store]\nurl = "{url}"\n\n[memory]\nprovider = "native"\n'
        f"curation_model = {json.dumps('scripted:' + str(script))}\n"
    )
    seed(url, DUPLICATES)

    result = cli("memory", "curate", "--now")

    assert result.exit_code == 0, result.output
    assert "merged 1 duplicate" in result.stdout and "completed" in result.stdout
    assert "written" in result.stdout
    assert read(url) == Document(TIDY, 2)
    listed = json.loads(cli("memory", "passes", "--json").stdout)
    assert len(listed) == 1 and listed[0]["report"]["summary"] == "merged 1 duplicate"


def test_memory_curate_now_with_a_model_that_fails_the_contract_exits_1(
    cli: Callable[..., Result], memory_config: Path, tmp_path: Path, url: str
) -> None:
    # A pass answered by chat, never by the report its contract asks for.
    script = tmp_path / "chatty.json"
    chatty = [{"reply": "all tidy!"}, {"reply": "really, all tidy"}]
    script.write_text(json.dumps({"steps": chatty, "curation": chatty}), encoding="utf-8")
    seed(url, DUPLICATES)

    result = cli("memory", "curate", "--now", "--model", f"scripted:{script}", "--json")

    assert result.exit_code == 1
    report = json.loads(result.stdout)["report"]
    assert report["status"] == "failed" and "output_contract_violation" in report["error"]
    assert read(url) == Document(DUPLICATES, 1)


def test_memory_curate_needs_now_and_a_model(
    cli: Callable[..., Result], memory_config: Path
) -> None:
    without_now = cli("memory", "curate")
    assert without_now.exit_code == 2 and "--now" in without_now.stderr
    no_model = cli("memory", "curate", "--now")
    assert no_model.exit_code == 2 and "no model for the curation pass" in no_model.stderr


def test_reverie_run_with_curation_configured_tidies_memory_after_the_nth_turn(
    cli: Callable[..., Result],
    write_config: Callable[[str], Path],
    write_script: Callable[..., Path],
    url: str,
) -> None:
    agent = write_script([{"reply": "ok"}], "agent.json")
    curator = write_script(CURATOR_STEPS, "curator.json")
    write_config(
        f'[store]\nurl = "{url}"\n\n'
        f"[agents.assistant]\nmodel = {json.dumps('scripted:' + str(agent))}\n\n"
        '[memory]\nprovider = "native"\ncuration_interval_turns = 2\n'
        f"curation_model = {json.dumps('scripted:' + str(curator))}\n"
    )
    seed(url, DUPLICATES)

    assert cli("run", "first").exit_code == 0
    assert json.loads(cli("memory", "passes", "--json").stdout) == []
    assert cli("run", "second").exit_code == 0  # the Nth turn; the command waits for its pass

    listed = json.loads(cli("memory", "passes", "--json").stdout)
    assert len(listed) == 1 and listed[0]["report"]["status"] == "completed"
    assert read(url) == Document(TIDY, 2)


def test_an_interval_with_a_provider_that_declares_no_pass_fails_commands_that_run(
    cli: Callable[..., Result], write_config: Callable[[str], Path]
) -> None:
    write_config(
        '[memory]\nprovider = "mcp"\ncuration_interval_turns = 2\n\n'
        '[memory.mcp]\ncommand = ["reverie", "mcp-memory"]\n'
    )
    result = cli("run", "--model", "scripted:/nowhere.json", "hi")
    assert result.exit_code == 2
