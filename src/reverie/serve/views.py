"""JSON views of runs, gates and run events (what the HTTP API returns)."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from reverie.core.events import RunEvent, RunFinished
from reverie.core.exits import exit_to_dict
from reverie.core.timestamps import iso_utc
from reverie.runtime.output import output_json
from reverie.runtime.result import Gate
from reverie.runtime.unbound import SERVED_AGENT_META
from reverie.store.base import TERMINAL_STATUSES, GateRecord, RunRecord

if TYPE_CHECKING:
    from reverie.core.scope import Scope
    from reverie.runtime.runtime import Runtime

__all__ = [
    "approver_of",
    "event_json",
    "finished_event",
    "gate_view",
    "listing",
    "run_view",
    "settled",
]


def settled(run: RunRecord) -> bool:
    """Whether the run has a stored result: it ended, or it waits on a gate."""
    return run.status in TERMINAL_STATUSES or run.status == "blocked"


def listing(items: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"object": "list", "data": [...]}``, the OpenAI list envelope."""
    return {"object": "list", "data": items}


async def run_view(rt: Runtime, run: RunRecord) -> dict[str, Any]:
    """A run as every route shows it: ``GET /v1/runs/{id}``, each item of ``GET /v1/runs``, and
    the ``run`` of a gate's approve or deny answer — one shape, so a client parses one object.

    ``text``, ``output``, ``exit``, ``usage``, ``gate`` and ``drift`` are always there: ``null``
    until the run settles (a queued or running run's stored exit, if any, belongs to an earlier
    segment, e.g. the block it was resumed from). ``drift`` lists what the run's resumes found
    changed in its agent, each with the ``action`` taken.
    """
    out: dict[str, Any] = {
        "object": "run",
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        # An HTTP turn runs an ephemeral agent: name the served agent it ran for.
        "agent": str(run.meta.get(SERVED_AGENT_META, run.agent_name)),
        "profile": run.profile,
        "status": run.status,
        "created_at": iso_utc(run.created_at),
        "updated_at": iso_utc(run.updated_at),
        "text": None,
        "output": None,
        "exit": None,
        "usage": None,
        "gate": None,
        "drift": None,
    }
    if settled(run):
        result = await rt.get_result(run.run_id)
        out.update(
            text=result.text,
            output=output_json(result.output),
            exit=exit_to_dict(result.exit),
            usage=result.usage.to_dict(),
            gate=_result_gate(result.gate),
            drift=[d.to_dict() for d in result.drift],
        )
    return out


def _result_gate(gate: Gate | None) -> dict[str, Any] | None:
    if gate is None:
        return None
    return {
        "ref": gate.ref,
        "kind": gate.kind,
        "tool": gate.tool,
        "arguments": dict(gate.arguments),
    }


def gate_view(gate: GateRecord) -> dict[str, Any]:
    """A gate as ``GET /v1/gates`` lists it (arguments are sanitised by the runtime)."""
    return {
        "object": "gate",
        "ref": gate.ref,
        "run_id": gate.run_id,
        "kind": gate.kind,
        "tool": gate.tool,
        "arguments": dict(gate.arguments),
        "status": gate.status,
        "reason": gate.reason,
        "created_at": iso_utc(gate.created_at),
        "resolved_at": iso_utc(gate.resolved_at),
        "resolved_by": gate.resolved_by,
        "shown_digest": gate.shown_digest,
        "approved_digest": gate.approved_digest,
        "edited_arguments": (
            None if gate.edited_arguments is None else dict(gate.edited_arguments)
        ),
    }


def approver_of(owner: Scope) -> str:
    """Who a bearer token's owner is, as a gate records its approver: ``tenant/user``."""
    return f"{owner.tenant}/{owner.user}"


def event_json(event: RunEvent) -> str:
    """A typed run event as one line of JSON (its fields, ``kind`` first)."""
    fields = dataclasses.asdict(event)
    ordered = {"kind": fields.pop("kind"), **fields}
    return json.dumps(ordered, ensure_ascii=False, separators=(",", ":"), default=str)


def finished_event(run: RunRecord) -> RunFinished:
    """The ``run_finished`` event of a settled run, rebuilt from its stored exit."""
    return RunFinished(run_id=run.run_id, status=run.status, exit=dict(run.exit or {}))
