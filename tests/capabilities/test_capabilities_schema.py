"""DESIGN §9.1: a tool's schema and description come from its type hints and docstring."""

from __future__ import annotations

import enum
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

from reverie.capabilities import Tool, ToolContext, parse_docstring, tool
from reverie.core.capability import CallCompleted
from reverie.errors import UsageError


class Address(BaseModel):
    """A postal address."""

    street: str
    number: int = 1


class Point(TypedDict):
    x: int
    y: int


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@tool
def search(query: str, limit: int = 10, exact: bool = False) -> list[str]:
    """Search the catalogue.

    Longer explanation that is not part of the description.

    Args:
        query: What to look for.
        limit (int): At most this many results,
            counted after de-duplication.
        exact: Match the whole query.

    Returns:
        Matching titles.
    """
    return [query] * limit


def props(t: Tool[Any, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = dict(t.descriptor.parameters["properties"])
    return properties


def test_schema_is_a_closed_json_object_schema_from_the_type_hints() -> None:
    schema = search.descriptor.parameters
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["query"]
    assert list(schema["properties"]) == ["query", "limit", "exact"]
    assert props(search)["query"]["type"] == "string"
    assert props(search)["limit"]["type"] == "integer"
    assert props(search)["exact"]["type"] == "boolean"
    assert "title" not in schema


def test_schema_of_a_tool_without_arguments_still_has_properties_and_required() -> None:
    @tool
    def now() -> str:
        """The time."""
        return "noon"

    assert now.descriptor.parameters == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_description_is_the_docstrings_first_paragraph() -> None:
    assert search.descriptor.description == "Search the catalogue."
    assert search.descriptor.name == "search"


def test_args_section_describes_each_parameter() -> None:
    assert props(search)["query"]["description"] == "What to look for."
    assert props(search)["limit"]["description"] == (
        "At most this many results, counted after de-duplication."
    )
    assert props(search)["exact"]["description"] == "Match the whole query."


def test_google_docstring_without_blank_line_before_args_stops_the_summary() -> None:
    doc = parse_docstring("Do it.\nArgs:\n    x: The x.\n    *rest: Ignored.\n")
    assert doc.summary == "Do it."
    assert doc.params == {"x": "The x.", "rest": "Ignored."}


def test_defaults_make_arguments_optional_and_appear_in_the_schema() -> None:
    assert props(search)["limit"]["default"] == 10
    assert props(search)["exact"]["default"] is False
    assert "limit" not in search.descriptor.parameters["required"]


def test_optional_parameter_is_nullable() -> None:
    @tool
    def greet(name: str | None = None) -> str:
        """Greet."""
        return f"hi {name}"

    assert props(greet)["name"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert greet.descriptor.parameters["required"] == []


def test_literal_parameter_is_an_enum_of_its_values() -> None:
    @tool
    def sort(order: Literal["asc", "desc"]) -> str:
        """Sort."""
        return order

    assert props(sort)["order"]["enum"] == ["asc", "desc"]


async def test_enum_parameter_is_validated_from_its_value_and_passed_as_a_member(
    ctx: ToolContext,
) -> None:
    @tool
    def paint(color: Color) -> str:
        """Paint."""
        assert isinstance(color, Color)
        return color.name

    assert paint.descriptor.parameters["$defs"]["Color"]["enum"] == ["red", "blue"]
    assert await paint.invoke({"color": "blue"}, ctx) == CallCompleted(output="BLUE")


async def test_pydantic_model_parameter_is_in_the_schema_and_passed_as_an_instance(
    ctx: ToolContext,
) -> None:
    @tool
    def mail(to: Address) -> str:
        """Mail a letter."""
        assert isinstance(to, Address)
        return f"{to.street} {to.number}"

    schema = mail.descriptor.parameters
    assert props(mail)["to"] == {"$ref": "#/$defs/Address"}
    assert schema["$defs"]["Address"]["required"] == ["street"]
    assert await mail.invoke({"to": {"street": "Main"}}, ctx) == CallCompleted(output="Main 1")


async def test_typed_dict_list_and_dict_parameters(ctx: ToolContext) -> None:
    @tool
    def plot(points: list[Point], labels: dict[str, str]) -> int:
        """Plot points."""
        return sum(p["x"] + p["y"] for p in points) + len(labels)

    assert props(plot)["points"]["type"] == "array"
    assert props(plot)["labels"]["type"] == "object"
    outcome = await plot.invoke({"points": [{"x": 1, "y": 2}], "labels": {"a": "b"}}, ctx)
    assert outcome == CallCompleted(output="4")


async def test_tool_context_is_excluded_from_the_schema_and_injected_by_the_host(
    ctx: ToolContext,
) -> None:
    @tool
    def whoami(greeting: str, context: ToolContext) -> str:
        """Say who the run acts for."""
        return f"{greeting} {context.scope.user} in {context.run_id}"

    assert list(props(whoami)) == ["greeting"]
    assert whoami.descriptor.parameters["required"] == ["greeting"]
    assert await whoami.invoke({"greeting": "hi"}, ctx) == CallCompleted(output="hi ana in run-1")


async def test_model_cannot_set_the_tool_context_parameter(ctx: ToolContext) -> None:
    @tool
    def whoami(context: ToolContext) -> str:
        """Say who."""
        return context.scope.user

    forged = {"context": {"run_id": "x", "scope": {"tenant": "evil", "user": "mallory"}}}
    outcome = await whoami.invoke(forged, ctx)
    assert outcome.kind == "failed"
    assert outcome.error_kind == "input_invalid"


async def test_parameter_names_that_shadow_basemodel_attributes_work(ctx: ToolContext) -> None:
    @tool
    def dump(json: str, schema: int = 0, model_config: str = "") -> str:
        """Names pydantic models reserve."""
        return f"{json}{schema}{model_config}"

    assert list(props(dump)) == ["json", "schema", "model_config"]
    outcome = await dump.invoke({"json": "a", "schema": 1, "model_config": "c"}, ctx)
    assert outcome == CallCompleted(output="a1c")


def test_explicit_name_and_description_override_the_function() -> None:
    @tool(name="find", description="Find things.")
    def _impl(q: str) -> str:
        """Ignored."""
        return q

    assert _impl.descriptor.name == "find"
    assert _impl.descriptor.description == "Find things."


def test_var_args_cannot_be_described_and_are_rejected_at_decoration() -> None:
    def spread(*items: int) -> int:
        return sum(items)

    with pytest.raises(UsageError, match=r"\*args"):
        tool(spread)


def test_hint_pydantic_cannot_describe_is_a_usage_error_at_decoration() -> None:
    class Opaque:
        pass

    def use(thing: Opaque) -> str:
        return "x"

    use.__annotations__["thing"] = Opaque  # a resolved hint to a class pydantic cannot handle
    with pytest.raises(UsageError, match="JSON schema"):
        tool(use)
