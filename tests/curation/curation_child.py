"""A process that runs one curation pass for the SIGKILL tests, and is killed during it.

Usage::

    python curation_child.py DB_PATH MODEL_SPEC

It opens a runtime with native memory on the SQLite file and runs ``rt.memory.curate`` for
acme/ana with the model spec (a fake server's); the parent kills it while the pass runs.
"""

from __future__ import annotations

import asyncio
import sys

from reverie import Runtime, Scope
from reverie.memory import NativeMemory

ANA = Scope(tenant="acme", user="ana")


async def main(db: str, spec: str) -> int:
    async with Runtime.open(f"sqlite:///{db}", memory=NativeMemory()) as rt:
        await rt.memory.curate(ANA, model=spec)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
