"""Screenshots of each console page for docs/console.md (PNG under docs/console/).

    python scripts/console_screenshots.py [--out docs/console]

Serves a runtime holding sample data (a completed run with a tool call, a run waiting on an
approval, a two-turn thread, a memory document with versions and a curation pass) and drives
headless Chromium (Debian's ``/usr/bin/chromium`` or ``$REVERIE_CHROMIUM``, through Playwright
from PyPI) to each page. Run it after changing a page's template.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from reverie import Agent, Runtime, Scope, tool
from reverie.memory import NativeMemory
from reverie.serve import background_server, create_app
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")
TOKEN = "tok-screenshots-6b2d91"
CHROMIUM = os.environ.get("REVERIE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@tool(effects={"write"}, needs_approval=True, idempotent=False)
async def send_email(to: str, subject: str, api_token: str = "") -> str:
    """Send an email."""
    return f"sent to {to}"


@tool(effects=set(), idempotent=True)
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


def _agents() -> list[Agent]:
    def assistant_turn(request: Any) -> Any:
        if request.messages[-1].role == "tool":
            return reply("2 + 3 = 5. Anything else?")
        return call("add", a=2, b=3)

    def mailer_turn(request: Any) -> Any:
        if request.messages[-1].role == "tool":
            return reply("The invitation is on its way to Carol.")
        return call(
            "send_email", to="carol@example.com", subject="Friday lunch", api_token="sk-live-123"
        )

    return [
        Agent(name="assistant", model=ScriptedModel(assistant_turn), tools=[add]),
        Agent(name="mailer", model=ScriptedModel(mailer_turn), tools=[send_email]),
    ]


async def _sample_data(rt: Runtime, agents: list[Agent]) -> dict[str, str]:
    assistant, mailer = agents
    first = await rt.run(assistant, "What is 2 + 3?", scope=SCOPE)
    await rt.run(assistant, "And 2 + 3 again?", scope=SCOPE, thread_id=first.thread_id)
    done = await rt.run(mailer, "Invite Carol to lunch on Friday", scope=SCOPE)
    assert done.gate is not None
    await rt.approve(done.gate.ref)
    waiting = await rt.run(mailer, "Invite Dan too", scope=SCOPE)
    memory = rt.memory
    v1 = await memory.write(
        SCOPE, "MEMORY.md", "- likes tea\n- works at Acme\n", expected_version=0
    )
    v2 = await memory.write(
        SCOPE,
        "MEMORY.md",
        "- likes tea\n- works at Acme\n- likes tea in the afternoon\n- lunch on Fridays\n",
        expected_version=v1.version,
    )
    curator = ScriptedModel(
        [
            call("memory_read", path="MEMORY.md"),
            call(
                "memory_write",
                target="MEMORY.md",
                content="- likes tea, in the afternoon\n- works at Acme\n- lunch on Fridays\n",
                expected_version=v2.version,
            ),
            call(
                "structured_result",
                changed=True,
                summary="merged the two tea facts",
                entries_merged=1,
            ),
        ]
    )
    await memory.curate(SCOPE, model=curator)
    return {
        "run": done.run_id,
        "thread": first.thread_id,
        "waiting": waiting.run_id,
    }


async def main(out: Path) -> None:
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'shots.db'}"
        async with Runtime.open(url, memory=NativeMemory()) as rt:
            agents = _agents()
            ids = await _sample_data(rt, agents)
            app = create_app(rt, agents={a.name: a for a in agents}, tokens={TOKEN: SCOPE})
            async with background_server(app) as base, async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                await page.goto(f"{base}/console/?token={TOKEN}")
                shots = {
                    "runs": "/console/runs",
                    "run": f"/console/runs/{ids['run']}",
                    "gates": "/console/gates",
                    "thread": f"/console/threads/{ids['thread']}",
                    "memory": "/console/memory?q=tea",
                    "agents": "/console/agents",
                }
                for name, path in shots.items():
                    await page.goto(base + path)
                    await page.screenshot(path=str(out / f"{name}.png"), full_page=True)
                    print(f"{out / name}.png")
                await browser.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/console"))
    target = parser.parse_args().out
    target.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(target))
