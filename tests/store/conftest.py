"""Fixtures shared by the store tests."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest


@pytest.fixture
def sqlite_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every SQL statement run by a SQLite connection opened during the test, in order.

    Connections opened after the test's ``monkeypatch.undo()`` (the same ``monkeypatch``) are
    not traced.
    """
    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        db: sqlite3.Connection = connect(*args, **kwargs)
        db.set_trace_callback(statements.append)
        return db

    monkeypatch.setattr(sqlite3, "connect", traced)
    return statements
