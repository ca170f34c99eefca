"""What the console's templates show, shaped from the query API's records.

Arguments are shown as the gate shows them (secret-looking keys redacted) and every text is
masked for known secrets; the templates escape all of it. Nothing here reads the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reverie.core.redact import mask_secrets
from reverie.core.transcript import TranscriptItem
from reverie.core.vocabulary import is_unbound_profile
from reverie.runtime.agent import Agent
from reverie.runtime.subagents import parent_of
from reverie.runtime.unbound import SERVED_AGENT_META
from reverie.store.base import JournalEntry, RunCursor, RunRecord

__all__ = [
    "MAX_SHOWN_CHARS",
    "CallView",
    "ItemView",
    "JournalRow",
    "agent_label",
    "call_views",
    "decode_cursor",
    "encode_cursor",
    "journal_rows",
    "parent_id",
    "tool_flags",
    "transcript_view",
]

MAX_SHOWN_CHARS = 20_000
"""A longer text (a tool's output, a reply) is cut here on the page, with a note saying so."""


def clipped(text: str) -> str:
    """``text``, cut at :data:`MAX_SHOWN_CHARS`."""
    if len(text) <= MAX_SHOWN_CHARS:
        return text
    return text[:MAX_SHOWN_CHARS] + f"\n… ({len(text) - MAX_SHOWN_CHARS} more characters)"


def agent_label(run: RunRecord) -> str:
    """The agent a person knows the run by: an HTTP turn's served agent; another unbound turn
    (a curation pass, a structured background turn) is named by what it is, not by the
    ephemeral agent that ran it."""
    served = run.meta.get(SERVED_AGENT_META)
    if served is not None:
        return str(served)
    if is_unbound_profile(run.profile):
        return f"background turn ({run.profile})"
    return run.agent_name


def parent_id(run: RunRecord) -> str | None:
    """The run whose subagent call started ``run``."""
    return parent_of(run)


def encode_cursor(run: RunRecord) -> str:
    """The keyset cursor after ``run``: ``<created_at>~<run_id>`` (exact: repr of the float)."""
    return f"{run.created_at!r}~{run.run_id}"


def decode_cursor(raw: str | None) -> RunCursor | None:
    """A cursor from :func:`encode_cursor`; ``None`` when absent.

    Raises:
        ValueError: The value is not a cursor.
    """
    if not raw:
        return None
    when, sep, run_id = raw.partition("~")
    if not sep or not run_id or len(raw) > 200 or not run_id.isascii():
        raise ValueError("not a cursor")
    return float(when), run_id


@dataclass(frozen=True, slots=True, kw_only=True)
class CallView:
    """A tool call of an assistant row, with its journal state."""

    key: str
    """``<assistant ref>#<index>``: the id the journal and gates use."""
    name: str
    arguments: Mapping[str, Any]
    """Sanitised: secret-looking keys read ``[redacted]``."""
    arguments_error: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemView:
    """One transcript row as shown."""

    seq: int
    role: str
    text: str
    name: str | None
    calls: Sequence[CallView]
    superseded: bool


def call_views(item: TranscriptItem, redact: Callable[[str], str]) -> list[CallView]:
    """The tool calls of an assistant row."""
    return [
        CallView(
            key=f"{item.ref}#{index}",
            name=call.name,
            arguments=_masked(mask_secrets(dict(call.arguments)), redact),
            arguments_error=call.arguments_error,
        )
        for index, call in enumerate(item.tool_calls)
    ]


def _masked(value: Any, redact: Callable[[str], str]) -> Any:
    """``value`` with every string masked for known secrets (containers walked)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {str(k): _masked(v, redact) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(v, redact) for v in value]
    return value


def transcript_view(
    items: Iterable[TranscriptItem], redact: Callable[[str], str]
) -> list[ItemView]:
    """Rows of a run's transcript, texts masked and clipped."""
    return [
        ItemView(
            seq=item.seq,
            role=item.role,
            text=clipped(redact(item.content)),
            name=item.name,
            calls=call_views(item, redact),
            superseded=item.superseded,
        )
        for item in items
    ]


def tool_flags(agent: Agent | None) -> dict[str, Mapping[str, Any]]:
    """The agent's tools by name: their effects and idempotency (what the journal row needs)."""
    flags: dict[str, Mapping[str, Any]] = {}
    for tool in agent.tools if agent is not None else ():
        descriptor = getattr(tool, "descriptor", None)
        name = getattr(descriptor, "name", None)
        if isinstance(name, str):
            server = getattr(tool, "server", None)
            flags[name] = {
                "effects": sorted(getattr(descriptor, "effects", ()) or ()),
                "idempotent": bool(getattr(descriptor, "idempotent", False)),
                "needs_approval": bool(getattr(descriptor, "needs_approval", False)),
                # An MCP tool: its server and whether a session with it is up.
                "server": server if isinstance(server, str) else None,
                "connected": bool(getattr(tool, "server_connected", False)),
            }
    return flags


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalRow:
    """A tool call's side-effect journal entry as shown."""

    key: str
    tool: str
    state: str
    """``not started`` · ``running`` · ``finished`` · ``in doubt``: a crash cut the call (started
    and no live worker advancing the run, or recorded ``interrupted`` by the resume after it),
    so whether its effect happened is unknown."""
    outcome: str
    idempotent: bool | None
    """From the agent's tool (``None``: the tool is not among the served agent's)."""


def journal_rows(
    run: RunRecord,
    items: Sequence[ItemView],
    journal: Mapping[str, JournalEntry],
    flags: Mapping[str, Mapping[str, Any]],
    *,
    advancing: bool,
) -> list[JournalRow]:
    """One row per tool call of the run, in order."""
    rows: list[JournalRow] = []
    for item in items:
        for call in item.calls:
            entry = journal.get(call.key)
            tool = flags.get(call.name)
            if entry is None:
                state, outcome = "not started", ""
            elif entry.state == "finished":
                outcome = str((entry.outcome or {}).get("kind", ""))
                # A resume recorded "interrupted" for a call a crash cut: whether its effect
                # happened is unknown, and stays so.
                state = "in doubt" if outcome == "interrupted" else "finished"
            else:
                # Started and never finished: only the segment advancing it now may finish it;
                # otherwise a crash left its effect unknown.
                state = "running" if advancing and run.status == "running" else "in doubt"
                outcome = ""
            rows.append(
                JournalRow(
                    key=call.key,
                    tool=call.name,
                    state=state,
                    outcome=outcome,
                    idempotent=None if tool is None else bool(tool["idempotent"]),
                )
            )
    return rows
