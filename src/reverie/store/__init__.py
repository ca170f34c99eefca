"""Durable state of runs: the ``Store`` protocol, its records and its backends (docs/scaling.md).

Pick a backend by URL with :func:`open_store`:

========================================  ==================================================
URL                                       backend
========================================  ==================================================
``":memory:"``                            :class:`MemoryStore` (tests; lost on exit)
``"sqlite:///relative/path.db"``          :class:`SQLiteStore` on ``relative/path.db``
``"sqlite:////absolute/path.db"``         :class:`SQLiteStore` on ``/absolute/path.db``
``"path/to/file.db"`` (ends in ``.db``)   :class:`SQLiteStore` on that path
``"postgresql://user:pw@host/db"``         :class:`~reverie.store.postgres.PostgresStore`
``"postgres://…"``                        the same
========================================  ==================================================

A ``sqlite:`` URL may carry ``?synchronous=FULL`` (or ``OFF``/``NORMAL``/``EXTRA``); a
PostgreSQL URL any libpq parameter. The returned store is not open yet: ``await store.open()``
(or ``async with`` it) and ``await store.close()`` when done. The PostgreSQL backend needs the
``postgres`` extra (``pip install 'reverie[postgres]'``); it is imported only when a URL names
it, from :mod:`reverie.store.postgres`.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs

from reverie.errors import ConfigError, MissingExtraError
from reverie.store.base import (
    CHECKPOINT_KINDS,
    TERMINAL_STATUSES,
    USER_INPUT_KINDS,
    CheckpointKind,
    CheckpointRecord,
    GateRecord,
    GateResolution,
    GateStatus,
    InputKind,
    InputRecord,
    JournalEntry,
    NewItem,
    RunRecord,
    RunStatus,
    Store,
    ThreadRecord,
    TranscriptItem,
)
from reverie.store.documents import (
    Document,
    DocumentStore,
    DocumentVersion,
    LogEntry,
    MemoryPassRecord,
    SearchHit,
)
from reverie.store.memory import MemoryStore
from reverie.store.sqlite import SQLiteStore

__all__ = [
    "CHECKPOINT_KINDS",
    "TERMINAL_STATUSES",
    "USER_INPUT_KINDS",
    "CheckpointKind",
    "CheckpointRecord",
    "Document",
    "DocumentStore",
    "DocumentVersion",
    "GateRecord",
    "GateResolution",
    "GateStatus",
    "InputKind",
    "InputRecord",
    "JournalEntry",
    "LogEntry",
    "MemoryPassRecord",
    "MemoryStore",
    "NewItem",
    "RunRecord",
    "RunStatus",
    "SQLiteStore",
    "SearchHit",
    "Store",
    "ThreadRecord",
    "TranscriptItem",
    "default_store_url",
    "open_store",
]

_SQLITE_PREFIX = "sqlite:///"
_POSTGRES_PREFIXES = ("postgresql://", "postgres://")
_ACCEPTED = (
    "':memory:', 'sqlite:///relative/path.db', 'sqlite:////absolute/path.db', "
    "a file path ending in '.db' or 'postgresql://user:password@host:5432/dbname'"
)


def default_store_url() -> str:
    """The embedded default: ``sqlite:///$REVERIE_HOME/reverie.db``.

    ``REVERIE_HOME`` defaults to ``~/.reverie``; the directory is created when the store opens.
    """
    home = os.environ.get("REVERIE_HOME") or "~/.reverie"
    return _SQLITE_PREFIX + str(Path(home).expanduser() / "reverie.db")


def open_store(url: str) -> Store:
    """The store a URL names (not opened yet: call ``await store.open()``).

    Args:
        url: ``":memory:"``, ``"sqlite:///path.db"`` (three slashes then the path, so an
            absolute path has four), optionally with ``?synchronous=MODE``, a bare path ending
            in ``.db``, or ``"postgresql://..."`` / ``"postgres://..."`` (a libpq URL).

    Raises:
        ConfigError: The URL is not one of the accepted forms (the message lists them), or a
            PostgreSQL URL libpq cannot parse. Messages never quote a URL's password.
        ImportError: The URL names PostgreSQL and ``psycopg`` is not installed; the message
            says ``pip install 'reverie[postgres]'``.
    """
    url = url.strip()
    if url == ":memory:":
        return MemoryStore()
    if url.startswith(_POSTGRES_PREFIXES):
        return _postgres_store(url)
    if url.startswith(("postgresql", "postgres:")):  # e.g. postgresql+psycopg://, postgres:/x
        raise ConfigError(
            "a PostgreSQL store URL starts with 'postgresql://' or 'postgres://' "
            "(no driver suffix), e.g. 'postgresql://user:password@host:5432/dbname'"
        )
    if url.startswith(_SQLITE_PREFIX):
        path, _, query = url[len(_SQLITE_PREFIX) :].partition("?")
        options = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
        synchronous = options.pop("synchronous", "NORMAL")
        if not path or options:
            raise ConfigError(
                f"store URL {url!r} needs a path and accepts only the 'synchronous' option"
            )
        return SQLiteStore(path, synchronous=synchronous)
    if "://" not in url and url.endswith(".db"):
        return SQLiteStore(url)
    raise ConfigError(f"store URL {url!r} is not supported; use {_ACCEPTED}")


def _postgres_store(url: str) -> Store:
    try:
        from reverie.store.postgres import PostgresStore
    except ImportError as exc:
        if not (exc.name or "").startswith("reverie"):  # psycopg, or its libpq wrapper
            raise MissingExtraError("postgres", "the PostgreSQL store") from exc
        raise
    return PostgresStore(url)
