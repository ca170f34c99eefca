"""Secrets never leak: canaries for a model key, a URL password and a bearer token are absent
from results, events, logs at DEBUG, spans, HTTP bodies and every byte the store keeps — on
SQLite (the database, ``-wal`` and ``-shm``) and on PostgreSQL (every row of every table)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from reverie import Agent, Runtime, Scope, tool
from reverie.models.openai import OpenAIChatModel
from reverie.models.registry import resolve_model
from reverie.serve import background_server, create_app
from reverie.testing import FakeOpenAIServer
from reverie.testing.fake_openai import FakeError, FakeReply, FakeToolCall

URL_PASSWORD = "pw-CANARY-url-5150"
MODEL_KEY = "sk-CANARY-key-8080"
BEARER = "tok-CANARY-bearer-4711"
CANARIES = (URL_PASSWORD, MODEL_KEY, BEARER)
ANA = Scope(tenant="acme", user="ana")
POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def with_password(url: str) -> str:
    """``url`` with ``user:<the URL canary>@`` in front of its host."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://user:{URL_PASSWORD}@{rest}"


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed again: nothing listens there


def assert_no_canary(where: str, text: str | bytes) -> None:
    for canary in CANARIES:
        found = canary.encode() in text if isinstance(text, bytes) else canary in text
        assert not found, f"{canary!r} leaked into {where}"


def sqlite_bytes(db: Path) -> bytes:
    """The database file with its ``-wal`` and ``-shm`` files."""
    return b"".join(p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name))


async def postgres_rows(url: str) -> str:
    """Every row of every table of the test's schema, as text."""
    import psycopg
    from psycopg import sql

    options = parse_qs(urlsplit(url).query)["options"][0]
    schema = unquote(options).split("search_path=", 1)[1]
    out: list[str] = []
    async with await psycopg.AsyncConnection.connect(url) as conn:
        tables = await conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        )
        names = [str(row[0]) for row in await tables.fetchall()]
        assert names, f"no tables in schema {schema}"
        for name in names:
            rows = await conn.execute(
                sql.SQL("SELECT t::text FROM {}.{} AS t").format(
                    sql.Identifier(schema), sql.Identifier(name)
                )
            )
            out += [f"{name}: {row[0]}" for row in await rows.fetchall()]
    return "\n".join(out)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'canary.db'}"
        return
    if not POSTGRES_URL:
        pytest.skip("set REVERIE_TEST_POSTGRES_URL")
    from reverie.store.postgres import temporary_schema

    async with temporary_schema(POSTGRES_URL, prefix="reverie_canary") as url:
        yield url


async def stored_text(url: str, tmp_path: Path) -> bytes:
    if url.startswith("sqlite:///"):
        return sqlite_bytes(tmp_path / "canary.db")
    return (await postgres_rows(url)).encode()


async def test_canaries_are_absent_from_results_events_logs_spans_http_bodies_and_the_store(
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("CANARY_MODEL_KEY", MODEL_KEY)
    caplog.set_level(logging.DEBUG)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # The provider quotes back the URL it was reached at and the key it was sent.
    echo = f"upstream rejected http://user:{URL_PASSWORD}@gateway/v1 with key {{api_key}}"
    script = [
        FakeReply(tool_calls=(FakeToolCall("add", {"a": 2, "b": 3}),)),
        FakeError(400, message=echo),
        FakeError(400, message=echo),
    ]
    outputs: list[tuple[str, str | bytes]] = []
    async with (
        FakeOpenAIServer(script) as srv,
        FakeOpenAIServer([FakeError(400, message="this key is bad: {api_key}")]) as keyed_srv,
    ):
        model = OpenAIChatModel(
            "gpt-test", base_url=with_password(srv.base_url), api_key_env="CANARY_MODEL_KEY"
        )
        agent = Agent(name="calc", model=model, tools=[add])
        # No password in this one's URL: the key itself is sent, and quoted back.
        keyed = Agent(
            name="keyed",
            model=OpenAIChatModel(
                "gpt-test", base_url=keyed_srv.base_url, api_key_env="CANARY_MODEL_KEY"
            ),
        )
        outputs.append(("the model's repr", repr(model)))
        async with Runtime.open(store_url, tracer_provider=provider) as rt:
            handle = await rt.start(agent, "2+3?", scope=ANA)
            events = [e async for e in handle.events()]
            result = await handle.result()
            app = create_app(rt, agents={"calc": agent, "keyed": keyed}, tokens={BEARER: ANA})
            async with (
                background_server(app) as base,
                httpx.AsyncClient(
                    base_url=base, headers={"Authorization": f"Bearer {BEARER}"}, timeout=20.0
                ) as http,
            ):
                chat = await http.post(
                    "/v1/chat/completions",
                    json={"model": "keyed", "messages": [{"role": "user", "content": "hi"}]},
                )
                shown = await http.get(f"/v1/runs/{result.run_id}")
                listed = await http.get("/v1/runs")
            outputs += [
                ("the HTTP chat error", chat.text),
                ("GET /v1/runs/{id}", shown.text),
                ("GET /v1/runs", listed.text),
            ]
            outputs.append(("the store while open", await stored_text(store_url, tmp_path)))
    assert result.status == "failed"
    summary = result.exit.safe_summary  # type: ignore[union-attr]
    # The server's text survives, masked: the test would see a leak if there were one.
    assert "http://***@gateway/v1" in summary and "***" in summary
    assert chat.status_code >= 400 and shown.status_code == 200
    assert "this key is bad: ***" in chat.text  # the key was sent, quoted back, and masked
    assert keyed_srv.requests  # it was really asked
    outputs += [
        ("the result", repr(result)),
        ("the failure summary", summary),
        ("the run events", repr(events)),
        ("the logs at DEBUG", caplog.text),
        ("the spans", "\n".join(s.to_json() for s in exporter.get_finished_spans())),
        ("the store after close", await stored_text(store_url, tmp_path)),
    ]
    assert exporter.get_finished_spans()
    for where, text in outputs:
        assert_no_canary(where, text)
    provider.shutdown()


async def test_a_password_in_a_model_endpoint_url_is_masked_in_names_reprs_and_errors() -> None:
    url = with_password(f"http://127.0.0.1:{dead_port()}/v1")
    compat = resolve_model(f"openai-compat:{url}#llama")
    assert URL_PASSWORD not in compat.name and "http://***@127.0.0.1" in compat.name
    model = OpenAIChatModel("llama", base_url=url, api_key_env=None)
    assert URL_PASSWORD not in repr(model) and "http://***@127.0.0.1" in repr(model)
    async with Runtime.open(":memory:") as rt:
        r = await rt.run(Agent(name="calc", model=model), "hi", scope=ANA)
        stored = await rt.store.get_run(r.run_id)
    assert r.status == "failed"
    summary = r.exit.safe_summary  # type: ignore[union-attr]
    assert "cannot connect to http://***@127.0.0.1" in summary
    assert URL_PASSWORD not in summary and URL_PASSWORD not in repr(stored)
