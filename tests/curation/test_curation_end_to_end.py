"""The "done when" scenario of curation, end to end on a SQLite file (DESIGN §13).

A duplicate-ridden MEMORY.md is tidied after the Nth turn; the tidied text is in a later
conversation's prompt; a user's edit that races the next pass is preserved and that pass
reports the conflict; ``reverie memory passes`` lists both reports.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from curation.curation_support import (
    ANA,
    DUPLICATES,
    TIDY,
    settled_passes,
    tidy_curator,
    tool_payloads,
    turns,
)
from reverie import Agent, Runtime
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.memory import NativeMemory
from reverie.testing import ScriptedModel, reply

PORTO = "- Ana moved to Porto.\n"
JAZZ = "- Ana likes jazz.\n"


def memory_context(request: ModelRequest) -> str:
    return next((m.content for m in request.messages if m.content.startswith("[memory]")), "")


@pytest.mark.slow
async def test_duplicates_are_tidied_after_the_nth_turn_recalled_later_and_a_racing_edit_survives(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'reverie.db'}"
    read_again = asyncio.Event()
    edited = asyncio.Event()
    tidy = tidy_curator()

    async def curator(request: ModelRequest) -> ModelResponse:
        results = tool_payloads(request)
        if len(results) == 1 and results[0]["version"] == 3 and not edited.is_set():
            read_again.set()  # the second pass has read the changed document; Ana edits now
            await edited.wait()
        return tidy(request)

    user = ScriptedModel(lambda request: reply("ok"), name="user")
    agent = Agent(name="assistant", model=user, instructions="You are helpful.")
    async with Runtime.open(
        url,
        memory=NativeMemory(),
        curation_interval_turns=2,
        curation_model=ScriptedModel(curator, name="curator"),
    ) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)

        # 1. The Nth (2nd) completed turn tidies the document in the background.
        await turns(rt, agent, ANA, 2)
        (first,) = await settled_passes(rt, ANA)
        assert first.report["status"] == "completed" and first.report["changed"] is True
        assert (await rt.memory.read(ANA)).text == TIDY

        # 2. A later conversation's prompt carries the tidied text, not the duplicates.
        later = await rt.run(agent, "What do you know about me?", scope=ANA)
        seen = memory_context(user.requests[-1])
        assert later.status == "completed"
        assert TIDY.strip() in seen and "Ana is a vegetarian." not in seen

        # 3. The document changes again, so the next pass (after turn 4) curates it; it races
        # Ana's own edit, which wins and is preserved.
        await rt.memory.write(ANA, "MEMORY.md", TIDY + JAZZ, expected_version=2)
        await turns(rt, agent, ANA, 1)
        await read_again.wait()
        current = await rt.memory.read(ANA)
        await rt.memory.write(
            ANA, "MEMORY.md", TIDY + JAZZ + PORTO, expected_version=current.version
        )
        edited.set()
        first_again, second = await settled_passes(rt, ANA)
        assert first_again == first
        assert second.report["write"] == "conflict" and second.report["conflicts"]
        assert (await rt.memory.read(ANA)).text == TIDY + JAZZ + PORTO

    # 4. `reverie memory passes` (a separate process) lists both reports from the store.
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(f'[store]\nurl = "{url}"\n\n[memory]\nprovider = "native"\n')
    scope = ("--tenant", "acme", "--user", "ana")
    listed = await reverie(home, "memory", "passes", *scope, "--json")
    assert listed.returncode == 0, listed.stderr
    payload = json.loads(listed.stdout)
    assert [p["pass_id"] for p in payload] == [second.pass_id, first.pass_id]
    assert payload[1]["report"]["summary"] == "merged duplicate entries"
    assert payload[0]["report"]["write"] == "conflict"
    table = await reverie(home, "memory", "passes", *scope)
    assert table.returncode == 0 and "merged duplicate entries" in table.stdout
    assert first.pass_id in table.stdout and "conflict" in table.stdout
    shown = await reverie(home, "memory", "show", *scope)
    assert shown.stdout == TIDY + JAZZ + PORTO


async def reverie(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``reverie ARGS...`` in a child process with ``REVERIE_HOME=home``."""
    env = {**os.environ, "REVERIE_HOME": str(home), "COLUMNS": "200"}
    command = [sys.executable, "-m", "reverie.cli.app", *args]
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, env=env, timeout=60, check=False
    )
