"""Bad input and abuse: request-body limits checked before the body is buffered, deeply nested
JSON and bad query parameters answered 4xx (never 500), and optional CORS answered before
authentication."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Sequence

import httpx
import pytest

from reverie import Agent, Runtime
from reverie.serve import background_server, create_app
from reverie.testing import ScriptedModel, reply
from serve.serve_support import ANA_TOKEN, TIMEOUT_S, TOKENS, error_of

LIMIT = 64 * 1024


@contextlib.asynccontextmanager
async def limited(
    *, max_body_bytes: int = LIMIT, cors_origins: Sequence[str] = ()
) -> AsyncIterator[tuple[Runtime, str]]:
    agent = Agent(name="echo", model=ScriptedModel([reply("ok")] * 3), instructions="Echo.")
    async with Runtime.open(":memory:") as rt:
        app = create_app(
            rt,
            agents={"echo": agent},
            tokens=TOKENS,
            max_body_bytes=max_body_bytes,
            cors_origins=cors_origins,
        )
        async with background_server(app) as url:
            yield rt, url


def client(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url, headers={"authorization": f"Bearer {ANA_TOKEN}"}, timeout=TIMEOUT_S
    )


async def test_a_body_above_the_limit_is_413_and_nothing_is_stored() -> None:
    async with limited() as (rt, url), client(url) as http:
        big = {"agent": "echo", "input": "x" * (LIMIT + 1)}
        response = await http.post("/v1/runs", json=big)
        runs = await rt.store.list_runs()
    assert response.status_code == 413
    assert error_of(response)["code"] == "request_too_large"
    assert response.headers["x-should-retry"] == "false"
    assert runs == []


async def test_a_body_at_the_limit_is_accepted() -> None:
    async with limited(max_body_bytes=200) as (_, url), client(url) as http:
        body = b'{"agent": "echo", "input": "hi"}'
        response = await http.post("/v1/runs", content=body.ljust(200))
    assert response.status_code == 201


def _raw_request(url: str, head: str, body: bytes) -> bytes:
    """Send a request over a plain socket (no client would send this head) and read the answer
    until the server has sent a complete head."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(head.encode("ascii") + body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer


async def test_a_declared_length_above_the_limit_is_413_before_the_body_is_sent() -> None:
    async with limited() as (_, url):
        head = (
            "POST /v1/runs HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {ANA_TOKEN}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {50 * 1024 * 1024}\r\n\r\n"
        )
        # Only the head is sent: the answer must come without the 50 MB body.
        answer = await asyncio.to_thread(_raw_request, url, head, b"")
    assert answer.startswith(b"HTTP/1.1 413")


async def test_a_streamed_body_without_a_length_is_cut_at_the_limit_with_413() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"agent": "echo", "input": "'
        for _ in range(1000):  # up to 16 MB, far past the limit
            yield b"x" * 16384
        yield b'"}'

    async with limited() as (rt, url), client(url) as http:
        response = await http.post(
            "/v1/runs", content=chunks(), headers={"content-type": "application/json"}
        )
        runs = await rt.store.list_runs()
    assert response.status_code == 413
    assert error_of(response)["code"] == "request_too_large"
    assert runs == []


@pytest.mark.parametrize("depth", [100, 100_000])
async def test_deeply_nested_json_is_400_not_500(depth: int) -> None:
    async with limited(max_body_bytes=1024 * 1024) as (_, url), client(url) as http:
        nested = "[" * depth + "]" * depth
        body = f'{{"agent": "echo", "input": "hi", "thread_id": {nested}}}'
        runs = await http.post("/v1/runs", content=body)
        chat = await http.post(
            "/v1/chat/completions",
            content=f'{{"model": "echo", "messages": [{{"role": "user", "content": {nested}}}]}}',
        )
    for response in (runs, chat):
        assert response.status_code == 400, response.text
        assert error_of(response)["code"] == "invalid_json"


@pytest.mark.parametrize("limit", ["²", "١٢", "0", "501", "-1", "1e3", "9" * 5000, ""])
async def test_a_bad_limit_query_parameter_is_422_not_500(limit: str) -> None:
    async with limited() as (_, url), client(url) as http:
        runs = await http.get("/v1/runs", params={"limit": limit})
        gates = await http.get("/v1/gates", params={"limit": limit})
    for response in (runs, gates):
        assert response.status_code == 422
        assert error_of(response)["param"] == "limit"


async def test_a_cors_preflight_is_answered_before_authentication() -> None:
    origin = "https://app.example"
    async with limited(cors_origins=[origin]) as (_, url):
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S) as anon:
            preflight = await anon.options(
                "/v1/chat/completions",
                headers={
                    "origin": origin,
                    "access-control-request-method": "POST",
                    "access-control-request-headers": "authorization, content-type",
                },
            )
            refused = await anon.get("/v1/models", headers={"origin": origin})
        async with client(url) as http:
            allowed = await http.get("/v1/models", headers={"origin": origin})
            other = await http.get("/v1/models", headers={"origin": "https://evil.example"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == origin
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    # Actual requests still need a token; their answers carry the CORS headers either way.
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == origin
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == origin
    assert "access-control-allow-origin" not in other.headers


async def test_without_cors_origins_no_cors_headers_are_sent() -> None:
    async with limited() as (_, url), httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S) as anon:
        preflight = await anon.options(
            "/v1/models",
            headers={"origin": "https://app.example", "access-control-request-method": "GET"},
        )
    assert preflight.status_code == 401
    assert "access-control-allow-origin" not in preflight.headers
