"""Ask an OpenAI-compatible endpoint, once, what it supports (``reverie doctor --probe``).

Each probe is one small request sent over plain HTTP, so what is measured is the server's own
behaviour, not the adapter's workarounds:

==================  ========================================================================
probe               supported when
==================  ========================================================================
plain reply         a whole (non-streamed) request is answered with a message
stream              a streamed reply ends with a ``finish_reason``
usage in streams    that stream carries usage (``stream_options.include_usage``)
streamed tools      a streamed request offering a tool ends with a ``finish_reason``
tool call           a forced tool call comes back as a call
null content        a conversation with ``"content": null`` beside a tool call is accepted
parallel field      ``parallel_tool_calls`` in the request is accepted
json_schema         ``response_format`` of type ``json_schema`` is accepted
json_object         ``response_format`` of type ``json_object`` is accepted
==================  ========================================================================

:func:`probe_endpoint` returns the findings and the ``[models.NAME]`` keys they suggest. The
key is sent as the model would send it and never appears in a finding.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from reverie.core.redact import scrub
from reverie.models.openai import OpenAIChatModel

__all__ = ["Finding", "probe_endpoint"]

_TOOL = {
    "type": "function",
    "function": {
        "name": "echo",
        "description": "Echo a word back.",
        "parameters": {
            "type": "object",
            "properties": {"word": {"type": "string"}},
            "required": ["word"],
        },
    },
}
_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}
_SAY_OK = [{"role": "user", "content": "Reply with the single word OK."}]


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """What one probe found."""

    feature: str
    """The probe's name (see the module docstring)."""
    supported: bool
    detail: str
    """What the server did, in a few words (an error summary without paths or secrets)."""


async def probe_endpoint(
    model: OpenAIChatModel, *, timeout_s: float = 60.0
) -> tuple[list[Finding], dict[str, Any]]:
    """Probe ``model``'s endpoint once per feature; the findings and the suggested keys.

    Never raises for what the server does; a server that cannot be reached at all yields
    findings that say so.
    """
    url, headers = model.probe_target()
    base = {"model": model.model, "max_tokens": 16, "temperature": 0}
    findings: list[Finding] = []
    async with httpx.AsyncClient(timeout=timeout_s, headers=headers) as client:

        async def whole(feature: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
            answer, detail = await _post(client, url, {**base, **body, "stream": False})
            findings.append(Finding(feature=feature, supported=answer is not None, detail=detail))
            return answer

        async def streamed(feature: str, body: Mapping[str, Any]) -> tuple[bool, bool]:
            finished, usage, detail = await _stream(client, url, {**base, **body, "stream": True})
            findings.append(Finding(feature=feature, supported=finished, detail=detail))
            return finished, usage

        await whole("plain reply", {"messages": _SAY_OK})
        _, usage = await streamed(
            "stream", {"messages": _SAY_OK, "stream_options": {"include_usage": True}}
        )
        findings.append(
            Finding(
                feature="usage in streams",
                supported=usage,
                detail="usage sent" if usage else "no usage in the stream",
            )
        )
        tools_streamed, _ = await streamed(
            "streamed tools", {"messages": _SAY_OK, "tools": [_TOOL], "tool_choice": "auto"}
        )
        forced = {"type": "function", "function": {"name": "echo"}}
        answer = await whole(
            "tool call",
            {
                "messages": [{"role": "user", "content": "Call echo with the word hi."}],
                "tools": [_TOOL],
                "tool_choice": forced,
            },
        )
        calls = _message(answer).get("tool_calls") if answer else None
        if answer is not None and not calls:
            findings[-1] = Finding(
                feature="tool call", supported=False, detail="answered, but with no tool call"
            )
        null_ok = await whole("null content", {"messages": _NULL_CONTENT, "tools": [_TOOL]})
        parallel = await whole(
            "parallel field",
            {"messages": _SAY_OK, "tools": [_TOOL], "parallel_tool_calls": False},
        )
        schema = await whole(
            "json_schema",
            {
                "messages": [{"role": "user", "content": "Answer OK as JSON."}],
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "probe", "schema": _SCHEMA},
                },
            },
        )
        json_mode = await whole(
            "json_object",
            {
                "messages": [{"role": "user", "content": "Answer OK as a JSON object."}],
                "response_format": {"type": "json_object"},
            },
        )
    mode = "json_schema" if schema else "json_object" if json_mode else "tool" if calls else "none"
    suggested: dict[str, Any] = {
        "structured_output": mode,
        "usage_in_streams": usage,
        "null_content": null_ok is not None,
        "parallel_tool_calls": parallel is not None,
        "streaming_tool_calls": tools_streamed,
    }
    return findings, suggested


_NULL_CONTENT = [
    {"role": "user", "content": "Call echo with the word hi."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_probe",
                "type": "function",
                "function": {"name": "echo", "arguments": json.dumps({"word": "hi"})},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_probe", "content": "hi"},
]


def _message(answer: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = answer.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        message = choices[0].get("message")
        if isinstance(message, Mapping):
            return message
    return {}


def _refusal(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    error = body.get("error") if isinstance(body, Mapping) else None
    message = error.get("message") if isinstance(error, Mapping) else None
    text = f": {scrub(message, 120)}" if isinstance(message, str) else ""
    return f"HTTP {response.status_code}{text}"


async def _post(
    client: httpx.AsyncClient, url: str, body: Mapping[str, Any]
) -> tuple[dict[str, Any] | None, str]:
    try:
        response = await client.post(url, json=dict(body))
    except httpx.HTTPError as exc:
        return None, f"no answer ({type(exc).__name__})"
    if response.status_code >= 400:
        return None, _refusal(response)
    try:
        answer = response.json()
    except ValueError:
        return None, "answered with a body that is not JSON"
    if not isinstance(answer, dict) or not _message(answer):
        return None, "answered without a message"
    return answer, f"HTTP {response.status_code}"


async def _stream(
    client: httpx.AsyncClient, url: str, body: Mapping[str, Any]
) -> tuple[bool, bool, str]:
    finished = usage = False
    chunks = 0
    try:
        async with client.stream("POST", url, json=dict(body)) as response:
            if response.status_code >= 400:
                await response.aread()
                return False, False, _refusal(response)
            async for line in response.aiter_lines():
                data = line.removeprefix("data:").strip()
                if not line.startswith("data:") or data == "[DONE]":
                    continue
                try:
                    chunk = json.loads(data)
                except ValueError:
                    return False, usage, "a chunk that is not JSON"
                if not isinstance(chunk, Mapping):
                    continue
                if chunk.get("error") or chunk.get("object") == "error":
                    return False, usage, "an error inside the stream"
                chunks += 1
                usage = usage or isinstance(chunk.get("usage"), Mapping)
                for choice in chunk.get("choices") or ():
                    if isinstance(choice, Mapping) and choice.get("finish_reason"):
                        finished = True
    except httpx.HTTPError as exc:
        return False, usage, f"the stream broke ({type(exc).__name__})"
    if finished:
        return True, usage, f"{chunks} chunks, ended with a finish_reason"
    if chunks == 0:
        return False, usage, "HTTP 200, then nothing"
    return False, usage, f"{chunks} chunks, no finish_reason"
