"""How the CLI shows runs, gates and results: Rich for people, JSON for machines."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from reverie.cli.common import ExitCode, err_console, out_console
from reverie.cli.ids import short_id
from reverie.core.exits import exit_to_dict
from reverie.core.timestamps import iso_utc

if TYPE_CHECKING:
    from reverie.cli.run_tree import RunNode
    from reverie.runtime.result import RunResult
    from reverie.store.base import GateRecord, RunRecord, TranscriptItem

__all__ = [
    "agent_shown",
    "exit_code_for",
    "gate_payload",
    "print_json",
    "result_payload",
    "run_payload",
    "show_gates",
    "show_result",
    "show_run",
    "show_runs",
]

_STATUS_STYLE = {
    "completed": "green",
    "blocked": "yellow",
    "failed": "red",
    "cancelled": "magenta",
    "running": "cyan",
    "queued": "cyan",
    "pending": "yellow",
    "approved": "green",
    "denied": "red",
}

_EXIT_CODES = {
    "completed": ExitCode.OK,
    "blocked": ExitCode.BLOCKED,
    "failed": ExitCode.FAILED,
    "cancelled": ExitCode.CANCELLED,
}


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def _time(ts: float | None) -> str:
    if not ts:
        return "-"
    return datetime.fromtimestamp(ts, tz=UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _iso(ts: float | None) -> str | None:
    return iso_utc(ts)  # one format for the CLI's JSON and the HTTP API


def _status(status: str) -> str:
    style = _STATUS_STYLE.get(status)
    return f"[{style}]{status}[/]" if style else status


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _args(arguments: Mapping[str, Any]) -> str:
    return json.dumps(dict(arguments), ensure_ascii=False, sort_keys=True, default=str)


# ---------------------------------------------------------------------------------- results
def exit_code_for(result: RunResult) -> ExitCode:
    """0 completed, 3 blocked, 1 failed, 130 cancelled."""
    return _EXIT_CODES[result.status]


def result_payload(result: RunResult) -> dict[str, Any]:
    """``{status, text, run_id, thread_id, usage, gate, exit, output}`` for ``--json``
    (``output``: a typed run's validated value as JSON, else ``null``)."""
    from reverie.runtime.output import output_json  # not at import: ``--help`` stays light

    gate = None
    if result.gate is not None:
        gate = {
            "ref": result.gate.ref,
            "kind": result.gate.kind,
            "tool": result.gate.tool,
            "arguments": dict(result.gate.arguments),
        }
    return {
        "status": result.status,
        "text": result.text,
        "run_id": result.run_id,
        "thread_id": result.thread_id,
        "usage": result.usage.to_dict(),
        "gate": gate,
        "exit": exit_to_dict(result.exit),
        "output": output_json(result.output),
    }


def show_result(
    result: RunResult, *, as_json: bool, streamed: bool = False, flags: str = ""
) -> ExitCode:
    """Print a run's outcome and return the exit code it maps to.

    Completed: the reply on stdout (unless ``streamed`` already wrote it), a one-line summary
    on stderr (so ``$(reverie run …)`` is just the reply). Blocked: the gate and the commands
    that resolve it, with ``flags`` (:func:`~reverie.cli.common.replay_flags`: the
    ``--config``/``--store`` this command was given, so they work when pasted). Failed or
    cancelled: the reason on stderr.
    """
    code = exit_code_for(result)
    if as_json:
        print_json(result_payload(result))
        return code
    err = err_console()
    usage = result.usage
    summary = (
        f"[dim]run {result.run_id} · {result.status} · {usage.model_calls} model call(s), "
        f"{usage.capability_calls} tool call(s), {usage.input_tokens + usage.output_tokens} "
        f"tokens[/]"
    )
    if result.status == "completed":
        if not streamed:
            typer.echo(result.text or "")
        err.print(summary)
    elif result.status == "blocked":
        out = out_console()
        gate = result.gate
        if gate is None:  # not expected: a blocked result names its gate
            out.print(f"[yellow]Blocked[/] (run {escape(result.run_id)}): reverie gates list")
            return code
        out.print(
            f"[yellow]Blocked:[/] tool [bold]{escape(gate.tool)}[/] needs {escape(gate.kind)} "
            f"(gate [bold]{escape(gate.ref)}[/], run {escape(result.run_id)})."
        )
        out.print(f"  arguments: {escape(_args(gate.arguments))}")
        # Never wrapped: a command cut in two does not work when pasted.
        out.print(
            f"  approve:   reverie gates approve{escape(flags)} {escape(gate.ref)}", soft_wrap=True
        )
        out.print(
            f'  deny:      reverie gates deny{escape(flags)} {escape(gate.ref)} --reason "..."',
            soft_wrap=True,
        )
    elif result.status == "failed":
        data = exit_to_dict(result.exit)
        err.print(
            f"[red]Run failed[/] ({escape(str(data.get('kind')))}): "
            f"{escape(str(data.get('safe_summary', '')))}"
        )
        err.print(summary)
    else:
        data = exit_to_dict(result.exit)
        err.print(f"[magenta]Run cancelled[/] ({escape(str(data.get('reason', 'cancelled')))})")
        err.print(summary)
    return code


# ---------------------------------------------------------------------------------- runs
def agent_shown(run: RunRecord) -> str:
    """The agent a person knows the run by: the served agent of an unbound turn (a chat
    completion of ``reverie serve``; its record's own name is the ephemeral ``unbound:…``),
    else the run's agent, as the HTTP API's run views show it."""
    from reverie.runtime.unbound import SERVED_AGENT_META  # the runtime loads on first use

    served = run.meta.get(SERVED_AGENT_META)
    return served if isinstance(served, str) and served else run.agent_name


def run_payload(run: RunRecord) -> dict[str, Any]:
    """A run row as JSON."""
    return {
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "status": run.status,
        "agent": agent_shown(run),
        "tenant": run.scope.tenant,
        "user": run.scope.user,
        "profile": run.profile,
        "created_at": _iso(run.created_at),
        "updated_at": _iso(run.updated_at),
        "exit": dict(run.exit) if run.exit is not None else None,
        "parent_run_id": run.meta.get("parent_run_id"),
    }


def _drifts(run: RunRecord) -> list[str]:
    """What the run's resumes found changed in its agent, one line each (docs/durability.md)."""
    recorded = dict(run.exit or {}).get("drift")
    if not isinstance(recorded, list):
        return []
    return [
        f"{'resume refused' if d.get('action') != 'continue' else 'resumed anyway'}: "
        f"{d.get('summary', '')}"
        for d in recorded
        if isinstance(d, Mapping)
    ]


def _exit_summary(run: RunRecord) -> str:
    if run.exit is None:
        return ""
    data = dict(run.exit)
    if data.get("status") == "failed":
        return f"{data.get('kind')}: {data.get('safe_summary', '')}"
    if data.get("status") == "blocked":
        return f"gate {data.get('gate_ref')}"
    if data.get("status") == "cancelled":
        return str(data.get("reason", ""))
    return str(data.get("kind", ""))


@dataclass(frozen=True, slots=True)
class _Column:
    """A table column: its header, its cells (Rich markup), and how it gives way."""

    header: str
    cells: list[str]
    drop: int | None = None
    """Order in which the column is dropped on a narrow terminal (lowest first); ``None``:
    never (the ids people copy)."""
    wrap: bool = False
    """Wrap long cells instead of widening the table (the last, free-text column)."""


_WRAP_MIN = 16
"""Narrowest a wrapping column is allowed to become before other columns are dropped."""


def _width(markup: str) -> int:
    return Text.from_markup(markup).cell_len


def _fitted(columns: list[_Column], width: int) -> Table:
    """A table of ``columns`` that fits ``width``: ids are never cut or wrapped.

    Columns are dropped in their ``drop`` order until the unwrapped columns (plus a usable
    width for the wrapping one) fit; what is left is printed whole.
    """
    kept = list(columns)

    def needed() -> int:
        total = 0
        for column in kept:
            natural = max([_width(column.header), *(_width(c) for c in column.cells)])
            total += (min(natural, _WRAP_MIN) if column.wrap else natural) + 3  # padding, rule
        return total

    droppable = sorted((c for c in columns if c.drop is not None), key=lambda c: c.drop or 0)
    while needed() > width and droppable:
        kept.remove(droppable.pop(0))
    table = Table(show_edge=False, header_style="bold")
    for column in kept:
        if column.wrap:
            table.add_column(column.header, overflow="fold", min_width=_WRAP_MIN)
        else:
            table.add_column(column.header, no_wrap=True, overflow="ignore")
    for row in zip(*(column.cells for column in kept), strict=True):
        table.add_row(*row)
    return table


def show_runs(runs: Sequence[RunRecord]) -> None:
    """A table of runs, newest first. Run ids stay whole: on a narrow terminal the exit
    summary wraps, and the scope, time, agent (and last the exit) columns give way."""
    out = out_console()
    if not runs:
        out.print("No runs.")
        return
    columns = [
        _Column("ID", [short_id(r.run_id) for r in runs]),
        # A child run (a subagent call started it) is marked, to be found under its parent.
        _Column(
            "RUN", [("↳ " if "parent_run_id" in r.meta else "") + escape(r.run_id) for r in runs]
        ),
        _Column("STATUS", [_status(r.status) for r in runs]),
        _Column("AGENT", [escape(agent_shown(r)) for r in runs], drop=2),
        _Column("SCOPE", [escape(f"{r.scope.tenant}/{r.scope.user}") for r in runs], drop=0),
        _Column("UPDATED", [_time(r.updated_at or r.created_at) for r in runs], drop=1),
        _Column("EXIT", [escape(_short(_exit_summary(r), 60)) for r in runs], drop=3, wrap=True),
    ]
    out.print(_fitted(columns, out.width))


def item_payload(item: TranscriptItem) -> dict[str, Any]:
    """A transcript row as JSON."""
    return {
        "seq": item.seq,
        "role": item.role,
        "content": item.content,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": dict(c.arguments)} for c in item.tool_calls
        ],
        "tool_call_id": item.tool_call_id,
        "name": item.name,
    }


def show_run(
    run: RunRecord,
    items: Sequence[TranscriptItem],
    gate: GateRecord | None,
    *,
    as_json: bool,
    tree: RunNode | None = None,
    flags: str = "",
) -> None:
    """A run's status, exit, usage, subagent runs (``tree``) and transcript; the approve
    command of a pending gate repeats ``flags`` (:func:`~reverie.cli.common.replay_flags`)."""
    from reverie.cli.run_tree import parent_call, tree_lines, tree_payload

    if as_json:
        payload = run_payload(run)
        payload["parent_call"] = run.meta.get("parent_call")
        payload["children"] = tree_payload(tree) if tree is not None else []
        payload["gate"] = gate_payload(gate) if gate is not None else None
        payload["transcript"] = [item_payload(i) for i in items]
        print_json(payload)
        return
    out = out_console()
    out.print(f"[bold]Run[/] {escape(run.run_id)}")
    out.print(f"  status:  {_status(run.status)}")
    out.print(f"  agent:   {escape(agent_shown(run))}")
    out.print(f"  scope:   {escape(run.scope.tenant)}/{escape(run.scope.user)}")
    out.print(f"  thread:  {escape(run.thread_id)}")
    link = parent_call(run)
    if link is not None:
        out.print(f"  parent:  {escape(link[0])} (call {escape(link[1])})")
    out.print(f"  created: {_time(run.created_at)}   updated: {_time(run.updated_at)}")
    if run.exit is not None:
        out.print(f"  exit:    {escape(_exit_summary(run))}")
        for drift in _drifts(run):
            out.print(f"  drift:   {escape(drift)}")
        usage = dict(run.exit).get("usage")
        if isinstance(usage, Mapping):
            out.print(
                f"  usage:   {usage.get('model_calls', 0)} model call(s), "
                f"{usage.get('capability_calls', 0)} tool call(s), "
                f"{usage.get('input_tokens', 0)} in{_cached(usage)} / "
                f"{usage.get('output_tokens', 0)} out tokens"
                f", ${float(usage.get('usd', 0.0)):.4f}"
            )
    if gate is not None and gate.status == "pending":
        out.print(
            f"  gate:    {escape(gate.ref)} ({escape(gate.tool)} {escape(_args(gate.arguments))})"
            f" — reverie gates approve{escape(flags)} {escape(gate.ref)}",
            soft_wrap=True,
        )
    if tree is not None and tree.children:
        out.print()
        out.print("[bold]Subagent runs[/]")
        for line in tree_lines(tree, _status):
            out.print(line)
    out.print()
    out.print("[bold]Transcript[/]")
    if not items:
        out.print("  (empty)")
    for item in items:
        _show_item(item)


def _show_item(item: TranscriptItem) -> None:
    out = out_console()
    if item.role == "tool":
        label = f"tool {item.name}" if item.name else "tool"
        out.print(
            f"[dim]{item.seq:>4}[/] [blue]{escape(label)}[/]: {escape(_short(item.content, 400))}"
        )
        return
    style = {"user": "bold", "assistant": "green", "system": "dim"}.get(item.role, "")
    head = (
        f"[dim]{item.seq:>4}[/] [{style}]{item.role}[/]:"
        if style
        else f"{item.seq:>4} {item.role}:"
    )
    text = escape(item.content) if item.content else ""
    out.print(f"{head} {text}".rstrip())
    for call in item.tool_calls:
        out.print(f"       → {escape(call.name)}({escape(_args(call.arguments))})")


# ---------------------------------------------------------------------------------- gates
def gate_payload(gate: GateRecord) -> dict[str, Any]:
    """A gate row as JSON."""
    return {
        "ref": gate.ref,
        "run_id": gate.run_id,
        "call_id": gate.call_id,
        "tool": gate.tool,
        "kind": gate.kind,
        "status": gate.status,
        "reason": gate.reason,
        "arguments": dict(gate.arguments),
        "tenant": gate.scope.tenant,
        "user": gate.scope.user,
        "created_at": _iso(gate.created_at),
        "resolved_at": _iso(gate.resolved_at),
        "resolved_by": gate.resolved_by,
        "shown_digest": gate.shown_digest,
        "approved_digest": gate.approved_digest,
        "edited_arguments": (
            None if gate.edited_arguments is None else dict(gate.edited_arguments)
        ),
    }


def show_gate(gate: GateRecord) -> None:
    """One gate in full: what was asked, and who answered it how."""
    out = out_console()
    rows = [
        ("gate", gate.ref),
        ("status", gate.status),
        ("tool", gate.tool),
        ("run", gate.run_id),
        ("scope", f"{gate.scope.tenant}/{gate.scope.user}"),
        ("created", _time(gate.created_at)),
        ("arguments", _args(gate.arguments)),
    ]
    if gate.resolved_at is not None:
        rows.append(("resolved", _time(gate.resolved_at)))
        rows.append(("by", gate.resolved_by or "-"))
    if gate.reason:
        rows.append(("reason", json.dumps(gate.reason, ensure_ascii=False)))
    if gate.edited_arguments is not None:
        rows.append(("approved with", _args(gate.edited_arguments)))
    if gate.shown_digest is not None:
        rows.append(("shown digest", gate.shown_digest))
    if gate.approved_digest is not None:
        rows.append(("approved digest", gate.approved_digest))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        out.print(f"{key.ljust(width)}  {value}", markup=False, highlight=False)


def show_gates(gates: Sequence[GateRecord]) -> None:
    """A table of gates, newest first. Gate refs stay whole: on a narrow terminal the
    arguments wrap, and the scope, time, run, arguments (and last the tool) columns give way;
    a run id shown is shown whole."""
    out = out_console()
    if not gates:
        out.print("No gates.")
        return
    columns = [
        _Column("ID", [short_id(g.ref) for g in gates]),
        _Column("GATE", [escape(g.ref) for g in gates]),
        _Column("STATUS", [_status(g.status) for g in gates]),
        _Column("TOOL", [escape(g.tool) for g in gates], drop=4),
        _Column("RUN", [escape(g.run_id) for g in gates], drop=2),
        _Column("SCOPE", [escape(f"{g.scope.tenant}/{g.scope.user}") for g in gates], drop=0),
        _Column("CREATED", [_time(g.created_at) for g in gates], drop=1),
        _Column(
            "ARGUMENTS", [escape(_short(_args(g.arguments), 60)) for g in gates], drop=3, wrap=True
        ),
    ]
    out.print(_fitted(columns, out.width))


def _cached(usage: Mapping[str, Any]) -> str:
    """`` (92% cached)``: the share of the input read from the providers' prompt caches."""
    read, total = usage.get("cache_read_tokens", 0), usage.get("input_tokens", 0)
    if not isinstance(read, int) or not isinstance(total, int) or read <= 0 or total <= 0:
        return ""
    return f" ({min(read / total, 1.0):.0%} cached)"
