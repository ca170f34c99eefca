"""Run leases: who may advance a run, and when a dead worker's run may be taken over."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator

from reverie.store.base import Store

LEASE_TTL_S = 30.0
"""A worker renews its lease every third of this; a dead worker's runs are free after it."""


def new_owner() -> str:
    """``host:pid:nonce``: unique per runtime instance, so two runtimes never share a lease."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(6).hex()}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_gone(owner: str | None) -> bool:
    """Whether a lease owner is a process of this host that no longer exists."""
    if not owner:
        return True
    host, _, rest = owner.partition(":")
    pid_text = rest.split(":", 1)[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    return pid != os.getpid() and not pid_alive(pid)


@contextlib.asynccontextmanager
async def heartbeat(store: Store, run_id: str, fence: int, *, ttl_s: float) -> AsyncIterator[None]:
    """Renew the run's lease every third of its lifetime while the body runs."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(ttl_s / 3)
            await store.renew_lease(run_id, fence, ttl_s=ttl_s, now=time.time())

    task = asyncio.get_running_loop().create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
