"""What the docs quote from the program is what the program does: messages, exit codes."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx

from reverie import Agent, Runtime, Scope
from reverie.cli.common import ExitCode
from reverie.serve import create_app
from reverie.testing import ScriptedModel

DOCS = Path(__file__).resolve().parent.parent.parent / "docs"


def test_http_md_quotes_the_401_bodies_the_server_sends() -> None:
    async def bodies() -> list[str]:
        agent = Agent(name="assistant", model=ScriptedModel([]))
        async with Runtime.open(":memory:") as rt:
            app = create_app(rt, agents={"assistant": agent}, tokens={"tok-1": Scope.local("a")})
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                missing = await client.get("/v1/models")
                unknown = await client.get("/v1/models", headers={"authorization": "Bearer nope"})
        assert missing.status_code == unknown.status_code == 401
        return [json.dumps(missing.json()), json.dumps(unknown.json())]

    text = (DOCS / "http.md").read_text(encoding="utf-8")
    for body in asyncio.run(bodies()):
        assert body in text


def test_the_docs_name_exit_code_75_for_a_busy_thread() -> None:
    assert int(ExitCode.THREAD_BUSY) == 75
    durability = (DOCS / "durability.md").read_text(encoding="utf-8")
    assert "`reverie run` exits 75" in durability
    for page in sorted(DOCS.rglob("*.md")):
        # Exit code 6 was never one of reverie's (ExitCode lists them all).
        assert not re.search(r"\bexits? 6\b", page.read_text(encoding="utf-8")), page
