"""Run leases: who may advance a run, and when a dead worker's run may be taken over."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from reverie.core.transcript import NewItem
from reverie.errors import LeaseLost, RunBusy
from reverie.store.base import RunRecord, SegmentStart, SegmentStarts, Store

T = TypeVar("T")

LEASE_TTL_S = 30.0
"""A worker renews its lease every third of this; a dead worker's runs are free after it."""


def new_owner() -> str:
    """``host:pid:nonce``: unique per runtime instance, so two runtimes never share a lease."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(6).hex()}"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host is alive: it exists and is not a zombie.

    A worker that exited but was not yet reaped by its parent (a zombie) still answers
    ``kill(pid, 0)``; it advances nothing, so its runs are free to take over.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _proc_state(pid) not in ("Z", "X")


def _proc_state(pid: int) -> str | None:
    """The ``State:`` letter of ``/proc/<pid>/status`` (``None`` without procfs)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("State:"):
                    return line.split()[1] if len(line.split()) > 1 else None
    except FileNotFoundError:
        # procfs present but the process is gone by now; without procfs, trust kill(pid, 0).
        return "X" if os.path.isdir("/proc/self") else None
    except OSError:
        return None
    return None


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


class Renewer:
    """Renews the leases of every segment one runtime advances, together.

    A lease is renewed at most :attr:`every` (a third of its lifetime, as a heartbeat task per
    segment did) after it was taken or last renewed: a timer wakes every half of that while a
    lease is held, and a task renews, together, every lease at least that half old (on SQLite
    one group commit). A renewal refused with ``LeaseLost`` stops renewing that lease (the
    segment's next fenced write fails); another failure is tried again at the next wake. A
    segment shorter than a wake costs a timer, never a task.
    """

    def __init__(self, store: Store, *, ttl_s: float) -> None:
        self._store = store
        self.ttl_s = ttl_s
        self.every = ttl_s / 3
        """The longest a lease goes without a renewal."""
        self._held: dict[tuple[str, int], float] = {}
        """(run id, fence) → when it was last taken or renewed (the loop's clock)."""
        self._timer: asyncio.TimerHandle | None = None
        """The next wake, while a lease is held and no renewal runs."""
        self._task: asyncio.Task[None] | None = None
        """The renewal running now, if any (it sets the next wake when it ends)."""

    def hold(self, run_id: str, fence: int) -> None:
        """Renew the lease ``fence`` of ``run_id`` until :meth:`let_go`.

        (Two plain calls, not a context manager: no generator and no coroutine per segment.)
        """
        loop = asyncio.get_running_loop()
        self._held[(run_id, fence)] = loop.time()
        if self._timer is None and self._task is None:
            self._timer = loop.call_later(self.every / 2, self._wake)

    def let_go(self, run_id: str, fence: int) -> None:
        """Stop renewing the lease ``fence`` of ``run_id``."""
        self._held.pop((run_id, fence), None)
        if self._held:
            return
        # Nothing left to renew: no wake is left pending, and a renewal running stops now.
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()

    def _wake(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        due = [key for key, since in self._held.items() if now - since >= self.every / 2]
        if due:
            self._task = loop.create_task(self._renew(due, now))
        elif self._held:
            self._timer = loop.call_later(self.every / 2, self._wake)

    async def _renew(self, due: list[tuple[str, int]], now: float) -> None:
        try:
            outcomes = await asyncio.gather(
                *(
                    self._store.renew_lease(run_id, fence, ttl_s=self.ttl_s, now=time.time())
                    for run_id, fence in due
                ),
                return_exceptions=True,
            )
            for key, outcome in zip(due, outcomes, strict=True):
                if key not in self._held:
                    continue  # released meanwhile
                if isinstance(outcome, LeaseLost):
                    del self._held[key]  # taken over: renewing it again cannot succeed
                elif not isinstance(outcome, BaseException):
                    self._held[key] = now
        finally:
            if self._task is asyncio.current_task():
                self._task = None
                if self._held:
                    self._timer = asyncio.get_running_loop().call_later(self.every / 2, self._wake)


def lease_live(run: RunRecord, now: float | None = None) -> bool:
    """Whether ``run``'s lease is unexpired and its owner is not a dead process of this host."""
    now = time.time() if now is None else now
    expires = run.lease_expires_at
    return bool(expires and expires > now) and not owner_gone(run.lease_owner)


class Leases:
    """One runtime's leases: taking a run (over a dead owner's lease), renewing, releasing.

    ``owner`` is set when the runtime opens; until then each take uses a fresh owner.
    """

    def __init__(self, store: Store, *, ttl_s: float) -> None:
        self._store = store
        self.ttl_s = ttl_s
        self.owner: str | None = None
        self._renewer = Renewer(store, ttl_s=ttl_s)

    def held_elsewhere(self, run: RunRecord, now: float | None = None) -> bool:
        """Whether a live worker other than this runtime holds ``run``'s lease."""
        return lease_live(run, now) and run.lease_owner != self.owner

    async def take(self, run: RunRecord) -> int:
        """Lease ``run`` for this runtime (taking over a dead owner's lease); its fence.

        Raises:
            RunBusy: A live worker holds it.
        """

        def acquire(owner: str, take_over: str | None) -> Awaitable[int]:
            return self._store.acquire_lease(
                run.run_id, owner, ttl_s=self.ttl_s, now=time.time(), take_over=take_over
            )

        return await self._taking_over(run, acquire)

    def _claim(self, run: RunRecord) -> tuple[str, str | None]:
        """Who takes ``run``'s lease, and the dead owner it may be taken over from."""
        return self.owner or new_owner(), run.lease_owner if owner_gone(run.lease_owner) else None

    async def begin(self, run: RunRecord, *, window: int) -> SegmentStart:
        """Lease ``run`` as :meth:`take` does and begin its segment (``Store.begin_segment``).

        Raises:
            RunBusy: A live worker holds it.
        """

        def begin(owner: str, take_over: str | None) -> Awaitable[SegmentStart]:
            return self._store.begin_segment(
                run.run_id,
                owner,
                ttl_s=self.ttl_s,
                now=time.time(),
                take_over=take_over,
                window=window,
            )

        return await self._taking_over(run, begin)

    def start(
        self,
        store: SegmentStarts,
        run: RunRecord,
        items: Sequence[NewItem],
        *,
        create_thread: bool,
        window: int,
    ) -> Awaitable[SegmentStart]:
        """Start ``run`` leased for this runtime and begin its segment: one transaction
        (``SegmentStarts.start_segment``; a new run has no owner to take over from).

        The store's own awaitable (no coroutine of this one's around it, at every run start).
        """
        return store.start_segment(
            run,
            items,
            owner=self.owner or new_owner(),
            ttl_s=self.ttl_s,
            now=time.time(),
            create_thread=create_thread,
            window=window,
        )

    async def _taking_over(
        self, run: RunRecord, lease: Callable[[str, str | None], Awaitable[T]]
    ) -> T:
        """``lease(owner, take_over)``, the dead owner judged from ``run`` as the caller read it.

        A worker that took the lease after that read and died since makes the store answer
        :class:`RunBusy`: the run is read again, and a lease whose owner is gone now is taken
        over at once (not once it expires).
        """
        owner, take_over = self._claim(run)
        try:
            return await lease(owner, take_over)
        except RunBusy:
            holder = (await self._store.get_run(run.run_id)).lease_owner
            if holder is None or holder == take_over or not owner_gone(holder):
                raise
            return await lease(owner, holder)

    def renew(self, run_id: str, fence: int) -> None:
        """Renew the lease from now until :meth:`stop_renewing` (see :class:`Renewer`)."""
        self._renewer.hold(run_id, fence)

    def stop_renewing(self, run_id: str, fence: int) -> None:
        """Stop renewing the lease (the caller does, in a ``finally``)."""
        self._renewer.let_go(run_id, fence)

    async def release(self, run_id: str, fence: int) -> None:
        """Give the lease up."""
        await self._store.release_lease(run_id, fence)
