"""A model-based test: two runtimes on one store, driven through random interleavings.

Hypothesis picks a sequence of operations — start a run (on a new or an existing thread, with a
thread policy), steer, follow up, cancel, request a graceful stop, approve, deny, hold or release
the tools, let time pass, crash a runtime at its next store call and replace it with a fresh one
— and after every step the invariants are checked against the store and the model's requests:

- no accepted input is delivered twice, and a run that completed delivered every input it
  accepted;
- no non-idempotent side effect runs twice (crashes included);
- an approved call runs exactly once unless its run was cancelled;
- every request the model received, and every thread with no active run, is well formed (each
  assistant tool call has exactly one result);
- a thread has at most one active run;
- a run whose gate was pending when it was cancelled ends cancelled.

Examples are few by default (CI); set ``REVERIE_STATEFUL_EXAMPLES`` to run more.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from reverie import Agent, Limits, Runtime, Scope, tool
from reverie.capabilities import ToolContext
from reverie.core.messages import Message, ModelRequest, ModelResponse
from reverie.errors import (
    GateResolvedError,
    NotFoundError,
    ReverieError,
    RunBusy,
    RunEndedError,
    ThreadBusy,
    UsageError,
)
from reverie.store.base import ACTIVE_STATUSES, TERMINAL_STATUSES
from reverie.store.memory import MemoryStore
from reverie.store.sqlite import SQLiteStore
from reverie.testing import ScriptedModel, call, calls, reply

SCOPE = Scope(tenant="acme", user="ana")
EXAMPLES = int(os.environ.get("REVERIE_STATEFUL_EXAMPLES", "12"))
STEPS = int(os.environ.get("REVERIE_STATEFUL_STEPS", "25"))


class Crash(BaseException):
    """A dying worker: not an Exception, so nothing in the runtime turns it into a result."""


class CrashingStore:
    """The shared store as one runtime sees it; dies at its n-th call once armed."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.countdown: int | None = None
        self.dead = False

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target) or name in ("open", "close"):
            return target

        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            if self.dead:
                raise Crash(name)
            if self.countdown is not None:
                self.countdown -= 1
                if self.countdown <= 0:
                    self.countdown = None
                    self.dead = True
                    raise Crash(name)
            return await target(*args, **kwargs)

        return wrapped


def unanswered(messages: tuple[Message, ...] | list[Message]) -> list[str]:
    """Assistant tool-call ids without exactly one tool result right after their message."""
    bad: list[str] = []
    for i, m in enumerate(messages):
        if m.role != "assistant" or not m.tool_calls:
            continue
        ids: list[str | None] = []
        for later in messages[i + 1 :]:
            if later.role != "tool":
                break
            ids.append(later.tool_call_id)
        bad += [c.id for c in m.tool_calls if ids.count(c.id) != 1]
    return bad


class World:
    """Everything one example shares: the loop, the store, the effects the tools had."""

    def __init__(self, backend: str, tmp: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.backend = backend
        self.inner: Any = MemoryStore() if backend == "memory" else None
        self.db = tmp / f"stateful-{time.monotonic_ns()}.db"
        self.sent: Counter[tuple[str, str]] = Counter()
        self.deployed: Counter[tuple[str, str]] = Counter()
        self.requests: list[ModelRequest] = []
        self.tools_open = asyncio.Event()
        self.tools_open.set()
        self.agent = self._agent()

    def _agent(self) -> Agent:
        world = self

        @tool(effects={"write"}, idempotent=False)
        async def send(to: str, ctx: ToolContext) -> str:
            """Send a message (must never happen twice)."""
            world.sent[(ctx.run_id, ctx.call_id)] += 1
            await world.tools_open.wait()
            return f"sent to {to}"

        @tool(effects={"write"}, needs_approval=True, idempotent=False)
        async def deploy(ctx: ToolContext) -> str:
            """Deploy (needs approval)."""
            world.deployed[(ctx.run_id, ctx.call_id)] += 1
            return "deployed"

        @tool(effects={"read"}, idempotent=True)
        async def look(what: str) -> str:
            """Read something."""
            await world.tools_open.wait()
            return f"saw {what}"

        def script(request: ModelRequest) -> ModelResponse:
            world.requests.append(request)
            if request.tools is None:
                return reply("summary of what was done")
            users = [i for i, m in enumerate(request.messages) if m.role == "user"]
            if not users:
                return reply("hello")
            last_user = users[-1]
            after = request.messages[last_user + 1 :]
            text = request.messages[last_user].content
            if any(m.role == "tool" for m in after):
                return reply(f"done: {text}")
            if "work" in text:
                return calls(("send", {"to": text}), ("deploy", {}))
            if "look" in text:
                return calls(("look", {"what": "a"}), ("look", {"what": "b"}))
            if "send" in text:
                return call("send", to=text)
            return reply(f"answer: {text}")

        return Agent(
            name="agent",
            model=ScriptedModel(script),
            tools=[send, deploy, look],
            limits=Limits(max_iterations=12),
        )

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def new_inner(self) -> Any:
        return self.inner if self.backend == "memory" else SQLiteStore(self.db)


class Interleavings(RuleBasedStateMachine):
    """Two runtimes, one store, random operations; invariants after every step."""

    backend = "memory"
    tmp = Path(".")

    def __init__(self) -> None:
        super().__init__()
        self.w = World(self.backend, self.tmp)
        self.wrappers: list[CrashingStore] = []
        self.rts: list[Runtime] = []
        for _ in range(2):
            self._open_runtime()
        self.runs: list[str] = []
        self.threads: list[str] = []
        self.accepted: dict[str, str] = {}  # input id -> run id
        self.approved: dict[str, tuple[str, str]] = {}  # gate ref -> (run id, call key)
        self.cancelled_while_blocked: set[str] = set()
        self.cancel_requested: set[str] = set()

    # ------------------------------------------------------------------ runtimes
    def _open_runtime(self, index: int | None = None) -> None:
        wrapper = CrashingStore(self.w.new_inner())
        rt = Runtime(wrapper, agents=[self.w.agent], lease_ttl_s=5.0)
        self.w.run(rt.__aenter__())
        if index is None:
            self.wrappers.append(wrapper)
            self.rts.append(rt)
        else:
            self.wrappers[index], self.rts[index] = wrapper, rt

    def _replace_dead(self) -> None:
        for i, wrapper in enumerate(self.wrappers):
            if not wrapper.dead:
                continue
            old = self.rts[i]
            dead_owner = old._leases.owner
            if self.backend == "memory":
                old._opened = False  # the store is shared with the other runtime: leave it open
            self.w.run(_close_quietly(old))
            self._open_runtime(i)
            self.w.run(_expire_leases_of(self.rts[i], dead_owner))
            self.w.run(_recover(self.rts[i]))

    def _call(self, coro: Any) -> Any:
        """Run an operation; typed refusals are answers, a crash replaces the runtime."""
        try:
            return self.w.run(coro)
        except Crash:
            return None
        finally:
            self._replace_dead()

    def teardown(self) -> None:
        try:
            self.w.tools_open.set()
            self._settle_all()
            self.check_final()
        finally:
            for rt in self.rts:
                self.w.run(_close_quietly(rt))
            self.w.loop.close()

    # ------------------------------------------------------------------ rules
    @rule(
        rt=st.integers(0, 1),
        thread=st.integers(-1, 3),
        policy=st.sampled_from(["reject", "enqueue", "interrupt"]),
        kind=st.sampled_from(["work", "look", "send", "chat"]),
    )
    def start(self, rt: int, thread: int, policy: str, kind: str) -> None:
        thread_id = self.threads[thread] if 0 <= thread < len(self.threads) else None

        async def go() -> None:
            try:
                h = await self.rts[rt].start(
                    self.w.agent,
                    f"{kind} #{len(self.runs)}",
                    scope=SCOPE,
                    thread_id=thread_id,
                    thread_policy=policy,  # type: ignore[arg-type]
                )
            except (ThreadBusy, RunBusy):
                return
            if h.run_id not in self.runs:
                self.runs.append(h.run_id)
            if h.thread_id not in self.threads:
                self.threads.append(h.thread_id)
            await asyncio.sleep(0.01)

        self._call(go())

    def _pick(self, index: int) -> str:
        return self.runs[index % len(self.runs)]

    @precondition(lambda self: self.runs)
    @rule(
        rt=st.integers(0, 1),
        index=st.integers(0, 20),
        kind=st.sampled_from(["steering", "follow_up"]),
        what=st.sampled_from(["send", "look", "chat"]),
    )
    def send_input(self, rt: int, index: int, kind: str, what: str) -> None:
        run_id = self._pick(index)

        async def go() -> None:
            try:
                input_id = await self.rts[rt].send_input(run_id, kind, f"{what} input")  # type: ignore[arg-type]
            except (RunEndedError, UsageError):
                return
            self.accepted[input_id] = run_id

        self._call(go())

    @precondition(lambda self: self.runs)
    @rule(rt=st.integers(0, 1), index=st.integers(0, 20))
    def cancel(self, rt: int, index: int) -> None:
        run_id = self._pick(index)

        async def go() -> None:
            before = await self.rts[rt].store.get_run(run_id)
            if before.status in TERMINAL_STATUSES:
                return
            try:
                ended = await self.rts[rt].cancel(run_id)
            except (RunBusy, RunEndedError):
                return
            self.cancel_requested.add(run_id)
            if ended is not None:
                self.cancelled_while_blocked.add(run_id)

        self._call(go())

    @precondition(lambda self: self.runs)
    @rule(rt=st.integers(0, 1), index=st.integers(0, 20))
    def graceful_stop(self, rt: int, index: int) -> None:
        run_id = self._pick(index)

        async def go() -> None:
            try:
                await self.rts[rt].request_graceful_stop(run_id, "host")
            except (RunEndedError, RunBusy):
                return

        self._call(go())

    @rule(rt=st.integers(0, 1), approve=st.booleans(), index=st.integers(0, 20))
    def resolve_gate(self, rt: int, approve: bool, index: int) -> None:
        async def go() -> None:
            gates = await self.rts[rt].store.list_gates(scope=SCOPE, status="pending")
            if not gates:
                return
            gate = gates[index % len(gates)]
            task = asyncio.ensure_future(
                self.rts[rt].approve(gate.ref)
                if approve
                else self.rts[rt].deny(gate.ref, reason="no")
            )
            await asyncio.sleep(0)
            if approve:
                self.approved[gate.ref] = (gate.run_id, gate.call_id)
            with contextlib.suppress(TimeoutError, GateResolvedError, RunBusy, NotFoundError):
                await asyncio.wait_for(task, timeout=0.05)

        self._call(go())

    @rule(hold=st.booleans())
    def hold_tools(self, hold: bool) -> None:
        if hold:
            self.w.tools_open.clear()
        else:
            self.w.tools_open.set()

    @rule(rt=st.integers(0, 1), at=st.integers(1, 12))
    def crash(self, rt: int, at: int) -> None:
        self.wrappers[rt].countdown = at

    @rule(ms=st.sampled_from([1, 10, 50]))
    def let_time_pass(self, ms: int) -> None:
        self._call(asyncio.sleep(ms / 1000))

    # ------------------------------------------------------------------ invariants
    @invariant()
    def no_side_effect_twice(self) -> None:
        assert all(n == 1 for n in self.w.sent.values()), self.w.sent
        assert all(n == 1 for n in self.w.deployed.values()), self.w.deployed

    @invariant()
    def every_model_request_is_well_formed(self) -> None:
        for request in self.w.requests:
            assert unanswered(request.messages) == [], request.messages

    @invariant()
    def at_most_one_active_run_per_thread(self) -> None:
        async def check() -> None:
            store = self.rts[0].store
            runs = await store.list_runs(scope=SCOPE, limit=10_000)
            active = Counter(r.thread_id for r in runs if r.status in ACTIVE_STATUSES)
            assert all(n <= 1 for n in active.values()), active

        self._call(check())

    @invariant()
    def no_input_delivered_twice(self) -> None:
        async def check() -> None:
            store = self.rts[0].store
            for thread_id in self.threads:
                ids = [r.input_id for r in await store.thread_items(thread_id) if r.input_id]
                assert len(ids) == len(set(ids)), ids

        self._call(check())

    # ------------------------------------------------------------------ the end
    def _settle_all(self) -> None:
        """Release every tool, decide every gate, and let every run end or block."""
        for _ in range(60):
            self._replace_dead()

            async def step() -> bool:
                rt = self.rts[0]
                await _recover(rt)
                gates = await rt.store.list_gates(scope=SCOPE, status="pending")
                for gate in gates:
                    with contextlib.suppress(
                        TimeoutError, GateResolvedError, RunBusy, NotFoundError
                    ):
                        await asyncio.wait_for(rt.deny(gate.ref, reason="teardown"), timeout=2)
                await asyncio.sleep(0.02)
                runs = await rt.store.list_runs(scope=SCOPE, limit=10_000)
                return all(r.status in TERMINAL_STATUSES for r in runs)

            if self._call(step()):
                return
        runs = self.w.run(self.rts[0].store.list_runs(scope=SCOPE, limit=10_000))
        pytest.fail(f"runs did not settle: {[(r.run_id, r.status, r.lease_owner) for r in runs]}")

    def check_final(self) -> None:
        async def check() -> None:
            store = self.rts[0].store
            for run_id in self.runs:
                run = await store.get_run(run_id)
                # Nothing in this world can fail a run: a failure is a bug (e.g. driver_bug).
                assert run.status != "failed", (run_id, run.exit)
                if run_id in self.cancelled_while_blocked:
                    assert run.status == "cancelled", (run_id, run.status)
                if run_id in self.cancel_requested:
                    assert run.status in ("cancelled", "completed"), (run_id, run.status)
            for thread_id in self.threads:
                rows = await store.thread_items(thread_id)
                msgs = [
                    Message(
                        role=r.role,
                        content=r.content,
                        tool_calls=r.tool_calls,
                        tool_call_id=r.tool_call_id,
                    )
                    for r in rows
                ]
                assert unanswered(msgs) == [], (thread_id, msgs)
                delivered = {r.input_id for r in rows if r.input_id}
                for input_id, run_id in self.accepted.items():
                    run = await store.get_run(run_id)
                    if run.thread_id == thread_id and run.status == "completed":
                        assert input_id in delivered, (input_id, run_id)
            for ref, (run_id, key) in self.approved.items():
                run = await store.get_run(run_id)
                gate = await store.get_gate(ref)
                if run.status != "cancelled" and gate.status == "approved":
                    assert self.w.deployed[(run_id, key)] == 1, (ref, run.status)

        self._call(check())


async def _close_quietly(rt: Runtime) -> None:
    with contextlib.suppress(Crash, ReverieError):
        await rt.aclose()


async def _expire_leases_of(rt: Runtime, owner: str | None) -> None:
    """The dead runtime's leases run out (as they would, after their time to live)."""
    for run in await rt.store.list_runs(statuses=list(ACTIVE_STATUSES), limit=10_000):
        if owner is not None and run.lease_owner == owner:
            await rt.store.acquire_lease(
                run.run_id, "gone:0:0", ttl_s=0, now=time.time() - 1, force=True
            )


async def _recover(rt: Runtime) -> None:
    with contextlib.suppress(TimeoutError, ReverieError):
        await asyncio.wait_for(rt.recover(), timeout=0.2)


@pytest.mark.crash
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_two_runtimes_on_one_store_keep_every_invariant_under_random_interleavings(
    backend: str, tmp_path: Path
) -> None:
    machine: type[Interleavings] = type(
        f"Interleavings_{backend}", (Interleavings,), {"backend": backend, "tmp": tmp_path}
    )
    runner = machine.TestCase
    runner.settings = settings(
        max_examples=EXAMPLES,
        stateful_step_count=STEPS,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=os.environ.get("REVERIE_STATEFUL_SEED") is None,
    )
    runner().runTest()
