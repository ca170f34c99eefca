"""A worker process for the subagent crash tests: it starts or recovers a lead/researcher pair.

Usage::

    python subagent_crash_child.py DB_PATH SCENARIO MARKER_DIR start
    python subagent_crash_child.py DB_PATH SCENARIO MARKER_DIR recover

The lead agent calls the ``research`` tool (the researcher agent as a tool); the researcher
calls ``send`` (not safe to repeat), then answers. Models are functions of the request's
messages, so whichever process asks gives the right next answer.

In the ``start`` role the process stops (blocks until SIGKILLed) at the scenario's point:

- ``child_midway``: the researcher's second model request (its ``send`` has finished), so the
  child run is ``running`` with a finished journal row;
- ``child_done``: the lead's ``after_capability`` hook for ``research``, so the child run is
  ``completed`` and the lead's journal row says so, but the lead has no result row yet.

Markers (in MARKER_DIR): ``send.count`` (one line per execution of ``send``, any process),
``stopped`` (the start process reached its stop point), ``run.json`` (the lead's run id).
``recover`` opens a runtime with only the lead registered, calls ``recover()`` and prints one
JSON line: the results and every run in the store.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.hooks import CapabilityResultContext
from reverie.testing import ScriptedModel, call, reply

SCOPE = Scope(tenant="acme", user="ana")
SCENARIOS = ("child_midway", "child_done")


async def stop_here(markers: Path) -> None:
    """Mark the stop point and wait to be killed."""
    (markers / "stopped").touch()
    await asyncio.Event().wait()


def results_of(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "tool"]


def agents(scenario: str, markers: Path, role: str) -> Agent:
    """The lead agent (the researcher is inside its tool)."""
    stopping = role == "start"

    @tool(effects={"write"}, idempotent=False, timeout_s=None)
    def send(to: str) -> str:
        """Send a message (not safe to repeat)."""
        with (markers / "send.count").open("a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
        return f"sent to {to}"

    async def researcher_answer(request: ModelRequest) -> ModelResponse:
        results = results_of(request)
        if not results:
            return call("send", to="bob")
        if stopping and scenario == "child_midway":
            await stop_here(markers)
        return reply(f"child done: {results[-1]}")

    def lead_answer(request: ModelRequest) -> ModelResponse:
        results = results_of(request)
        if not results:
            return call("research", input="send a message to bob")
        return reply(f"lead done: {results[-1]}")

    researcher = Agent(
        name="researcher", model=ScriptedModel(researcher_answer, name="researcher"), tools=[send]
    )
    return Agent(
        name="lead",
        model=ScriptedModel(lead_answer, name="lead"),
        tools=[researcher.as_tool(name="research", description="Ask the researcher.")],
    )


async def main(argv: list[str]) -> int:
    db, scenario, marker_dir, role = argv
    if scenario not in SCENARIOS:
        raise SystemExit(f"unknown scenario {scenario!r}; expected one of {SCENARIOS}")
    markers = Path(marker_dir)
    lead = agents(scenario, markers, role)
    async with Runtime.open(f"sqlite:///{db}", agents=[lead]) as rt:
        if role == "start":
            if scenario == "child_done":

                async def hold(ctx: CapabilityResultContext) -> None:
                    if ctx.tool == "research":
                        await stop_here(markers)

                rt.hooks.register("after_capability", hold, name="crash-hold", timeout_s=3600)
            h = await rt.start(lead, "please delegate", scope=SCOPE)
            (markers / "run.json").write_text(json.dumps({"run_id": h.run_id}), encoding="utf-8")
            await h.result()
            await asyncio.Event().wait()  # never reached before the kill
            return 0
        if role != "recover":
            raise SystemExit(f"unknown role {role!r}")
        results = await rt.recover()
        runs = await rt.store.list_runs(limit=100)
        report: dict[str, Any] = {
            "results": [
                {
                    "run_id": r.run_id,
                    "status": r.status,
                    "text": r.text,
                    "model_calls": r.usage.model_calls,
                    "capability_calls": r.usage.capability_calls,
                }
                for r in results
            ],
            "runs": [
                {
                    "run_id": r.run_id,
                    "agent": r.agent_name,
                    "status": r.status,
                    "parent": r.meta.get("parent_run_id"),
                }
                for r in runs
            ],
        }
        print(json.dumps(report), flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
