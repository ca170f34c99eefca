"""Queue dispatch (docs/scaling.md): "advance run R" jobs on procrastinate, for ``reverie worker``.

A runtime opened with ``Runtime.open(url, dispatch="queue")`` creates runs in the store as usual
but, instead of advancing them in its own process, defers a job ``reverie.advance_run(run_id)``
on procrastinate, a PostgreSQL task queue kept in the same database as the store. Worker
processes (:func:`serve_jobs`, behind ``reverie worker``) take the jobs and call
``Runtime.resume(run_id)``.

Three job kinds, each its own procrastinate task:

- ``reverie.advance_run(run_id)`` (:data:`TASK_NAME`): start or continue a run;
- ``reverie.resume_after_gate(run_id)`` (:data:`RESUME_TASK`): continue a run whose gate was
  resolved;
- ``reverie.curation_pass(tenant, user)`` (:data:`PASS_TASK`): advance the owner's curation
  passes. A pass is never run inline where the turn that made it due finished: the worker that
  ran the turn enqueues this job (:func:`serve_jobs` hands its runtime a dispatcher for
  background work). Its lock and queueing lock are per owner (``reverie:curation:<tenant>:<user>``):
  one such job per owner waits at a time, and it takes every queued pass of the owner.

The run jobs carry the lock and the queueing lock ``reverie:run:<run_id>``: at most one job per
run waits in the queue, and jobs of one run never run at once. Should a job still be
delivered twice (a worker lost mid-job and its job retried), the run lease
(docs/durability.md) keeps the run single-writer: the second worker gets ``RunBusy`` and
treats the job as done.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import signal
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, Protocol

from reverie.core.events import RunFinished, event_from_dict
from reverie.core.scope import Scope
from reverie.errors import ConfigError, LeaseLost, MissingExtraError, RunBusy
from reverie.memory.curation import pass_prefix
from reverie.runtime.event_log import follow_events, last_seq, run_settled
from reverie.runtime.events import EventBus
from reverie.runtime.handle import RunHandle
from reverie.runtime.ports import Runner
from reverie.runtime.result import RunResult
from reverie.store.base import RunRecord
from reverie.store.run_events import RunEventLog

if TYPE_CHECKING:
    import procrastinate


log = logging.getLogger("reverie.dispatch")

__all__ = [
    "PASS_TASK",
    "QUEUE",
    "RECOVER_EVERY_S",
    "RESUME_TASK",
    "TASK_NAME",
    "QueueDispatcher",
    "ensure_queue_schema",
    "serve_jobs",
    "wait_settled",
    "watching_handle",
]

TASK_NAME: Final = "reverie.advance_run"
"""The procrastinate task of an "advance run R" job; its one argument is ``run_id``."""
RESUME_TASK: Final = "reverie.resume_after_gate"
"""The task of a "resume run R after its gate" job; its one argument is ``run_id``."""
PASS_TASK: Final = "reverie.curation_pass"
"""The task of a "curate owner O" job; its arguments are ``tenant`` and ``user``."""
QUEUE: Final = "reverie"
"""The procrastinate queue reverie's jobs go to (workers listen to it only)."""
RECOVER_EVERY_S: Final = 30.0
"""How often a worker calls ``Runtime.recover()`` (and once at start)."""
_SCHEMA_LOCK: Final = 0x7265766572696531  # "reverie1": serialises schema creation
_POLL_FIRST_S: Final = 0.02
_POLL_MAX_S: Final = 0.5
_SHUTDOWN_GRACE_S: Final = 5.0


def _require_postgres(url: str) -> None:
    if not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(
            "queue dispatch needs a PostgreSQL store (the job queue lives in the same "
            "database); got a non-PostgreSQL URL. Fix: use a postgresql://… store URL, or the "
            "local dispatcher"
        )


def _lock(run_id: str) -> str:
    return f"reverie:run:{run_id}"


def _owner_lock(tenant: str, user: str) -> str:
    return f"reverie:curation:{tenant}:{user}"


def is_pass(run: RunRecord) -> bool:
    """Whether ``run`` is a curation pass (its key is one of its owner's pass ids)."""
    return (run.idempotency_key or "").startswith(pass_prefix(run.scope))


_ADVANCING: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "reverie_advancing_job_run", default=None
)


def advanced_by_a_job(run_id: str) -> bool:
    """Whether this task is the job that advances ``run_id`` (so it runs here, not queued)."""
    return _ADVANCING.get() == run_id


class Routing:
    """Where a runtime's runs are advanced: here, or as jobs on a queue.

    ``queue`` is the queue of ``Runtime.open(..., dispatch="queue")`` (every run goes there).
    With local dispatch, a worker (:func:`serve_jobs`) still sends the background work its
    jobs make due — a curation pass — to its queue as a job of its own, while it serves.
    """

    def __init__(self, queue: QueueDispatcher | None = None) -> None:
        self.queue = queue
        self._background: QueueDispatcher | None = None

    def queue_for(self, run: RunRecord) -> QueueDispatcher | None:
        """The queue ``run`` goes to, or ``None`` to advance it in this process."""
        if self.queue is None and is_pass(run) and not advanced_by_a_job(run.run_id):
            return self._background  # a worker's pass is its own job, never inline
        return self.queue

    @contextlib.contextmanager
    def background_to(self, queue: QueueDispatcher) -> Iterator[None]:
        """Send background work (curation passes) to ``queue`` while the block runs."""
        self._background = queue
        try:
            yield
        finally:
            self._background = None


async def _advance_here(rt: Runner, run_id: str) -> RunResult:
    token = _ADVANCING.set(run_id)
    try:
        return await rt.resume(run_id)
    finally:
        _ADVANCING.reset(token)


def _app(url: str) -> procrastinate.App:
    try:
        import procrastinate
    except ImportError as exc:  # the tests simulate the extra's absence
        raise MissingExtraError("postgres", "queue dispatch (procrastinate)") from exc
    connector = procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=4)
    return procrastinate.App(connector=connector)


async def ensure_queue_schema(url: str) -> None:
    """Create procrastinate's tables in the store's database unless they exist.

    Idempotent and safe when many processes start at once: the check and the creation run in one
    transaction under a transaction-level advisory lock. The tables go to the first schema of the
    connection's ``search_path``, like the store's.
    """
    from procrastinate.schema import SchemaManager
    from psycopg import AsyncConnection

    from reverie.store import postgres_connections as pgc

    label, secrets = pgc.describe_url(url)
    with pgc.db_errors(f"create the job queue's tables on {label}", secrets):
        async with await AsyncConnection.connect(url) as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            cur = await conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL")
            row = await cur.fetchone()
            if row is None or not row[0]:
                await conn.execute(SchemaManager.get_schema())


async def wait_settled(rt: Runner, run_id: str) -> RunResult:
    """Poll the store (20 ms, doubling to 500 ms) until the run ends or blocks; its result."""
    delay = _POLL_FIRST_S
    while not await run_settled(rt.store, await rt.store.get_run(run_id)):
        await asyncio.sleep(delay)
        delay = min(delay * 2, _POLL_MAX_S)
    return await rt.get_result(run_id)


class QueueDispatcher:
    """Defers "advance run R" jobs on procrastinate in the store's PostgreSQL database."""

    def __init__(self, url: str) -> None:
        _require_postgres(url)
        self.url = url
        self._app: procrastinate.App | None = None

    async def open(self) -> None:
        """Create the queue's tables if missing and open the connection pool."""
        await ensure_queue_schema(self.url)
        app = _app(self.url)
        await app.open_async()
        self._app = app

    async def aclose(self) -> None:
        """Close the connection pool (jobs already deferred stay queued)."""
        if self._app is not None:
            app, self._app = self._app, None
            await app.close_async()

    async def enqueue(self, run_id: str, *, task: str = TASK_NAME) -> None:
        """Defer a job of ``task`` (advance, or resume after a gate) for ``run_id`` (a no-op
        when one is already waiting)."""
        await self._defer(task, _lock(run_id), run_id=run_id)

    async def enqueue_pass(self, owner: Scope) -> None:
        """Defer a job that advances the owner's queued passes (a no-op when one is waiting:
        it takes every pass queued by the time it runs)."""
        lock = _owner_lock(owner.tenant, owner.user)
        await self._defer(PASS_TASK, lock, tenant=owner.tenant, user=owner.user)

    async def _defer(self, task: str, lock: str, **arguments: str) -> None:
        from procrastinate.exceptions import AlreadyEnqueued

        if self._app is None:
            raise RuntimeError("the queue dispatcher is not open")
        deferrer = self._app.configure_task(task, queue=QUEUE, lock=lock, queueing_lock=lock)
        with contextlib.suppress(AlreadyEnqueued):
            await deferrer.defer_async(**arguments)

    async def dispatch(
        self,
        rt: Runner,
        run: RunRecord,
        spawn: Callable[[Any], asyncio.Task[None]],
        *,
        resumed: bool = False,
    ) -> RunHandle:
        """Enqueue the run's job — a curation pass's owner job, a blocked run's "resume after
        gate" job, else "advance run" — and return a handle whose result and events come from
        the store (every event the worker records, with a run event log; else the final
        ``run_finished``)."""
        log_ = rt.store if isinstance(rt.store, RunEventLog) else None
        start = await last_seq(log_, run.run_id) if log_ is not None else 0
        if is_pass(run):
            await self.enqueue_pass(run.scope)
        elif resumed and run.status == "blocked":
            await self.enqueue(run.run_id, task=RESUME_TASK)
        else:
            await self.enqueue(run.run_id)
        return watching_handle(rt, run, spawn, start=start)


def watching_handle(
    rt: Runner, run: RunRecord, spawn: Callable[[Any], asyncio.Task[None]], *, start: int = 0
) -> RunHandle:
    """A handle on a run another process advances: its result and events come from the store.

    With a run event log (every built-in store), every event the worker records after event
    ``start`` is replayed live; otherwise only the final ``run_finished``.
    """
    log_ = rt.store if isinstance(rt.store, RunEventLog) else None
    done: asyncio.Future[RunResult] = asyncio.get_running_loop().create_future()
    bus = EventBus()

    async def follow() -> None:
        try:
            if log_ is not None:
                async for _, data in follow_events(rt.store, run.run_id, after_seq=start):
                    event = event_from_dict(data)
                    if event is not None:
                        bus.emit(event)
                result = await wait_settled(rt, run.run_id)
            else:
                result = await wait_settled(rt, run.run_id)
                record = await rt.store.get_run(run.run_id)
                bus.emit(
                    RunFinished(
                        run_id=run.run_id, status=record.status, exit=dict(record.exit or {})
                    )
                )
            done.set_result(result)
        except asyncio.CancelledError:
            done.cancel()
            raise
        except Exception as exc:
            done.set_exception(exc)
        finally:
            bus.close()

    spawn(follow())
    return RunHandle(rt, run.run_id, run.thread_id, bus, done)


class QueueWorker(Runner, Protocol):
    """The runtime a worker advances jobs with: a :class:`Runner` whose background work (a
    curation pass a turn makes due) goes to the worker's queue while :func:`serve_jobs` runs."""

    @property
    def routing(self) -> Routing:
        """Where the runtime advances its runs."""
        ...


async def serve_jobs(
    rt: QueueWorker,
    url: str,
    *,
    concurrency: int = 4,
    recover_every_s: float = RECOVER_EVERY_S,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Run a procrastinate worker that advances runs with ``rt`` until SIGTERM or SIGINT.

    ``rt`` (local dispatch, open, with the agents registered) resumes each job's run; a run
    another worker holds (``RunBusy``/``LeaseLost``) counts as done. Background work ``rt``
    starts itself — a curation pass a turn made due — goes to the queue as its own job.
    ``rt.recover()`` runs at start and every ``recover_every_s`` seconds, for runs whose worker
    died.
    """
    from procrastinate.worker import Worker

    _require_postgres(url)
    await ensure_queue_schema(url)
    app = _app(url)
    background = QueueDispatcher(url)

    async def advance(run_id: str) -> None:
        try:
            result = await _advance_here(rt, run_id)
        except (RunBusy, LeaseLost):
            log.info("run %s: another worker has it", run_id)
            return
        except Exception as exc:
            log.warning("job: run %s raised %s (the job is retried)", run_id, type(exc).__name__)
            raise
        log.info("job: run %s is %s", run_id, result.status)

    @app.task(name=TASK_NAME, queue=QUEUE, retry=3)
    async def advance_run(run_id: str) -> None:
        log.info("job: advance run %s", run_id)
        await advance(run_id)

    @app.task(name=RESUME_TASK, queue=QUEUE, retry=3)
    async def resume_after_gate(run_id: str) -> None:
        log.info("job: resume run %s after its gate", run_id)
        await advance(run_id)

    @app.task(name=PASS_TASK, queue=QUEUE, retry=3)
    async def curation_pass(tenant: str, user: str) -> None:
        owner = Scope(tenant=tenant, user=user)
        runs = await rt.store.list_runs(scope=owner, statuses=["queued", "running"], limit=100)
        for run in reversed(runs):  # oldest first
            if is_pass(run):
                log.info("job: curation pass run %s of %s/%s", run.run_id, tenant, user)
                await advance(run.run_id)

    async def recover_forever() -> None:
        while True:
            try:
                await rt.recover()
            except Exception:
                log.exception("recover failed; retrying in %s s", recover_every_s)
            await asyncio.sleep(recover_every_s)

    await background.open()
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(background.aclose)
        stack.enter_context(rt.routing.background_to(background))
        await stack.enter_async_context(app.open_async())
        worker = Worker(
            app=app,
            queues=[QUEUE],
            concurrency=concurrency,
            install_signal_handlers=False,
            delete_jobs="successful",
            fetch_job_polling_interval=1.0,
            shutdown_graceful_timeout=_SHUTDOWN_GRACE_S,
        )
        loop = asyncio.get_running_loop()
        recovery = loop.create_task(recover_forever())

        def stop() -> None:
            recovery.cancel()
            worker.stop()  # type: ignore[no-untyped-call]

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        try:
            if on_ready is not None:
                on_ready()
            await worker.run()  # type: ignore[no-untyped-call]
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            recovery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await recovery
