"""Row codecs shared by the SQL backends: record → columns for an INSERT, row → record.

SQLite and PostgreSQL hold the same tables with the same columns (see
:mod:`reverie.store.migrations` and :mod:`reverie.store.postgres_schema`), so one codec serves
both. Booleans are written as Python ``bool`` (``sqlite3`` stores them as 0/1, PostgreSQL as
BOOLEAN) and read back through ``bool()``. Backend-specific encodings (PostgreSQL's NUL-free text
for transcript content, SQLite's decoded-item cache) stay in each backend's schema module.
"""

from __future__ import annotations

import hashlib
import json
from _json import encode_basestring, make_encoder
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from reverie.core.messages import ToolCall
from reverie.core.scope import Scope
from reverie.errors import StoreError
from reverie.store.base import (
    CheckpointRecord,
    GateRecord,
    InputRecord,
    JournalEntry,
    RunRecord,
    ThreadRecord,
    TranscriptItem,
)
from reverie.store.run_events import RunEventRecord

Columns = dict[str, Any]
"""Column name → value, ready for an INSERT."""


class Row(Protocol):
    """A result row addressable by column name (``sqlite3.Row``, a psycopg dict row)."""

    def __getitem__(self, key: str, /) -> Any: ...


_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_ENCODE = make_encoder(
    None, _JSON.default, encode_basestring, None, ":", ",", False, False, _JSON.allow_nan
)
"""The C encoder :meth:`json.JSONEncoder.encode` builds on every call (with ``_JSON``'s
options), built once: a step commit encodes a dozen small values. It keeps no table of the
containers it is inside (a table reused across calls is left stale by a failed encoding), so a
value that contains itself ends in :class:`RecursionError` rather than ``ValueError``."""


def dumps(value: Any) -> str:
    """JSON text for a JSON column; :class:`StoreError` (naming no data) if it cannot be.

    The same text as ``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``.
    """
    try:
        return "".join(_ENCODE(value, 0))
    except (TypeError, ValueError, RecursionError) as exc:
        raise StoreError(f"value is not JSON-serialisable ({type(exc).__name__})") from exc


def _loads_opt(text: str | None) -> Any:
    return json.loads(text) if text is not None else None


def scope_columns(scope: Scope) -> Columns:
    """The four scope columns."""
    return {
        "scope_tenant": scope.tenant,
        "scope_user": scope.user,
        "scope_agent": scope.agent,
        "scope_project": scope.project,
    }


def row_scope(row: Row) -> Scope:
    """The scope stored in a row's scope columns (NULL or '' agent/project: unset)."""
    return Scope(
        tenant=row["scope_tenant"],
        user=row["scope_user"],
        agent=row["scope_agent"] or None,
        project=row["scope_project"] or None,
    )


def owner_key(scope: Scope, key: str) -> str:
    """The stored form of an idempotency key: qualified by its owner (tenant and user).

    Keys are per owner: the same key of another tenant or user names another run. The column
    stays one UNIQUE text column; the qualifier is a digest of the owner, so the key column
    reveals no tenant name and two owners' keys can never collide.
    """
    owner = json.dumps([scope.tenant, scope.user], ensure_ascii=False).encode("utf-8")
    return f"o{hashlib.sha256(owner).hexdigest()[:32]}:{key}"


def _row_key(row: Row, scope: Scope) -> str | None:
    stored: str | None = row["idempotency_key"]
    if stored is None:
        return None
    qualifier = owner_key(scope, "")
    # Rows written before keys were qualified hold the bare key.
    return stored[len(qualifier) :] if stored.startswith(qualifier) else stored


def thread_columns(rec: ThreadRecord) -> Columns:
    """Columns of a ``threads`` row."""
    return {"thread_id": rec.thread_id, **scope_columns(rec.scope), "created_at": rec.created_at}


def row_thread(row: Row) -> ThreadRecord:
    """A ``threads`` row as a record."""
    return ThreadRecord(
        thread_id=row["thread_id"], scope=row_scope(row), created_at=row["created_at"]
    )


def row_item(row: Row) -> TranscriptItem:
    """An ``items`` row as a record."""
    return TranscriptItem(
        ref=row["ref"],
        seq=row["seq"],
        thread_id=row["thread_id"],
        run_id=row["run_id"],
        role=row["role"],
        content=row["content"],
        tool_calls=tuple(ToolCall.from_dict(c) for c in json.loads(row["tool_calls"])),
        tool_call_id=row["tool_call_id"],
        name=row["name"],
        input_id=row["input_id"],
        meta=json.loads(row["meta"]),
        superseded=bool(row["superseded"]),
    )


def exit_column(exit: Mapping[str, Any] | None) -> str | None:
    """The ``runs.exit`` column."""
    return dumps(dict(exit)) if exit is not None else None


def run_columns(rec: RunRecord, flag: Callable[[bool], Any] = bool) -> Columns:
    """Columns of a ``runs`` row; ``flag`` spells its flags (``Dialect.flag``)."""
    return {
        "run_id": rec.run_id,
        "thread_id": rec.thread_id,
        **scope_columns(rec.scope),
        "agent_name": rec.agent_name,
        "profile": rec.profile,
        "family_id": rec.family_id,
        "status": rec.status,
        "exit": exit_column(rec.exit),
        "created_at": rec.created_at,
        "updated_at": rec.updated_at,
        "lease_owner": rec.lease_owner,
        "lease_expires_at": rec.lease_expires_at,
        "fence": rec.fence,
        "cancel_requested": flag(rec.cancel_requested),
        "idempotency_key": (
            None if rec.idempotency_key is None else owner_key(rec.scope, rec.idempotency_key)
        ),
        "has_actor": flag(rec.has_actor),
        "meta": dumps(dict(rec.meta)),
    }


def row_run(row: Row) -> RunRecord:
    """A ``runs`` row as a record."""
    scope = row_scope(row)
    return RunRecord(
        run_id=row["run_id"],
        thread_id=row["thread_id"],
        scope=scope,
        agent_name=row["agent_name"],
        profile=row["profile"],
        family_id=row["family_id"],
        status=row["status"],
        exit=_loads_opt(row["exit"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        fence=row["fence"],
        cancel_requested=bool(row["cancel_requested"]),
        idempotency_key=_row_key(row, scope),
        has_actor=bool(row["has_actor"]),
        meta=json.loads(row["meta"]),
    )


def row_checkpoint(row: Row) -> CheckpointRecord:
    """A ``checkpoints`` row as a record (the payload stays opaque bytes)."""
    return CheckpointRecord(
        run_id=row["run_id"],
        kind=row["kind"],
        payload=bytes(row["payload"]),
        created_at=row["created_at"],
    )


def row_journal(row: Row) -> JournalEntry:
    """A ``journal`` row as a record."""
    return JournalEntry(
        run_id=row["run_id"],
        call_id=row["call_id"],
        tool=row["tool"],
        state=row["state"],
        outcome=_loads_opt(row["outcome"]),
    )


def input_columns(rec: InputRecord, *, created_at: float) -> Columns:
    """Columns of an ``inputs`` row."""
    return {
        "run_id": rec.run_id,
        "cursor": rec.cursor,
        "input_id": rec.input_id,
        "kind": rec.kind,
        "payload": dumps(dict(rec.payload)),
        "acked": rec.acked,
        "created_at": created_at,
    }


def row_input(row: Row) -> InputRecord:
    """An ``inputs`` row as a record."""
    return InputRecord(
        run_id=row["run_id"],
        cursor=row["cursor"],
        input_id=row["input_id"],
        kind=row["kind"],
        payload=json.loads(row["payload"]),
        acked=bool(row["acked"]),
    )


def gate_columns(rec: GateRecord) -> Columns:
    """Columns of a ``gates`` row."""
    return {
        "ref": rec.ref,
        "run_id": rec.run_id,
        "call_id": rec.call_id,
        "tool": rec.tool,
        "arguments": dumps(dict(rec.arguments)),
        "kind": rec.kind,
        "status": rec.status,
        "reason": rec.reason,
        **scope_columns(rec.scope),
        "created_at": rec.created_at,
        "resolved_at": rec.resolved_at,
        "resolved_by": rec.resolved_by,
        "shown_digest": rec.shown_digest,
        "approved_digest": rec.approved_digest,
        "edited_arguments": (
            None if rec.edited_arguments is None else dumps(dict(rec.edited_arguments))
        ),
    }


def row_gate(row: Row) -> GateRecord:
    """A ``gates`` row as a record."""
    return GateRecord(
        ref=row["ref"],
        run_id=row["run_id"],
        call_id=row["call_id"],
        tool=row["tool"],
        arguments=json.loads(row["arguments"]),
        kind=row["kind"],
        status=row["status"],
        reason=row["reason"],
        scope=row_scope(row),
        created_at=row["created_at"],
        resolved_at=row["resolved_at"],
        resolved_by=row["resolved_by"],
        shown_digest=row["shown_digest"],
        approved_digest=row["approved_digest"],
        edited_arguments=(
            None if row["edited_arguments"] is None else json.loads(row["edited_arguments"])
        ),
    )


RUN_EVENT_COLUMNS = ("run_id", "seq", "kind", "data", "created_at")
"""The columns of a ``run_events`` row, in the order of :func:`run_event_row`."""


def run_event_row(
    run_id: str, seq: int, data: Mapping[str, Any], created_at: float
) -> tuple[Any, ...]:
    """The values of a ``run_events`` row (an event's ``data`` names its ``kind``)."""
    # A dict is encoded as it is (the C encoder takes dicts only): no copy per event.
    return (
        run_id,
        seq,
        str(data["kind"]),
        dumps(data if type(data) is dict else dict(data)),
        created_at,
    )


def row_run_event(row: Row) -> RunEventRecord:
    """A ``run_events`` row as a record."""
    return RunEventRecord(
        run_id=row["run_id"],
        seq=row["seq"],
        kind=row["kind"],
        data=json.loads(row["data"]),
        created_at=row["created_at"],
    )
