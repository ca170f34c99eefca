"""A curator behind a real HTTP model server, so a pass's model is a spec any process resolves."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from reverie.testing import call
from reverie.testing.fake_openai import FakeHang, FakeOpenAIServer, FakeStep

TIMEOUT_S = 20.0


def spec_of(server: FakeOpenAIServer) -> str:
    """The model spec of the fake server (resolvable in any process)."""
    return f"openai-compat:{server.base_url}#fake-model"


def _tool_results(body: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for message in body.get("messages", []):
        if message.get("role") != "tool":
            continue
        content = message.get("content") or ""
        try:
            out.append(json.loads(content))
        except ValueError:
            out.append(content)
    return out


class BodyCurator:
    """A stateless curator over request bodies: read, one replace, report.

    ``hang`` holds request numbers (1-based, over the server's life) answered with a long
    :class:`FakeHang`: the pass is then mid-model-call, where a test stops its process.
    """

    def __init__(self, new_text: str, *, hang: frozenset[int] = frozenset()) -> None:
        self.new_text = new_text
        self.hang = hang
        self.seen = 0

    def __call__(self, body: dict[str, Any]) -> FakeStep:
        self.seen += 1
        if self.seen in self.hang:
            return FakeHang(seconds=120.0)
        results = _tool_results(body)
        if not results:
            return call("memory_read", path="MEMORY.md")
        if len(results) == 1:
            read = results[0]
            return call(
                "memory_write",
                target="MEMORY.md",
                content=self.new_text,
                expected_version=read["version"],
            )
        return call("structured_result", changed=True, summary="merged duplicates")


async def wait_for_requests(server: FakeOpenAIServer, n: int) -> None:
    """Wait until the server has received ``n`` requests (fail after :data:`TIMEOUT_S`)."""
    deadline = time.monotonic() + TIMEOUT_S
    while len(server.requests) < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"the server got {len(server.requests)} of {n} requests")
        await asyncio.sleep(0.01)
