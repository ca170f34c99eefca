"""Tool names are valid for every provider and unique within an agent."""

from __future__ import annotations

import pytest

from reverie.capabilities import tool, tools_by_name
from reverie.errors import UsageError


def noop() -> None:
    """Does nothing."""


def test_tools_by_name_indexes_tools_in_order() -> None:
    a = tool(name="a")(noop)
    b = tool(name="b-2_x")(noop)
    assert tools_by_name([a, b]) == {"a": a, "b-2_x": b}


def test_duplicate_tool_names_are_a_usage_error() -> None:
    with pytest.raises(UsageError, match="'same'"):
        tools_by_name([tool(name="same")(noop), tool(name="same")(noop)])


@pytest.mark.parametrize("name", ["", "has space", "dot.ted", "x" * 65, "ünï"])
def test_invalid_tool_name_is_a_usage_error(name: str) -> None:
    with pytest.raises(UsageError, match="invalid tool name"):
        tool(name=name)(noop)


def test_name_of_64_characters_is_accepted() -> None:
    assert tool(name="x" * 64)(noop).descriptor.name == "x" * 64


def test_lambda_needs_an_explicit_name() -> None:
    with pytest.raises(UsageError, match="invalid tool name"):
        tool(lambda: None)
