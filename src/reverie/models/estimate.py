"""A conservative local token estimate, for endpoints that report no usage.

A budget must stay hard (docs/budgets.md): a reply whose server sent no token counts is never
counted as 0 tokens. Without the model's tokenizer reverie counts **one token per three
characters, rounded up**, over everything the request sends (message text, tool calls and their
arguments, the tool schemas, the output schema, plus a few tokens per message for the chat
template) and over everything the reply holds. English text averages about four characters per
token in the common BPE vocabularies and code about three, so the estimate errs high: a budget
trips early rather than late. The figures are marked ``estimated`` (:class:`TokenUsage`,
:class:`reverie.Usage`) wherever usage is shown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final

from reverie.core.messages import ModelRequest, TokenUsage, ToolCall

__all__ = ["CHARS_PER_TOKEN", "estimate_tokens", "estimate_usage"]

CHARS_PER_TOKEN: Final = 3
"""Characters counted as one token (rounded up): conservative for text and code alike."""
_PER_MESSAGE: Final = 4
"""Tokens a chat template adds around each message (role markers, separators)."""


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` by the conservative rule of this module (0 for no text)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def _calls_text(calls: Iterable[ToolCall]) -> str:
    return "".join(c.name + json.dumps(dict(c.arguments), default=str) for c in calls)


def estimate_usage(
    request: ModelRequest, reply_text: str = "", reply_calls: Iterable[ToolCall] = ()
) -> TokenUsage:
    """The estimated usage of ``request`` answered by ``reply_text`` and ``reply_calls``.

    The input side counts the whole request as sent, so a server that bills a cut reply is
    still charged for the prompt it read.
    """
    sent = 0
    for message in request.messages:
        sent += _PER_MESSAGE + estimate_tokens(message.content or "")
        sent += estimate_tokens(_calls_text(message.tool_calls))
    for tool in request.tools or ():
        spec = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
        sent += estimate_tokens(json.dumps(spec, default=str))
    if request.output_schema is not None:
        sent += estimate_tokens(json.dumps(request.output_schema, default=str))
    received = estimate_tokens(reply_text) + estimate_tokens(_calls_text(reply_calls))
    return TokenUsage(input_tokens=sent, output_tokens=received, estimated=True)
