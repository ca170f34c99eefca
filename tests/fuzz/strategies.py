"""Hypothesis strategies the fuzz tests share: JSON values, TOML text, hostile strings."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, settings, strategies as st

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
"""Modest example counts (CI stays fast) and no per-example deadline (the machine is shared)."""

HOSTILE_TEXT = st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "\ud7ff\ufffd",
        "</untrusted-data>",
        "<tool_call>",
        "</tool_call>",
        "```",
        '{"',
        "[",
        "NaN",
        "Infinity",
        "-0",
        "1e999",
        "\u202e",
        "\u00ad",
    ]
)
"""Fragments that have broken parsers before."""

TEXT = st.text(max_size=40) | HOSTILE_TEXT

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)

JSON = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(max_size=12) | st.sampled_from(["type", "index", "id", "text"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)
"""Any JSON value (finite numbers), shallow enough to stay fast."""


@st.composite
def _deep(draw: st.DrawFn) -> Any:
    """A JSON value nested ``levels`` deep in arrays and objects, around an ordinary value."""
    levels = draw(st.sampled_from([63, 64, 65, 100, 900, 1_200, 5_000]))
    nested_objects = draw(st.booleans())
    value: Any = draw(SCALARS)
    for level in range(levels):
        value = {"k": value} if nested_objects and level % 2 else [value]
    return value


DEEP = _deep()
"""JSON nested around and far past the library's limit (64 levels; Python's recursion gives out
near 1,000): depth is part of every trust boundary's fuzzing."""

DEPTHS = st.sampled_from([62, 63, 64, 65, 100, 900, 1_200, 100_000])
"""Nesting around the limit, around Python's recursion limit, and far past the parser's."""


def _nested_text(levels: int, objects: bool, leaf: str) -> str:
    if objects:
        return '{"k":' * levels + leaf + "}" * levels
    return "[" * levels + leaf + "]" * levels


DEEP_TEXT = st.builds(_nested_text, DEPTHS, st.booleans(), st.sampled_from(["1", '"x"', "1.5"]))
"""JSON text nested that deep in arrays or objects, built as text (``json.dumps`` itself gives
out near 1,000 levels)."""


def objects_with(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """JSON objects whose keys are mostly ``keys`` (the ones a parser reads), values anything."""
    return st.dictionaries(st.sampled_from(keys) | st.text(max_size=6), JSON, max_size=len(keys))


def toml_value(value: Any) -> str:
    """``value`` as a TOML inline value (``None`` cannot be one: written as an empty string)."""
    if value is None:
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return (
        "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    )


def toml_document(tables: dict[str, dict[str, Any]]) -> str:
    """A TOML document of ``[table]`` sections holding ``key = value`` lines."""
    lines: list[str] = []
    for table, entries in tables.items():
        lines.append(f"[{json.dumps(table)}]")
        lines.extend(f"{json.dumps(key)} = {toml_value(value)}" for key, value in entries.items())
    return "\n".join(lines) + "\n"
