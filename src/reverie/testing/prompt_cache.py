"""The providers' prompt caches, simulated for the fake servers.

Token counts are the fakes' usual rough measure: a character count of the request's JSON / 4.

- :class:`OpenAIPromptCache` (automatic prefix caching): a request whose messages begin with
  the messages text of an earlier request, with the same tools, response format and model,
  reads that common prefix from the cache — only from 1,024 tokens on, in 128-token steps, as
  OpenAI reports ``prompt_tokens_details.cached_tokens``.
- :class:`AnthropicPromptCache` (explicit breakpoints): the prompt is tools, then system, then
  the messages' content blocks, in that order; only a prefix ending at a block marked
  ``cache_control`` is written to the cache (``cache_creation_input_tokens``), and a later
  request reads the longest cached prefix ending at one of its breakpoints or at one of the 20
  blocks before each (``cache_read_input_tokens``). A prefix shorter than the model's minimum
  (1,024 tokens; 2,048 for Haiku models) is never cached. A request with no breakpoint is
  counted as the fake always counted it.

Neither cache expires (a test's run is shorter than the providers' five minutes).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["AnthropicCacheUsage", "AnthropicPromptCache", "OpenAIPromptCache"]

CHARS_PER_TOKEN = 4
OPENAI_MIN_TOKENS = 1024
OPENAI_STEP_TOKENS = 128
ANTHROPIC_LOOKBACK_BLOCKS = 20


def _common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (bisection on slices)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class OpenAIPromptCache:
    """Automatic prefix caching over the requests a fake OpenAI server has answered."""

    def __init__(self) -> None:
        self._seen: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def cached_tokens(self, body: Mapping[str, Any], input_tokens: int) -> int:
        """The cached part of ``input_tokens`` for ``body``; then ``body`` is remembered."""
        key = json.dumps(
            [body.get("model"), body.get("tools"), body.get("response_format")], sort_keys=True
        )
        text = json.dumps(body.get("messages", []))
        with self._lock:
            seen = self._seen.setdefault(key, [])
            best = max((_common_prefix(text, old) for old in seen), default=0)
            seen.append(text)
        tokens = min(best // CHARS_PER_TOKEN, input_tokens)
        if tokens < OPENAI_MIN_TOKENS:
            return 0
        return tokens // OPENAI_STEP_TOKENS * OPENAI_STEP_TOKENS


@dataclass(frozen=True, slots=True)
class AnthropicCacheUsage:
    """The input figures of one request, as the Messages API reports them."""

    input_tokens: int
    """Input neither read from nor written to the cache."""
    cache_read_input_tokens: int
    cache_creation_input_tokens: int


def _blocks(body: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """The prompt in cache order as ``(block text, is a breakpoint)`` (the marker itself is no
    part of the text)."""

    def one(block: Any, prefix: str = "") -> tuple[str, bool]:
        if isinstance(block, Mapping):
            marked = "cache_control" in block
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            return prefix + json.dumps(plain, sort_keys=True), marked
        return prefix + json.dumps(block), False

    out = [one(tool) for tool in body.get("tools") or ()]
    system = body.get("system")
    if isinstance(system, str):
        out.append(one({"type": "text", "text": system}))
    elif isinstance(system, Sequence):
        out += [one(block) for block in system]
    for message in body.get("messages") or ():
        if not isinstance(message, Mapping):
            continue
        role = f"{message.get('role')}:"
        content = message.get("content")
        if isinstance(content, str):
            out.append(one({"type": "text", "text": content}, role))
        elif isinstance(content, Sequence):
            out += [one(block, role if i == 0 else "") for i, block in enumerate(content)]
    return out


class AnthropicPromptCache:
    """Breakpoint caching over the requests a fake Anthropic server has answered."""

    def __init__(self) -> None:
        self._cached: set[str] = set()
        self._lock = threading.Lock()

    def usage(self, body: Mapping[str, Any]) -> AnthropicCacheUsage | None:
        """The input figures for ``body`` (``None`` without a breakpoint: counted as before);
        the prefixes at its breakpoints are then cached."""
        blocks = _blocks(body)
        marks = [i for i, (_, marked) in enumerate(blocks) if marked]
        if not marks:
            return None
        minimum = 2048 if "haiku" in str(body.get("model", "")) else 1024
        ends: list[int] = []  # character length of the prefix through block i
        digests: list[str] = []
        running = hashlib.sha256(str(body.get("model")).encode())  # a cache per model
        total = 0
        for text, _ in blocks:
            running.update(text.encode())
            total += len(text)
            ends.append(total)
            digests.append(running.copy().hexdigest())
        total_tokens = total // CHARS_PER_TOKEN
        with self._lock:
            read = 0
            for mark in marks:
                for i in range(mark, max(-1, mark - ANTHROPIC_LOOKBACK_BLOCKS - 1), -1):
                    if digests[i] in self._cached:
                        read = max(read, ends[i] // CHARS_PER_TOKEN)
                        break
            last = marks[-1]
            written = 0
            for mark in marks:
                tokens = ends[mark] // CHARS_PER_TOKEN
                if tokens >= minimum:
                    self._cached.add(digests[mark])
            last_tokens = ends[last] // CHARS_PER_TOKEN
            if last_tokens >= minimum and last_tokens > read:
                written = last_tokens - read
        return AnthropicCacheUsage(
            input_tokens=max(total_tokens - read - written, 0),
            cache_read_input_tokens=read,
            cache_creation_input_tokens=written,
        )
