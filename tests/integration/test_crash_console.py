"""The console after a real SIGKILL mid-tool (docs/console.md): the call whose worker died is
shown "in doubt" in the side-effect journal, with its tool's idempotency flag, once the run was
recovered — what happened to its effect is unknown, and the page says so."""

from __future__ import annotations

import re

import httpx
import pytest

from integration.crash_support import Crash, load_child
from reverie import Runtime, Scope
from reverie.serve import create_app

pytestmark = [pytest.mark.crash, pytest.mark.slow]

TOKEN = "tok-crash-console-4e1b7a"


async def test_a_call_cut_by_a_crash_shows_in_doubt_with_its_idempotency_after_recovery(
    crash: Crash,
) -> None:
    ids = await crash.start_and_kill_at("non_idempotent", "send-1.started")
    assert (await crash.resume_in_child("non_idempotent", ids["run_id"]))["status"] == "completed"
    agent = load_child().Scenario("non_idempotent", crash.markers, "console").agent
    async with Runtime.open(crash.url) as rt:
        app = create_app(
            rt, agents={agent.name: agent}, tokens={TOKEN: Scope(tenant="acme", user="ana")}
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as browser:
            assert (await browser.get("/console/", params={"token": TOKEN})).status_code == 303
            page = await browser.get(f"/console/runs/{ids['run_id']}")
    assert page.status_code == 200
    journal = page.text.split('id="journal"')[1].split("</table>")[0]
    rows = re.findall(
        r"<tr><td class=\"mono\">[^<]+</td><td>([^<]+)</td>\s*<td[^>]*>([^<]+)</td>"
        r"<td>[^<]*</td>\s*<td>([^<]+)</td></tr>",
        journal,
    )
    assert rows == [("send", "in doubt", "no")]
    assert "state-in-doubt" in journal
    # The model was told the outcome is unknown (the synthetic result the resume recorded).
    assert "interrupted: outcome unknown" in page.text
