"""What the typed-output tests share: an owner, output types, a tool, provider models."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel, Field, field_validator

from reverie import Scope, tool
from reverie.models.anthropic import AnthropicModel
from reverie.models.openai import OpenAIChatModel

SCOPE = Scope(tenant="acme", user="ana")


class Verdict(BaseModel):
    """A judgement: the output type of most tests."""

    verdict: str
    score: int = Field(ge=0, le=10)

    @field_validator("verdict")
    @classmethod
    def known(cls, value: str) -> str:
        """Only these verdicts exist (a rule JSON Schema cannot say: pydantic checks it)."""
        if value not in ("approve", "reject"):
            raise ValueError("verdict must be 'approve' or 'reject'")
        return value


TICKET_SCHEMA: dict[str, Any] = {
    "title": "ticket",
    "type": "object",
    "properties": {"title": {"type": "string"}, "priority": {"enum": ["low", "high"]}},
    "required": ["title", "priority"],
    "additionalProperties": False,
}
"""A JSON Schema output type (closed, so Anthropic's JSON outputs accept it too)."""


@tool(effects=set())
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Gate:
    """A tool that waits until the test opens it, so inputs can arrive mid-run."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.opened = asyncio.Event()

    def tool(self) -> Any:
        @tool(effects=set())
        async def wait_a_bit() -> str:
            """Wait for the world."""
            self.entered.set()
            await asyncio.wait_for(self.opened.wait(), timeout=20)
            return "waited"

        return wait_a_bit


def openai_model(base_url: str, monkeypatch: pytest.MonkeyPatch) -> OpenAIChatModel:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-typed")
    return OpenAIChatModel("gpt-test", base_url=base_url)


def anthropic_model(base_url: str, monkeypatch: pytest.MonkeyPatch) -> AnthropicModel:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-typed")
    return AnthropicModel("claude-test", base_url=base_url)


def openai_roles(body: dict[str, Any]) -> list[tuple[str, str]]:
    """``(role, content)`` of a Chat Completions request's messages."""
    return [(m["role"], m.get("content") or "") for m in body["messages"]]
