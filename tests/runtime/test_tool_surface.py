"""A run's tool surface (its descriptors and their digest) is computed once per tool list."""

from __future__ import annotations

from reverie import tool
from reverie.runtime.host import surface_of


@tool(effects=set())
def first(n: int) -> int:
    """Return n."""
    return n


@tool(effects=set())
def second(text: str) -> str:
    """Return the text."""
    return text


def test_the_same_tools_give_the_same_surface_without_digesting_them_again() -> None:
    surface = surface_of([first, second])
    again = surface_of([first, second])
    assert again is surface
    assert again.names() == ("first", "second")


def test_a_surface_follows_its_descriptors_not_a_list_seen_before() -> None:
    seen = surface_of([first, second])

    @tool(effects=set(), name="first")
    def other_first(n: str) -> str:  # same name, other parameters
        """Return n."""
        return n

    changed = surface_of([other_first, second])
    reordered = surface_of([second, other_first])
    assert changed.version != seen.version
    assert changed.get("first") is other_first.descriptor
    assert reordered.version not in (seen.version, changed.version)
