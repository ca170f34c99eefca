"""What an OpenAI-compatible endpoint supports, declared rather than guessed.

Servers that speak the Chat Completions wire format differ where the spec leaves room or where
they have bugs. Each difference reverie must work around is one field of
:class:`EndpointCompat`; a known kind of server (:data:`SERVER_KINDS`) brings its defaults, and
``[models.NAME]`` (or the model's constructor) overrides any of them:

=====================  =====================================================================
field                  what the adapter does with it
=====================  =====================================================================
structured_output      how typed output is asked for: ``json_schema`` (``response_format``
                       with the schema), ``json_object`` (JSON mode; the schema goes in the
                       instructions and the reply is validated locally), ``tool`` (a forced
                       call of a tool whose parameters are the schema), ``none`` (the schema
                       in the instructions only, validated locally)
usage_in_streams       the server reports usage in a streamed reply; ``False``: reverie
                       estimates it (:mod:`reverie.models.estimate`) and marks it estimated
null_content           the server takes ``"content": null`` beside tool calls; ``False``:
                       ``""`` is sent (llama-cpp-python answers ``null`` with HTTP 500)
parallel_tool_calls    the server takes the ``parallel_tool_calls`` field; ``False``: it is
                       never sent
streaming_tool_calls   the server streams tool calls; ``False``: a request that offers tools
                       is sent without streaming (llama-cpp-python fails a streamed one after
                       its headers)
prompt_cache           the server takes ``prompt_cache_key`` (OpenAI: requests of one thread
                       share a key, so they reach the same prompt cache); ``False``: never
                       sent (default except for OpenAI's own API)
timeout_s              the read/write timeout of a request, in seconds
connect_timeout_s      the connect timeout, in seconds
=====================  =====================================================================

The defaults per kind are what the servers' documentation and source say, measured where a
server was at hand; docs/configuration.md lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final, Literal, get_args

__all__ = [
    "SERVER_KINDS",
    "STRUCTURED_OUTPUT_MODES",
    "EndpointCompat",
    "ServerKind",
    "StructuredOutput",
    "compat_for",
]

StructuredOutput = Literal["json_schema", "json_object", "tool", "none"]
"""How typed output is asked of an endpoint (see the module docstring)."""
STRUCTURED_OUTPUT_MODES: Final[tuple[StructuredOutput, ...]] = get_args(StructuredOutput)

ServerKind = Literal[
    "openai",
    "generic",
    "ollama",
    "vllm",
    "llamacpp",
    "llama-cpp-python",
    "lmstudio",
    "together",
    "groq",
]
"""The servers reverie knows the quirks of; ``generic`` is any other OpenAI-compatible one."""
SERVER_KINDS: Final[tuple[ServerKind, ...]] = get_args(ServerKind)


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointCompat:
    """What one endpoint supports; the adapters obey it (see the module docstring)."""

    structured_output: StructuredOutput = "json_schema"
    """How typed output is asked for."""
    usage_in_streams: bool = True
    """The server reports token usage at the end of a streamed reply."""
    null_content: bool = False
    """The server takes ``"content": null`` in an assistant message with tool calls."""
    parallel_tool_calls: bool = True
    """The server takes the ``parallel_tool_calls`` request field."""
    streaming_tool_calls: bool = True
    """The server streams replies to requests that offer tools."""
    prompt_cache: bool = False
    """The server takes ``prompt_cache_key`` (one per thread)."""
    timeout_s: float = 60.0
    """Read/write timeout of each request, in seconds."""
    connect_timeout_s: float = 10.0
    """Connect timeout of each request, in seconds."""

    def __post_init__(self) -> None:
        if self.structured_output not in STRUCTURED_OUTPUT_MODES:
            raise ValueError(
                f"structured_output must be one of {', '.join(STRUCTURED_OUTPUT_MODES)}, "
                f"not {self.structured_output!r}"
            )
        for name in ("timeout_s", "connect_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")


_GENERIC = EndpointCompat()
_DEFAULTS: Final[dict[ServerKind, EndpointCompat]] = {
    # OpenAI itself: the reference every other server is measured against.
    "openai": EndpointCompat(null_content=True, prompt_cache=True),
    # An unknown compatible server: the spec's request shapes, but never null content (""
    # is accepted everywhere; null is not).
    "generic": _GENERIC,
    # Ollama's /v1: json_schema (structured outputs), usage with include_usage, streamed calls;
    # no parallel_tool_calls field.
    "ollama": EndpointCompat(parallel_tool_calls=False),
    # vLLM: guided decoding takes json_schema; usage with include_usage.
    "vllm": _GENERIC,
    # llama.cpp's llama-server: json_schema grammar; streamed usage only in recent builds.
    "llamacpp": EndpointCompat(usage_in_streams=False, parallel_tool_calls=False),
    # llama-cpp-python 0.3.x: response_format takes only text/json_object (json_schema is a
    # 500), no usage in streams, null content is a 500, a streamed request with tools fails
    # after its headers.
    "llama-cpp-python": EndpointCompat(
        structured_output="json_object",
        usage_in_streams=False,
        parallel_tool_calls=False,
        streaming_tool_calls=False,
    ),
    # LM Studio: json_schema; usage in streams is not reliable across versions.
    "lmstudio": EndpointCompat(usage_in_streams=False, parallel_tool_calls=False),
    # Hosted open-weights APIs: JSON mode everywhere, json_schema only on some models.
    "together": EndpointCompat(structured_output="json_object"),
    "groq": EndpointCompat(structured_output="json_object"),
}


def compat_for(
    kind: ServerKind | None = None,
    *,
    structured_output: StructuredOutput | None = None,
    usage_in_streams: bool | None = None,
    null_content: bool | None = None,
    parallel_tool_calls: bool | None = None,
    streaming_tool_calls: bool | None = None,
    timeout_s: float | None = None,
    connect_timeout_s: float | None = None,
    prompt_cache: bool | None = None,
) -> EndpointCompat:
    """The defaults of server ``kind`` (``generic`` when ``None``) with the given fields set.

    Raises:
        ValueError: ``kind`` is unknown, or a field's value is invalid.
    """
    if kind is None:
        kind = "generic"
    if kind not in _DEFAULTS:
        raise ValueError(f"unknown server kind {kind!r}; known: {', '.join(SERVER_KINDS)}")
    given: dict[str, Any] = {
        "structured_output": structured_output,
        "usage_in_streams": usage_in_streams,
        "null_content": null_content,
        "parallel_tool_calls": parallel_tool_calls,
        "streaming_tool_calls": streaming_tool_calls,
        "timeout_s": timeout_s,
        "connect_timeout_s": connect_timeout_s,
        "prompt_cache": prompt_cache,
    }
    changes = {name: value for name, value in given.items() if value is not None}
    return replace(_DEFAULTS[kind], **changes) if changes else _DEFAULTS[kind]
