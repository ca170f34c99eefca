"""Helpers the curation tests share: owners, scripted users and scripted curators."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from reverie import Agent, Runtime
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.core.scope import Scope
from reverie.memory import NativeMemory
from reverie.memory.curation import PASS_OPENING
from reverie.store import MemoryPassRecord
from reverie.testing import ScriptedModel, call, reply

ANA = Scope(tenant="acme", user="ana")
BOB = Scope(tenant="acme", user="bob")

DUPLICATES = (
    "- Ana is vegetarian.\n"
    "- Ana lives in Lisbon.\n"
    "- Ana is vegetarian.\n"
    "- Ana prefers morning meetings.\n"
    "- Ana is a vegetarian.\n"
)
"""A duplicate-ridden standing document."""

TIDY = "- Ana is vegetarian.\n- Ana lives in Lisbon.\n- Ana prefers morning meetings.\n"
"""What a curation pass makes of :data:`DUPLICATES`."""


def user_agent(name: str = "assistant", text: str = "ok") -> Agent:
    """An agent whose (stateless) model always replies ``text``: reusable for many turns."""
    return Agent(name=name, model=ScriptedModel(lambda request: reply(text), name=name))


def is_pass(request: ModelRequest) -> bool:
    """Whether a request belongs to a curation pass (its opening message is the pass's)."""
    return any(m.role == "user" and m.content == PASS_OPENING for m in request.messages)


def tool_payloads(request: ModelRequest) -> list[Any]:
    """The tool results of a request, parsed where they are JSON (errors stay text)."""
    out: list[Any] = []
    for message in request.messages:
        if message.role != "tool":
            continue
        try:
            out.append(json.loads(message.content))
        except ValueError:
            out.append(message.content)
    return out


def tidy_curator(
    new_text: str = TIDY, *, writes: int = 1, write: dict[str, Any] | None = None
) -> Callable[[ModelRequest], ModelResponse]:
    """A curator script: read, then ``writes`` writes, then the report. Each write replaces the
    document with ``new_text`` and the version read, or sends ``write``'s arguments instead.
    Stateless (it reads the conversation), so one model serves many passes."""

    def answer(request: ModelRequest) -> ModelResponse:
        results = tool_payloads(request)
        if not results:
            return call("memory_read", path="MEMORY.md")
        read = results[0]
        if len(results) <= writes:
            arguments = write or {"content": new_text, "expected_version": read["version"]}
            return call("memory_write", target="MEMORY.md", **arguments)
        outcome = results[1]
        conflict = isinstance(outcome, dict) and outcome.get("status") == "conflict"
        return call(
            "structured_result",
            changed=not conflict,
            summary="merged duplicate entries" if not conflict else "MEMORY.md changed meanwhile",
            entries_merged=2,
            **({"conflicts": ["MEMORY.md changed while I worked"]} if conflict else {}),
        )

    return answer


def curator(new_text: str = TIDY, *, writes: int = 1) -> ScriptedModel:
    """A :class:`ScriptedModel` running :func:`tidy_curator`."""
    return ScriptedModel(tidy_curator(new_text, writes=writes), name="curator")


@contextlib.asynccontextmanager
async def curating(
    model: ScriptedModel, *, url: str = ":memory:", interval: int = 2
) -> AsyncIterator[Runtime]:
    """An open runtime with native memory, curation every ``interval`` turns and ``model``
    for the passes."""
    async with Runtime.open(
        url, memory=NativeMemory(), curation_interval_turns=interval, curation_model=model
    ) as rt:
        yield rt


async def turns(rt: Runtime, agent: Agent, scope: Scope, n: int) -> list[str]:
    """Run ``n`` completed turns (each a new conversation); their run ids."""
    ids: list[str] = []
    for i in range(n):
        result = await rt.run(agent, f"turn {i + 1}", scope=scope)
        assert result.status == "completed", result.exit
        ids.append(result.run_id)
    return ids


async def settled_passes(rt: Runtime, scope: Scope) -> list[MemoryPassRecord]:
    """Wait for the passes in flight, then every kept pass of ``scope``, oldest first."""
    await rt.memory.wait_for_passes()
    return list(reversed(await rt.memory.passes(scope)))
