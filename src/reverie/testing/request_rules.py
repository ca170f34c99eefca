"""The providers' request-shape rules for tool choice and structured output, for the fakes.

The real APIs answer HTTP 400 to a request whose ``tool_choice`` or output format they cannot
honour; :class:`~reverie.testing.FakeOpenAIServer` and
:class:`~reverie.testing.FakeAnthropicServer` (strict, the default) do the same, so reverie can
never send in tests what the providers would reject. Each broken rule is a
:class:`~reverie.testing.conversation_rules.Violation` whose ``param`` names the field at fault.

Chat Completions (:func:`check_openai_request`):

``tool_choice_needs_tools``
    ``tool_choice`` is only allowed when ``tools`` are specified.
``tool_choice_names_a_tool``
    ``tool_choice`` is ``auto``, ``none``, ``required`` or ``{"type": "function", "function":
    {"name": N}}`` with ``N`` one of the tools.
``response_format_valid``
    ``response_format.type`` is ``text``, ``json_object`` or ``json_schema``. ``json_schema``
    needs ``json_schema.name`` (``^[a-zA-Z0-9_-]{1,64}$``) and, if given, a ``schema`` object;
    with ``strict: true`` its root is an object and every object has ``additionalProperties:
    false`` and lists all its properties as ``required``. ``json_object`` needs the word
    "json" somewhere in the messages.

Both apply, on reverie's own :class:`~reverie.core.messages.ModelRequest`, the one rule that does
not depend on the wire (:func:`check_model_request`, which ``ScriptedModel`` checks): a tool named
by ``tool_choice`` is one of the tools offered.

Messages API (:func:`check_anthropic_request`):

``tool_choice_needs_tools``
    ``tool_choice`` ``any`` or ``tool`` needs ``tools``.
``tool_choice_names_a_tool``
    ``tool_choice.type`` is ``auto``, ``any``, ``tool`` or ``none``; ``tool`` names one of the
    tools.
``output_format_valid``
    ``output_config.format`` is ``{"type": "json_schema", "schema": {...}}``, and the schema
    keeps to the subset JSON outputs support: every object has ``additionalProperties: false``;
    no numeric bounds (``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``,
    ``multipleOf``), no string lengths (``minLength``, ``maxLength``), no ``maxItems`` and no
    ``minItems`` above 1.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from reverie.core.messages import TOOL_CHOICE_MODES, ModelRequest
from reverie.testing.conversation_rules import Rule, Violation

__all__ = ["check_anthropic_request", "check_model_request", "check_openai_request"]

_SCHEMA_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_ANTHROPIC_UNSUPPORTED = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "maxItems",
)


def check_model_request(request: ModelRequest) -> list[Violation]:
    """``tool_choice_names_a_tool`` on reverie's own request (what ``ScriptedModel`` checks):
    a tool named by ``tool_choice`` is one of the tools offered. (A request without tools sends
    no ``tool_choice`` on either wire.)"""
    choice = request.tool_choice
    if not request.tools or choice in TOOL_CHOICE_MODES:
        return []
    if choice in {t.name for t in request.tools}:
        return []
    return [
        _violation(
            "tool_choice_names_a_tool",
            "tool_choice",
            f"tool_choice names {choice[:64]!r}, which is not one of the tools offered",
        )
    ]


def _violation(rule: Rule, param: str, detail: str) -> Violation:
    return Violation(rule, -1, detail, param=param)


def _tool_names_openai(body: Mapping[str, Any]) -> list[str] | None:
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools:
        return None
    names = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def check_openai_request(body: Mapping[str, Any]) -> list[Violation]:
    """The tool-choice and ``response_format`` rules of a Chat Completions request body."""
    out: list[Violation] = []
    names = _tool_names_openai(body)
    choice = body.get("tool_choice")
    if choice is not None:
        if names is None:
            out.append(
                _violation(
                    "tool_choice_needs_tools",
                    "tool_choice",
                    "Invalid value for 'tool_choice': 'tool_choice' is only allowed when "
                    "'tools' are specified.",
                )
            )
        elif isinstance(choice, str):
            if choice not in TOOL_CHOICE_MODES:
                out.append(
                    _violation(
                        "tool_choice_names_a_tool",
                        "tool_choice",
                        f"Invalid value for 'tool_choice': {choice[:40]!r}; expected 'auto', "
                        "'none', 'required' or a named function.",
                    )
                )
        else:
            function = choice.get("function") if isinstance(choice, Mapping) else None
            name = function.get("name") if isinstance(function, Mapping) else None
            if not isinstance(choice, Mapping) or choice.get("type") != "function" or not name:
                out.append(
                    _violation(
                        "tool_choice_names_a_tool",
                        "tool_choice",
                        "Invalid 'tool_choice': expected {'type': 'function', 'function': "
                        "{'name': ...}}.",
                    )
                )
            elif name not in names:
                out.append(
                    _violation(
                        "tool_choice_names_a_tool",
                        "tool_choice.function.name",
                        f"Invalid 'tool_choice': function {str(name)[:64]!r} is not one of "
                        "the 'tools'.",
                    )
                )
    fmt = body.get("response_format")
    if fmt is not None:
        out.extend(_response_format(fmt, body.get("messages")))
    return out


def _response_format(fmt: Any, messages: Any) -> list[Violation]:
    rule: Rule = "response_format_valid"
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if kind == "text":
        return []
    if kind == "json_object":
        if "json" not in json.dumps(messages).lower():
            return [
                _violation(
                    rule,
                    "messages",
                    "'messages' must contain the word 'json' in some form, to use "
                    "'response_format' of type 'json_object'.",
                )
            ]
        return []
    if kind != "json_schema":
        return [
            _violation(
                rule,
                "response_format.type",
                "Invalid value for 'response_format.type': expected 'text', 'json_object' "
                "or 'json_schema'.",
            )
        ]
    spec = fmt.get("json_schema")
    if not isinstance(spec, Mapping):
        return [
            _violation(
                rule,
                "response_format.json_schema",
                "Missing required parameter: 'response_format.json_schema'.",
            )
        ]
    name = spec.get("name")
    if not isinstance(name, str) or not _SCHEMA_NAME.match(name):
        return [
            _violation(
                rule,
                "response_format.json_schema.name",
                "Invalid 'response_format.json_schema.name': it must match ^[a-zA-Z0-9_-]{1,64}$.",
            )
        ]
    schema = spec.get("schema")
    if schema is None:
        return []
    if not isinstance(schema, Mapping):
        return [
            _violation(
                rule,
                "response_format.json_schema.schema",
                "Invalid 'response_format.json_schema.schema': expected an object.",
            )
        ]
    if spec.get("strict") is True:
        return [
            _violation(rule, "response_format.json_schema.schema", detail)
            for detail in _strict_problems(schema)
        ]
    return []


def _objects(schema: Any, path: str = "$") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every sub-schema of ``schema`` with its path (``$defs``, properties, items, anyOf…)."""
    if not isinstance(schema, Mapping):
        return
    yield path, schema
    for key in ("properties", "$defs", "definitions"):
        children = schema.get(key)
        if isinstance(children, Mapping):
            for name, child in children.items():
                yield from _objects(child, f"{path}.{key}.{name}")
    for key in ("items", "additionalProperties", "not"):
        child = schema.get(key)
        if isinstance(child, Mapping):
            yield from _objects(child, f"{path}.{key}")
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        children = schema.get(key)
        if isinstance(children, list):
            for i, child in enumerate(children):
                yield from _objects(child, f"{path}.{key}[{i}]")


def _is_object(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def _strict_problems(schema: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    if schema.get("type") != "object":
        out.append("Invalid schema for response_format: the root must be of type 'object'.")
    for path, sub in _objects(schema):
        if not _is_object(sub):
            continue
        if sub.get("additionalProperties") is not False:
            out.append(
                f"Invalid schema for response_format: at {path}, 'additionalProperties' is "
                "required to be supplied and to be false."
            )
        props = sub.get("properties")
        if isinstance(props, Mapping) and set(props) - set(sub.get("required") or ()):
            out.append(
                f"Invalid schema for response_format: at {path}, 'required' must list every "
                "key in 'properties'."
            )
    return out


def check_anthropic_request(body: Mapping[str, Any]) -> list[Violation]:
    """The tool-choice and ``output_config.format`` rules of a Messages API request body."""
    out: list[Violation] = []
    tools = body.get("tools")
    names = (
        [t.get("name") for t in tools if isinstance(t, Mapping)]
        if isinstance(tools, list) and tools
        else None
    )
    choice = body.get("tool_choice")
    if choice is not None:
        kind = choice.get("type") if isinstance(choice, Mapping) else None
        if kind not in ("auto", "any", "tool", "none"):
            out.append(
                _violation(
                    "tool_choice_names_a_tool",
                    "tool_choice.type",
                    "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'",
                )
            )
        elif kind in ("any", "tool") and names is None:
            out.append(
                _violation(
                    "tool_choice_needs_tools",
                    "tool_choice",
                    f"tool_choice of type {kind!r} may only be specified while providing tools",
                )
            )
        elif kind == "tool" and names is not None:
            assert isinstance(choice, Mapping)
            name = choice.get("name")
            if name not in names:
                out.append(
                    _violation(
                        "tool_choice_names_a_tool",
                        "tool_choice.name",
                        f"tool_choice.name: tool {str(name)[:64]!r} is not one of the tools",
                    )
                )
    config = body.get("output_config")
    if isinstance(config, Mapping) and config.get("format") is not None:
        out.extend(_output_format(config["format"]))
    return out


def _output_format(fmt: Any) -> list[Violation]:
    rule: Rule = "output_format_valid"
    if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
        return [
            _violation(
                rule,
                "output_config.format.type",
                "output_config.format.type: Input should be 'json_schema'",
            )
        ]
    schema = fmt.get("schema")
    if not isinstance(schema, Mapping):
        return [
            _violation(
                rule, "output_config.format.schema", "output_config.format.schema: Field required"
            )
        ]
    out: list[Violation] = []
    for path, sub in _objects(schema):
        if _is_object(sub) and sub.get("additionalProperties") is not False:
            out.append(
                _violation(
                    rule,
                    "output_config.format.schema",
                    f"output_config.format.schema: at {path}, objects must set "
                    "'additionalProperties' to false",
                )
            )
        for keyword in _ANTHROPIC_UNSUPPORTED:
            if keyword in sub:
                out.append(
                    _violation(
                        rule,
                        "output_config.format.schema",
                        f"output_config.format.schema: at {path}, {keyword!r} is not supported",
                    )
                )
        min_items = sub.get("minItems")
        if isinstance(min_items, int) and min_items > 1:
            out.append(
                _violation(
                    rule,
                    "output_config.format.schema",
                    f"output_config.format.schema: at {path}, 'minItems' above 1 is not supported",
                )
            )
    return out
