"""``Runtime.attach``: watching a segment that approve/deny/resume launched (``reverie chat``)."""

from __future__ import annotations

import asyncio

from reverie import Agent, Runtime, Scope, tool
from reverie.core.events import RunEvent, TextDeltaEvent, ToolFinished
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")


@tool(effects={"write"}, needs_approval=True, idempotent=False)
async def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


async def test_attach_follows_the_segment_an_approval_continues() -> None:
    model = ScriptedModel([call("send_email", to="bob@x"), reply("mail sent")])
    agent = Agent(name="mailer", model=model, tools=[send_email])
    async with Runtime.open(":memory:") as rt:
        blocked = await rt.run(agent, "mail bob", scope=SCOPE)
        assert blocked.gate is not None
        assert rt.attach(blocked.run_id) is None  # nothing runs here now

        resolving = asyncio.ensure_future(rt.approve(blocked.gate.ref))
        handle = None
        while handle is None and not resolving.done():
            handle = rt.attach(blocked.run_id)
            await asyncio.sleep(0)
        assert handle is not None, "the continued segment was never seen"
        assert handle.run_id == blocked.run_id
        assert handle.thread_id == blocked.thread_id

        events: list[RunEvent] = [event async for event in handle.events()]
        result = await resolving

        assert result.status == "completed" and result.text == "mail sent"
        assert await handle.result() == result
        finished = [e for e in events if isinstance(e, ToolFinished)]
        assert [(e.tool, e.outcome) for e in finished] == [("send_email", "completed")]
        streamed = "".join(e.text for e in events if isinstance(e, TextDeltaEvent))
        assert streamed == "mail sent"
        assert events[-1].kind == "run_finished"
        assert rt.attach(blocked.run_id) is None  # the segment is over
