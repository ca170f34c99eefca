"""A worker process for the crash tests: it starts, resumes or approves one run, then reports.

Usage::

    python crash_child.py DB_PATH SCENARIO MARKER_DIR start
    python crash_child.py DB_PATH SCENARIO MARKER_DIR resume RUN_ID [WORKER]
    python crash_child.py DB_PATH SCENARIO MARKER_DIR approve GATE_REF
    python crash_child.py DB_PATH SCENARIO MARKER_DIR approve_edit GATE_REF ARGUMENTS_JSON

Every process builds the same agent for a scenario. Its model is a ``ScriptedModel`` over a
*function* of the request's messages, so whichever process asks gives the right next answer.

Marker files (in MARKER_DIR) let the parent follow what happened across processes:

- ``<tool>.count``: one line per execution of the tool (in any process);
- ``<tool>-<step>.started``: the tool's execution for ``step`` has begun (its journal row is
  committed by then: the port writes ``started`` before it calls the tool);
- ``release-<step>``: created by the parent to let a blocked ``work`` call of the start process
  return;
- ``model.jsonl``: one JSON line per model request (role of the process, messages);
- ``primary.jsonl`` (``fallback``): one line per request to the primary model, which is always
  ``unavailable`` (the fallback answers from ``model.jsonl``'s script);
- ``hook-<iteration>.reached``: the ``before_prompt`` hook of that iteration is running;
- ``capability-hook.reached`` (``gate_edit``, approve_edit): the ``before_capability`` hook of
  the approved call is running (the approval and its edit are stored); it blocks until killed;
- ``pay.amounts``: one line per execution of ``pay``, the amount it paid;
- ``run.json`` (start): the run and thread ids; ``blocked.json`` (start): the gate of a run
  that blocked;
- ``ready-<worker>`` (resume): the worker is up; it resumes once ``go`` exists;
- ``terminal.reached`` (start, ``typed``): the run is about to write its terminal status (its
  Final checkpoint is committed); the start process then blocks until killed.

In the ``start`` role, tools block (so the parent can SIGKILL the process at a chosen point);
in the other roles they return at once. ``resume`` and ``approve`` print one JSON line: the
result, or the ``ReverieError`` they raised.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from reverie import Agent, Runtime, Scope, tool
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.errors import ReverieError
from reverie.hooks import CapabilityHookContext, PromptHookContext
from reverie.runtime.output import output_json
from reverie.testing import ScriptedModel, call, error, reply

SCOPE = Scope(tenant="acme", user="ana")
FIRST_CALL: dict[str, tuple[str, dict[str, Any]]] = {
    "non_idempotent": ("send", {"to": "bob"}),
    "race": ("send", {"to": "bob"}),
    "idempotent": ("fetch", {"url": "https://example.test/a"}),
    "gate": ("pay", {"amount": 5}),
    "gate_edit": ("pay", {"amount": 500}),
    "steer_before": ("work", {"step": 1}),
    "steer_after": ("work", {"step": 1}),
    "typed": ("structured_result", {"verdict": "approve", "score": 7}),
    "fallback": ("fetch", {"url": "https://example.test/a"}),
}
"""The model's first answer in each scenario (a single tool call)."""
POLL_S = 0.01


class CrashVerdict(BaseModel):
    """The output type of the ``typed`` scenario."""

    verdict: str
    score: int


def append_line(path: Path, text: str) -> None:
    """Append one line; a single small ``write`` on an O_APPEND file is atomic."""
    with path.open("a", encoding="utf-8") as f:
        f.write(text + "\n")


def count_lines(path: Path) -> int:
    """How many lines ``append_line`` wrote to ``path`` (0 if it does not exist)."""
    if not path.exists():
        return 0
    return len(path.read_text(encoding="utf-8").splitlines())


def exists(path: Path) -> bool:
    return path.exists()


async def block_until(path: Path | None) -> None:
    """Wait for ``path`` to exist (another process creates it); ``None``: until killed."""
    if path is None:
        await asyncio.Event().wait()  # never set
        return
    while True:
        if exists(path):
            return
        await asyncio.sleep(POLL_S)


class Scenario:
    """The agent (model, tools, hooks) of one scenario, as seen by one process."""

    def __init__(self, name: str, markers: Path, role: str) -> None:
        if name not in FIRST_CALL:
            raise SystemExit(f"unknown scenario {name!r}; expected one of {sorted(FIRST_CALL)}")
        self.name = name
        self.markers = markers
        self.role = role
        self.blocking = role == "start"
        model: Any = ScriptedModel(self.answer, name=name)
        if name == "fallback":
            model = [ScriptedModel(self.unavailable, name="primary"), model]
        self.agent = Agent(
            name=f"crash-{name}",
            model=model,
            instructions="You are a crash-test agent.",
            tools=[self._send(), self._fetch(), self._work(), self._pay()],
            output_type=CrashVerdict if name == "typed" else None,
        )

    # ---------------------------------------------------------------------------- tools
    async def _execute(self, name: str, step: int, release: Path | None) -> None:
        append_line(self.markers / f"{name}.count", f"{os.getpid()} step={step}")
        (self.markers / f"{name}-{step}.started").touch()
        if self.blocking:
            await block_until(release)

    def _send(self) -> Any:
        @tool(effects={"write"}, idempotent=False, timeout_s=None)
        async def send(to: str) -> str:
            """Send a message (not safe to repeat)."""
            await self._execute("send", 1, None)
            return f"sent to {to}"

        return send

    def _fetch(self) -> Any:
        @tool(effects={"read"}, idempotent=True, timeout_s=None)
        async def fetch(url: str) -> str:
            """Fetch a page (safe to repeat)."""
            await self._execute("fetch", 1, None)
            return f"content of {url}"

        return fetch

    def _work(self) -> Any:
        @tool(effects={"read"}, idempotent=True, timeout_s=None)
        async def work(step: int) -> str:
            """Do one step of work; the start process blocks until the parent releases it."""
            await self._execute("work", step, self.markers / f"release-{step}")
            return f"result of step {step}"

        return work

    def _pay(self) -> Any:
        @tool(effects={"write"}, needs_approval=True, idempotent=False, timeout_s=None)
        async def pay(amount: int) -> str:
            """Pay an amount (needs a person's approval)."""
            append_line(self.markers / "pay.amounts", str(amount))
            await self._execute("pay", 1, None)
            return f"paid {amount}"

        return pay

    # ---------------------------------------------------------------------------- model
    def unavailable(self, request: ModelRequest) -> ModelResponse:
        """The ``fallback`` scenario's primary model: always down."""
        append_line(self.markers / "primary.jsonl", json.dumps({"role": self.role}))
        raise error("unavailable", "the primary is down")

    async def answer(self, request: ModelRequest) -> ModelResponse:
        """The next answer, decided only from the request's messages."""
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        append_line(
            self.markers / "model.jsonl",
            json.dumps({"pid": os.getpid(), "role": self.role, "messages": messages}),
        )
        results = [m.content for m in request.messages if m.role == "tool"]
        if not results:
            name, arguments = FIRST_CALL[self.name]
            return call(name, **arguments)
        if self.name == "steer_after" and len(results) == 1:
            return call("work", step=2)
        if self.name == "race" and self.role == "resume":
            await asyncio.sleep(1.0)  # the winner holds the lease while the other one tries
        return reply(f"done: {results[-1]}")

    # ---------------------------------------------------------------------------- hooks
    def register_hooks(self, rt: Runtime) -> None:
        """``steer_before``: the start process stops between draining and checkpointing.
        ``typed``: it stops just before the terminal status write."""
        if self.name == "typed" and self.blocking:
            self._stop_before_terminal(rt)
        if self.name == "gate_edit" and self.role == "approve_edit":
            self._stop_before_the_approved_call(rt)
        if self.name != "steer_before" or not self.blocking:
            return

        async def hold(ctx: PromptHookContext) -> None:
            # Runs inside prompt building: after the steering was drained into the
            # transcript, before the BeforeModel checkpoint that records the new cursor.
            if ctx.iteration >= 1:
                (self.markers / f"hook-{ctx.iteration}.reached").touch()
                await block_until(None)

        rt.hooks.register("before_prompt", hold, name="crash-hold", timeout_s=3600)

    def _stop_before_the_approved_call(self, rt: Runtime) -> None:
        # Runs after the approval (and its edit) was stored, before the call runs.
        async def hold(ctx: CapabilityHookContext) -> None:
            (self.markers / "capability-hook.reached").touch()
            await block_until(None)

        rt.hooks.register("before_capability", hold, name="crash-hold-call", timeout_s=3600)

    def _stop_before_terminal(self, rt: Runtime) -> None:
        # A segment writes its terminal status with end_segment; other paths set_run_status.
        store = rt.store
        for name in ("set_run_status", "end_segment"):
            write = getattr(store, name)

            async def held(run_id: str, status: Any, *, _write: Any = write, **kwargs: Any) -> Any:
                if status in ("completed", "failed", "cancelled"):
                    (self.markers / "terminal.reached").touch()
                    await block_until(None)
                return await _write(run_id, status, **kwargs)

            setattr(store, name, held)


def result_json(r: Any) -> dict[str, Any]:
    """The parts of a ``RunResult`` the parent asserts on."""
    return {
        "status": r.status,
        "text": r.text,
        "exit_kind": getattr(r.exit, "kind", None),
        "run_id": r.run_id,
        "thread_id": r.thread_id,
        "gate": None if r.gate is None else r.gate.ref,
        "output": output_json(r.output),
        "output_type": None if r.output is None else type(r.output).__name__,
    }


async def main(argv: list[str]) -> int:
    db, scenario_name, marker_dir, role, *rest = argv
    markers = Path(marker_dir)
    scenario = Scenario(scenario_name, markers, role)
    async with Runtime.open(f"sqlite:///{db}", agents=[scenario.agent]) as rt:
        scenario.register_hooks(rt)
        if role == "start":
            h = await rt.start(scenario.agent, f"please run {scenario_name}", scope=SCOPE)
            (markers / "run.json").write_text(
                json.dumps({"run_id": h.run_id, "thread_id": h.thread_id}), encoding="utf-8"
            )
            r = await h.result()
            (markers / "blocked.json").write_text(json.dumps(result_json(r)), encoding="utf-8")
            await block_until(None)  # sit idle until killed
            return 0
        try:
            if role == "resume":
                run_id, *worker = rest
                if worker:
                    (markers / f"ready-{worker[0]}").touch()
                    await block_until(markers / "go")
                r = await rt.resume(run_id)
            elif role == "approve":
                r = await rt.approve(rest[0])
            elif role == "approve_edit":
                r = await rt.approve(rest[0], arguments=json.loads(rest[1]), by="carol")
            else:
                raise SystemExit(f"unknown role {role!r}")
        except ReverieError as exc:
            print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
            return 0
        print(json.dumps(result_json(r)), flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
