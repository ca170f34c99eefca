"""A scripted model shows a memory curation pass offline: ``reverie memory curate --now``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

from cli.cli_support import EXAMPLE_SCRIPT


def test_any_scripted_file_answers_a_curation_pass(
    cli: Callable[..., Result], write_config: Callable[[str], Path]
) -> None:
    write_config('[memory]\nprovider = "native"\n')

    result = cli("memory", "curate", "--now", "--json", "--model", f"scripted:{EXAMPLE_SCRIPT}")

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["report"]
    assert report["status"] == "completed"
    assert report["changed"] is False
    assert "left it as it was" in report["summary"]


def test_a_scripted_file_with_curation_steps_runs_them_in_the_pass(
    cli: Callable[..., Result], write_config: Callable[[str], Path], tmp_path: Path
) -> None:
    script = tmp_path / "demo.json"
    script.write_text(
        json.dumps(
            {
                "steps": [{"reply": "Noted."}],
                "curation": [
                    {"call": "memory_read", "arguments": {}},
                    {"result": {"changed": False, "summary": "Read it: nothing to merge."}},
                ],
            }
        ),
        encoding="utf-8",
    )
    write_config(
        '[memory]\nprovider = "native"\n'
        f"[agents.assistant]\nmodel = {json.dumps('scripted:' + str(script))}\n"
    )
    assert cli("run", "remember tea").stdout.strip() == "Noted."

    result = cli("memory", "curate", "--now", "--json")

    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["report"]["summary"] == "Read it: nothing to merge."
