"""``reverie memory show|edit|search|history|passes|curate``: one owner's memory (docs/memory.md).

Every command acts for the scope ``--tenant`` (default ``local``) / ``--user`` (default
``$USER``) and needs memory configured in ``reverie.toml`` (``[memory] provider = "native"``)::

    reverie memory show [PATH]            # the document (default MEMORY.md) as stored
    reverie memory edit [PATH]            # $VISUAL/$EDITOR on a copy; saved only if unchanged since
    reverie memory search QUERY           # full-text search of documents and the daily log
    reverie memory history [PATH]         # its versions, newest first
    reverie memory passes                 # curation passes and their reports
    reverie memory curate --now           # run one curation pass now, print its report

``edit`` writes back conditionally on the version it read: if the document changed meanwhile
(a curation pass, another person, an agent), nothing is saved, the edit is kept in its
temporary file, and the command exits 1.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer
from rich.markup import escape
from rich.table import Table

from reverie.cli.agents import NoAgentConfigured, choose_agent
from reverie.cli.common import (
    ConfigOption,
    ExitCode,
    JsonOption,
    Session,
    StoreOption,
    TenantOption,
    UserOption,
    default_user,
    err_console,
    execute,
    fail,
    load,
    open_session,
    out_console,
    replay_flags,
)
from reverie.cli.render import _iso, _short, _status, _time, print_json
from reverie.core.scope import Scope
from reverie.errors import CapabilityError, ConflictError

if TYPE_CHECKING:
    from reverie.config import ReverieConfig
    from reverie.store.documents import MemoryPassRecord

__all__ = ["app"]

app = typer.Typer(
    name="memory",
    help="One owner's memory: show, edit, search, history, curation passes.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

PathArgument = Annotated[
    str, typer.Argument(help="The document, e.g. MEMORY.md or notes/people.md.")
]
LimitOption = Annotated[int, typer.Option("--limit", "-n", min=1, help="At most this many.")]
_DEFAULT_EDITOR: Final = "vi"
STANDING_DOCUMENT: Final = "MEMORY.md"
"""The default document: ``reverie.memory.native.STANDING_DOCUMENT``, repeated here so that
``reverie --help`` does not import the memory package (a test keeps the two equal)."""


def _scope(tenant: str, user: str | None) -> Scope:
    return Scope(tenant=tenant, user=default_user() if user is None else user)


def _path(path: str) -> str:
    from reverie.memory.tools import validate_path

    try:
        return validate_path(path)
    except CapabilityError as exc:
        fail(str(exc).removeprefix("invalid memory path: "))


def _load(path: str | None) -> ReverieConfig:
    """The configuration, which must turn memory on."""
    from reverie.config import memory_settings

    config = load(path)
    if memory_settings(config).provider is None:
        fail(
            f"memory is off in {config.source}. Fix: add a [memory] table with "
            'provider = "native" (see docs/memory.md)'
        )
    return config


# ---------------------------------------------------------------------------------- show
@app.command("show")
def show(
    path: PathArgument = STANDING_DOCUMENT,
    as_json: JsonOption = False,
    tenant: TenantOption = "local",
    user: UserOption = None,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Print a memory document as stored (default MEMORY.md)."""
    path = _path(path)

    async def main() -> int:
        async with open_session(_load(config), store, memory=True) as session:
            doc = await session.rt.memory.read(_scope(tenant, user), path)
        if as_json:
            print_json({"path": path, "version": doc.version, "text": doc.text})
        elif doc.version == 0:
            err_console().print(f"{path} does not exist yet (version 0)", markup=False)
        else:
            # The text exactly as stored, for pipes: no markup, no wrapping.
            typer.echo(doc.text, nl=not doc.text.endswith("\n"))
        return ExitCode.OK

    execute(main)


# ---------------------------------------------------------------------------------- edit
def _editor() -> list[str]:
    command = os.environ.get("VISUAL") or os.environ.get("EDITOR") or _DEFAULT_EDITOR
    return shlex.split(command)


@app.command("edit")
def edit(
    path: PathArgument = STANDING_DOCUMENT,
    tenant: TenantOption = "local",
    user: UserOption = None,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Edit a memory document in $VISUAL / $EDITOR (default vi).

    The document is saved only if nobody changed it while you edited (compare-and-swap on the
    version read). Exit 0 saved or unchanged, 1 not saved (a conflict, or the editor failed).
    """
    path = _path(path)

    async def main() -> int:
        scope = _scope(tenant, user)
        async with open_session(_load(config), store, memory=True) as session:
            doc = await session.rt.memory.read(scope, path)
            draft = _draft(path, doc.text)
            command = [*_editor(), str(draft)]
            try:
                # The editor owns the terminal; the event loop waits in a thread meanwhile.
                done = await asyncio.to_thread(subprocess.run, command, check=False)
            except OSError as exc:
                _discard(draft)
                fail(f"cannot start the editor {command[0]!r} ({type(exc).__name__})")
            if done.returncode != 0:
                _discard(draft)
                fail(
                    f"the editor exited with status {done.returncode}; nothing was saved",
                    ExitCode.FAILED,
                )
            text = draft.read_text(encoding="utf-8")
            if text == doc.text:
                _discard(draft)
                out_console().print(f"{path}: no changes (version {doc.version})", markup=False)
                return ExitCode.OK
            again = replay_flags(config, store, tenant=tenant, user=user)
            return await _save(session, scope, path, text, doc.version, draft, again)

    execute(main)


def _discard(draft: Path) -> None:
    # A small local file: the editor session is interactive, nothing else waits on the loop.
    draft.unlink(missing_ok=True)


def _draft(path: str, text: str) -> Path:
    handle, name = tempfile.mkstemp(prefix=f"reverie-{path.replace('/', '-')}-", suffix=".md")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        file.write(text)
    return Path(name)


async def _save(
    session: Session, scope: Scope, path: str, text: str, version: int, draft: Path, again: str
) -> int:
    try:
        saved = await session.rt.memory.write(scope, path, text, expected_version=version)
    except ConflictError as exc:
        now = exc.current_version
        err_console().print(
            f"[bold red]error:[/] {escape(path)} changed while you were editing it (you started "
            f"from version {version}; it is now at version {now}). Your edit was NOT saved; it "
            f"is kept in {escape(str(draft))}. Run `reverie memory edit{escape(again)} "
            f"{escape(path)}` again and merge it."
        )
        return ExitCode.FAILED
    _discard(draft)
    out_console().print(f"{path}: saved as version {saved.version}", markup=False)
    return ExitCode.OK


# ---------------------------------------------------------------------------------- search
@app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="What to look for, in plain words.")],
    limit: LimitOption = 5,
    as_json: JsonOption = False,
    tenant: TenantOption = "local",
    user: UserOption = None,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Search the owner's memory (documents and the daily log), best first."""

    async def main() -> int:
        async with open_session(_load(config), store, memory=True) as session:
            hits = await session.rt.memory.search(_scope(tenant, user), query, limit=limit)
        if as_json:
            print_json(
                [
                    {
                        "kind": h.kind,
                        "ref": h.ref,
                        "score": h.score,
                        "text": h.text,
                        "created_at": _iso(h.created_at),
                    }
                    for h in hits
                ]
            )
            return ExitCode.OK
        console = out_console()
        if not hits:
            console.print("no matches")
        for hit in hits:
            console.print(f"[bold]{escape(hit.kind)}[/] {escape(hit.ref)}  [dim]{hit.score:.2f}[/]")
            console.print("  " + _short(hit.text, 300), markup=False)
        return ExitCode.OK

    execute(main)


# ---------------------------------------------------------------------------------- history
@app.command("history")
def history(
    path: PathArgument = STANDING_DOCUMENT,
    limit: LimitOption = 20,
    as_json: JsonOption = False,
    tenant: TenantOption = "local",
    user: UserOption = None,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """List the versions of a memory document, newest first."""
    path = _path(path)

    async def main() -> int:
        async with open_session(_load(config), store, memory=True) as session:
            versions = await session.rt.memory.history(_scope(tenant, user), path, limit=limit)
        if as_json:
            print_json(
                [
                    {"version": v.version, "created_at": _iso(v.created_at), "text": v.text}
                    for v in versions
                ]
            )
            return ExitCode.OK
        if not versions:
            err_console().print(f"{path} has no versions yet", markup=False)
            return ExitCode.OK
        table = Table("version", "written", "bytes", "text")
        for v in versions:
            size = len(v.text.encode("utf-8"))
            table.add_row(str(v.version), _time(v.created_at), str(size), escape(_short(v.text)))
        out_console().print(table)
        return ExitCode.OK

    execute(main)


# ---------------------------------------------------------------------------------- passes
def pass_payload(record: MemoryPassRecord) -> dict[str, Any]:
    """A curation pass as JSON."""
    return {
        "pass_id": record.pass_id,
        "run_id": record.run_id,
        "scope": record.scope.as_dict(),
        "created_at": _iso(record.created_at),
        "report": dict(record.report),
    }


def _report_lines(report: Mapping[str, Any]) -> list[str]:
    lines = [
        f"status: {_status(str(report.get('status', '-')))}",
        f"changed: {report.get('changed')}   write: {escape(str(report.get('write', '-')))}",
        f"summary: {escape(str(report.get('summary', '')))}",
    ]
    for key in ("entries_merged", "entries_removed", "error"):
        if key in report:
            lines.append(f"{key}: {escape(str(report[key]))}")
    for conflict in report.get("conflicts") or ():
        lines.append(f"conflict: {escape(str(conflict))}")
    return lines


@app.command("passes")
def passes(
    limit: LimitOption = 20,
    as_json: JsonOption = False,
    tenant: TenantOption = "local",
    user: UserOption = None,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """List the curation passes run over the owner's memory and their reports, newest first."""

    async def main() -> int:
        async with open_session(_load(config), store, memory=True) as session:
            records = await session.rt.memory.passes(_scope(tenant, user), limit=limit)
        if as_json:
            print_json([pass_payload(r) for r in records])
            return ExitCode.OK
        if not records:
            err_console().print("no curation passes yet")
            return ExitCode.OK
        table = Table("when", "pass", "status", "write", "changed", "summary")
        for r in records:
            report = r.report
            table.add_row(
                _time(r.created_at),
                escape(r.pass_id),
                _status(str(report.get("status", "-"))),
                escape(str(report.get("write", "-"))),
                escape(str(report.get("changed", "-"))),
                escape(_short(str(report.get("summary", "")), 100)),
            )
        out_console().print(table)
        return ExitCode.OK

    execute(main)


# ---------------------------------------------------------------------------------- curate
@app.command("curate")
def curate(
    now: Annotated[bool, typer.Option("--now", help="Run one pass now and wait for it.")] = False,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Model spec for the pass (default: [memory] curation_model, else the agent's).",
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", "-a", help="Use this configured agent's model for the pass."),
    ] = None,
    as_json: JsonOption = False,
    tenant: TenantOption = "local",
    user: UserOption = None,
    config: ConfigOption = None,
    store: StoreOption = None,
) -> None:
    """Run one curation pass over the owner's memory now and print its report.

    Passes otherwise run in the background after every Nth completed turn
    ([memory] curation_interval_turns). Exit 0 when the pass completed, 1 when it failed.
    """
    if not now:
        fail(
            "pass --now to run a curation pass now (passes otherwise run after every Nth "
            "completed turn: [memory] curation_interval_turns)"
        )

    async def main() -> int:
        from reverie.config import memory_settings, resolve_model_spec

        cfg = _load(config)
        chosen: Any = None
        if model is not None:
            chosen = resolve_model_spec(model, config=cfg, base_dir=Path.cwd())
        elif agent is not None or memory_settings(cfg).curation_model is None:
            try:
                chosen = choose_agent(cfg, name=agent, model_spec=None).models[0]
            except NoAgentConfigured:
                fail(
                    "no model for the curation pass. Fix: pass --model SPEC, set [memory] "
                    f"curation_model in {cfg.source}, or configure an agent"
                )
        async with open_session(cfg, store, memory=True) as session:
            if chosen is not None:
                session.close_with(chosen)  # built for this command: closed with it
            record = await session.rt.memory.curate(_scope(tenant, user), model=chosen)
        if as_json:
            print_json(pass_payload(record))
        else:
            console = out_console()
            console.print(f"[bold]pass[/] {escape(record.pass_id)}")
            for line in _report_lines(record.report):
                console.print("  " + line)
        return ExitCode.OK if record.report.get("status") == "completed" else ExitCode.FAILED

    execute(main)
