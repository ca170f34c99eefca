"""Queue dispatch set-up: refused without PostgreSQL; the queue's schema applied idempotently."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from reverie import Runtime
from reverie.cli.app import app
from reverie.errors import ConfigError, UsageError
from reverie.runtime.dispatch import ensure_queue_schema
from reverie.store.postgres import temporary_schema

POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")


def test_queue_dispatch_on_sqlite_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs a PostgreSQL store"):
        Runtime.open(f"sqlite:///{tmp_path / 'r.db'}", dispatch="queue")


def test_an_unknown_dispatch_is_refused() -> None:
    with pytest.raises(UsageError, match="dispatch"):
        Runtime.open(":memory:", dispatch="remote")  # type: ignore[arg-type]


def test_the_worker_refuses_a_sqlite_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["worker", "--store", f"sqlite:///{tmp_path / 'r.db'}"])

    assert result.exit_code == 2
    assert "a worker pool needs PostgreSQL" in result.output


@pytest.mark.postgres
@pytest.mark.skipif(
    not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL; .ci/run starts a server"
)
async def test_the_queue_schema_is_applied_once_under_concurrent_starts() -> None:
    async with temporary_schema(POSTGRES_URL, prefix="reverie_worker") as url:
        await asyncio.gather(*(ensure_queue_schema(url) for _ in range(5)))
        await ensure_queue_schema(url)
        async with await psycopg.AsyncConnection.connect(url) as conn:
            cur = await conn.execute("SELECT count(*) FROM procrastinate_jobs")
            assert await cur.fetchone() == (0,)
