"""DESIGN §9.1: tool output is serialised to text/JSON and capped, with a visible marker."""

from __future__ import annotations

import dataclasses
import re

from hypothesis import given, strategies as st
from pydantic import BaseModel

from reverie.capabilities import ToolContext, cap_output, serialize_output, tool
from reverie.core.capability import CallCompleted

_MARKER = re.compile(r"\n…\[truncated (\d+) bytes\]$")


class Item(BaseModel):
    name: str
    price: float


@dataclasses.dataclass
class Box:
    items: list[Item]


def test_str_output_is_passed_through_as_is() -> None:
    assert serialize_output("  hello\n") == "  hello\n"


def test_none_output_is_the_empty_string() -> None:
    assert serialize_output(None) == ""


def test_structured_output_is_compact_json() -> None:
    assert serialize_output({"a": [1, 2], "b": "é"}) == '{"a":[1,2],"b":"é"}'
    assert serialize_output([1, "x"]) == '[1,"x"]'
    assert serialize_output(Item(name="pen", price=1.5)) == '{"name":"pen","price":1.5}'
    assert serialize_output(Box(items=[Item(name="a", price=2)])) == (
        '{"items":[{"name":"a","price":2.0}]}'
    )


def test_structured_output_with_unknown_values_falls_back_to_str() -> None:
    class Odd:
        def __str__(self) -> str:
            return "odd"

    assert serialize_output({"x": Odd()}) == '{"x":"odd"}'


def test_other_output_uses_str() -> None:
    assert serialize_output(42) == "42"
    assert serialize_output(2.5) == "2.5"


def test_output_within_the_cap_is_unchanged() -> None:
    assert cap_output("abc", 3) == "abc"


def test_output_over_the_cap_is_truncated_with_a_marker_naming_the_dropped_bytes() -> None:
    text = "x" * 1000
    capped = cap_output(text, 100)
    assert len(capped.encode()) <= 100
    match = _MARKER.search(capped)
    assert match is not None
    kept = capped[: match.start()]
    assert text.startswith(kept)
    assert int(match.group(1)) == 1000 - len(kept)


@given(st.text(min_size=1), st.integers(min_value=1, max_value=200))
def test_cap_never_splits_a_multibyte_character(text: str, max_bytes: int) -> None:
    text = text.encode("utf-8", "replace").decode("utf-8")  # no lone surrogates
    capped = cap_output(text, max_bytes)
    match = _MARKER.search(capped)
    if match is None:
        assert capped == text
        assert len(text.encode()) <= max_bytes
        return
    kept = capped[: match.start()]
    assert text.startswith(kept)  # a clean prefix: no broken or replaced character
    assert int(match.group(1)) == len(text.encode()) - len(kept.encode())


def test_cap_of_multibyte_text_stays_within_the_cap() -> None:
    text = "ü€😀" * 500
    capped = cap_output(text, 64)
    assert len(capped.encode()) <= 64
    assert capped.encode().decode("utf-8") == capped


async def test_tool_output_respects_max_output_bytes(ctx: ToolContext) -> None:
    @tool(max_output_bytes=50)
    def big() -> str:
        """Too much text."""
        return "€" * 100

    outcome = await big.invoke({}, ctx)
    assert isinstance(outcome, CallCompleted)
    assert len(outcome.output.encode()) <= 50
    assert "[truncated" in outcome.output
