"""``reverie gates list|show|approve|deny``: the approvals people owe blocked runs (docs/tools.md).

Approving or denying resumes the run in this process, so the run's agent must be known here:
it comes from ``reverie.toml`` (or ``--model`` for the built-in assistant). When it is not, the
command fails with the typed error naming the agent, exit code 2, and the gate stays pending —
the agent is checked before anything changes.
"""

from __future__ import annotations

import getpass
import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from reverie.cli.agents import agents_with_model
from reverie.cli.common import (
    ConfigOption,
    ExitCode,
    JsonOption,
    StoreOption,
    err_console,
    execute,
    load,
    open_session,
    replay_flags,
    unknown_agent,
)
from reverie.cli.ids import resolve_gate_ref
from reverie.cli.render import gate_payload, print_json, show_gate, show_gates, show_result
from reverie.cli.runs import ModelOption
from reverie.core.vocabulary import GateDecision
from reverie.errors import GateEditError, UnknownAgentError

if TYPE_CHECKING:
    from reverie.store.base import GateStatus

__all__ = ["app"]

app = typer.Typer(
    name="gates",
    help="Gates waiting for a person: list, show, approve, deny.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


class GateStatusChoice(StrEnum):
    """Gate statuses ``--status`` accepts."""

    pending = "pending"
    approved = "approved"
    denied = "denied"
    all = "all"


_STATUS: dict[GateStatusChoice, GateStatus | None] = {
    GateStatusChoice.pending: "pending",
    GateStatusChoice.approved: "approved",
    GateStatusChoice.denied: "denied",
    GateStatusChoice.all: None,
}

RefArgument = Annotated[
    str,
    typer.Argument(help="The gate ref (from `reverie gates list`), or any unique prefix of it."),
]


@app.command("list")
def list_gates(
    status: Annotated[
        GateStatusChoice, typer.Option("--status", "-s", help="Which gates to list.")
    ] = GateStatusChoice.pending,
    as_json: JsonOption = False,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """List gates (pending ones by default), newest first."""

    async def main() -> int:
        cfg = load(config)
        wanted = _STATUS[status]
        async with open_session(cfg, store) as session:
            gates = await session.rt.gates.list(status=wanted)
        if as_json:
            print_json([gate_payload(g) for g in gates])
        else:
            show_gates(gates)
        return ExitCode.OK

    execute(main)


@app.command("show")
def show(
    ref: RefArgument,
    as_json: JsonOption = False,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Show one gate: the call as shown, and who resolved it, when and how (edited
    arguments, digests of the arguments shown and approved)."""

    async def main() -> int:
        cfg = load(config)
        async with open_session(cfg, store) as session:
            gate = await session.rt.gates.get(await resolve_gate_ref(session.rt.gates, ref))
        if as_json:
            print_json(gate_payload(gate))
        else:
            show_gate(gate)
        return ExitCode.OK

    execute(main)


def _edited_arguments(text: str | None) -> dict[str, Any] | None:
    """``--arguments``: a JSON object, inline or ``@file``."""
    if text is None:
        return None
    source = "--arguments"
    if text.startswith("@"):
        path = Path(text[1:])
        source = f"--arguments file {path}"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise GateEditError(f"{source} cannot be read: {exc.strerror}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GateEditError(f"{source} is not JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(value, dict):
        raise GateEditError(f"{source} must be a JSON object of the tool's arguments")
    return value


def _os_user() -> str | None:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in this environment
        return None


def _resolve(
    ref: str,
    decision: GateDecision,
    reason: str,
    *,
    arguments: str | None = None,
    by: str | None = None,
    model: str | None,
    as_json: bool,
    config: str | None,
    store: str | None,
) -> None:
    async def main() -> int:
        cfg = load(config)
        edited = _edited_arguments(arguments)  # a bad value changes nothing
        who = by if by is not None else _os_user()
        async with open_session(cfg, store, hooks=True, memory=True) as session:
            gate = await session.rt.gates.get(await resolve_gate_ref(session.rt.gates, ref))
            run = await session.rt.runs.get(gate.run_id)
            for agent in agents_with_model(cfg, run.agent_name, model):
                await session.add_agent(agent)
            try:
                if decision == "approved":
                    result = await session.rt.approve(gate.ref, arguments=edited, by=who)
                else:
                    result = await session.rt.deny(gate.ref, reason=reason, by=who)
            except UnknownAgentError as exc:
                # Checked by the runtime before the gate is touched: it is still pending.
                unknown_agent(exc, cfg, f"; gate {gate.ref} is still pending")
            if not as_json:
                err_console().print(
                    f"gate {gate.ref} {decision}; run {run.run_id} resumed", markup=False
                )
            flags = replay_flags(config, store, model=model)
            return show_result(result, as_json=as_json, flags=flags)

    execute(main)


AsOption = Annotated[
    str | None,
    typer.Option("--as", help="Who decides (recorded on the gate); default: the OS user."),
]


@app.command("approve")
def approve(
    ref: RefArgument,
    arguments: Annotated[
        str | None,
        typer.Option(
            "--arguments",
            help="Run the call with these arguments instead (a JSON object, or @FILE): the "
            "same tool, checked against its schema; the model is told what changed.",
        ),
    ] = None,
    by: AsOption = None,
    model: ModelOption = None,
    as_json: JsonOption = False,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Approve a gate and resume its run here until it ends or blocks again.

    Exit code as for `reverie run`; edited arguments the tool refuses exit 2 and leave the
    gate pending.
    """
    _resolve(
        ref,
        "approved",
        "",
        arguments=arguments,
        by=by,
        model=model,
        as_json=as_json,
        config=config,
        store=store,
    )


@app.command("deny")
def deny(
    ref: RefArgument,
    reason: Annotated[
        str, typer.Option("--reason", "-r", help="Why; the model is told.")
    ] = "denied by the operator",
    by: AsOption = None,
    model: ModelOption = None,
    as_json: JsonOption = False,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Deny a gate; the model is told and the run continues here.

    Exit code as for `reverie run`.
    """
    _resolve(ref, "denied", reason, by=by, model=model, as_json=as_json, config=config, store=store)
