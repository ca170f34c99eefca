"""A process of the SIGKILL campaign: it recovers, then runs turns that write memory.

Usage::

    python campaign_child.py STORE_URL MODEL_SPEC LABEL TURNS

It opens a runtime with native memory and curation every 2 turns (passes on ``MODEL_SPEC``, a
fake server of the parent's), calls ``recover()`` for whatever an earlier, killed process left,
then runs ``TURNS`` turns for acme/ana whose model (the same server) appends one fact each —
``- fact LABEL-i`` — to MEMORY.md, waits for the passes and exits. The parent SIGKILLs it while
one of its model requests hangs.
"""

from __future__ import annotations

import asyncio
import sys

from reverie import Agent, Runtime, Scope
from reverie.memory import NativeMemory

ANA = Scope(tenant="acme", user="ana")


async def main(url: str, spec: str, label: str, turns: int) -> int:
    agent = Agent(name="assistant", model=spec)
    async with Runtime.open(
        url,
        memory=NativeMemory(),
        agents=[agent],
        curation_interval_turns=2,
        curation_model=spec,
    ) as rt:
        await rt.recover()
        for i in range(turns):
            await rt.run(agent, f"remember fact {label}-{i}", scope=ANA)
        await rt.memory.wait_for_passes()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))))
