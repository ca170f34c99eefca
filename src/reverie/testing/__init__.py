"""Test doubles that are product code: script a model, then test your agent for real.

``ScriptedModel`` answers in process; ``FakeOpenAIServer`` and ``FakeAnthropicServer`` are local
HTTP servers speaking the providers' wire formats, so the official SDK paths run end to end.
All three refuse, by default, a conversation the providers would reject with HTTP 400 (see
:mod:`reverie.testing.conversation_rules`); ``strict=False`` lets a test send one on purpose.
"""

from __future__ import annotations

from typing import Any

from reverie.testing.conversation_rules import ConversationRuleError, Violation
from reverie.testing.image_rules import tiny_png
from reverie.testing.scripted import ScriptedModel, call, calls, error, raw_call, reply

__all__ = [
    "ConversationRuleError",
    "FakeAnthropicServer",
    "FakeOpenAIServer",
    "ScriptedModel",
    "Violation",
    "call",
    "calls",
    "error",
    "raw_call",
    "reply",
    "tiny_png",
]


def __getattr__(name: str) -> Any:
    # The fake servers need the `serve` extra (starlette, uvicorn); import them lazily.
    if name == "FakeOpenAIServer":
        from reverie.testing.fake_openai import FakeOpenAIServer

        return FakeOpenAIServer
    if name == "FakeAnthropicServer":
        from reverie.testing.fake_anthropic import FakeAnthropicServer

        return FakeAnthropicServer
    raise AttributeError(name)
