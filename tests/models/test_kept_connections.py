"""A kept SDK client reuses its connections; one the server closed as a request went out on it
is a ``transient`` failure, retried on a fresh connection, not ``unavailable``.

Servers close idle keep-alive connections (uvicorn after 5 s): a request sent on one just as
it closes gets no answer. A client per call never met that; a model kept open for a server's
life (``async with model``, as ``reverie serve`` does) does, most under load. The provider here
is a minimal HTTP server that answers the first request of each connection and closes the
connection on the next one, unanswered.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from reverie import Agent, Runtime, Scope
from reverie.models.openai import OpenAIChatModel

OWNER = Scope(tenant="acme", user="ana")


def _sse_completion(text: str) -> bytes:
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    return "".join(lines).encode()


class OneAnswerPerConnection:
    """Answers the first request of a connection; closes the connection on its second."""

    def __init__(self) -> None:
        self.connections = 0
        self.answered = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            for turn in range(2):
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                if turn == 1:
                    return  # closed with no answer
                body = _sse_completion("hello")
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    + f"content-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
                self.answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


@pytest.fixture
async def provider() -> AsyncIterator[tuple[OneAnswerPerConnection, str]]:
    fake = OneAnswerPerConnection()
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield fake, f"http://127.0.0.1:{port}/v1"


async def test_a_kept_connection_the_server_closed_unanswered_is_retried_on_a_fresh_one(
    provider: tuple[OneAnswerPerConnection, str],
) -> None:
    fake, url = provider
    model = OpenAIChatModel("m", base_url=url, api_key_env=None)
    agent = Agent(name="greeter", model=model)
    async with model, Runtime.open(":memory:") as rt:
        first = await rt.run(agent, "hi", scope=OWNER)
        second = await rt.run(agent, "hi again", scope=OWNER)  # its call reuses the connection
    assert (first.status, first.text) == ("completed", "hello")
    assert (second.status, second.text) == ("completed", "hello"), second.exit
    assert (fake.connections, fake.answered) == (2, 2)
