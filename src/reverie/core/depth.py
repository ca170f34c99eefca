"""Bounded nesting: the one limit and the one check for data that came from outside.

Untrusted data (a model's tool-call arguments, an HTTP body, an MCP result, a memory row) may
nest arrays and objects arbitrarily deep; every recursive walk of it (canonical JSON, schema
validation, redaction, JSON encoding for spans and the store) would then end in
``RecursionError``. So each boundary checks the nesting with :func:`check_depth` against
:data:`MAX_DEPTH` and refuses deeper data with :class:`~reverie.errors.NestedTooDeep`, which
that boundary turns into its own typed answer (a tool error the model sees, an HTTP 400, a
dropped row). The check itself is iterative, so it is safe at any depth.

Walkers of data the library already admitted (canonical JSON, the secret-masking walker) bound
their own walk at :data:`WALK_DEPTH`: admitted data plus the few levels of envelope the library
wraps around it, so they never fail on admitted data and never recurse without bound on data
built in code that no boundary checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from reverie.errors import NestedTooDeep

__all__ = ["MAX_DEPTH", "WALK_DEPTH", "check_depth", "nesting_depth"]

MAX_DEPTH: Final = 64
"""Deepest nesting of arrays and objects accepted from outside, at every boundary. No request,
tool call or result the library serves needs more; Python's recursion gives out near 1,000."""

WALK_DEPTH: Final = 4 * MAX_DEPTH
"""Deepest nesting a walker of admitted data takes before it refuses (admitted data plus the
envelopes around it, well inside Python's recursion limit)."""


def nesting_depth(value: Any, *, stop_after: int | None = None) -> int:
    """How deeply ``value`` nests mappings, lists and tuples (a scalar is 0, ``[]`` is 1).

    Walked without recursion. With ``stop_after``, the walk stops as soon as it is passed and
    returns ``stop_after + 1`` (a check need not measure a hostile value to its bottom).
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth > deepest:
            deepest = depth
            if stop_after is not None and deepest > stop_after:
                return deepest
        for child in children:
            if isinstance(child, Mapping | list | tuple):
                stack.append((child, depth + 1))
    return deepest


def check_depth(value: Any, *, what: str, limit: int = MAX_DEPTH) -> None:
    """Refuse ``value`` if it nests dicts, lists and tuples deeper than ``limit``.

    Args:
        value: The data, as parsed (JSON values, or dicts/lists/tuples built from them).
        what: What it is, for the message (``"the request body"``); never the data itself.
        limit: The deepest nesting allowed (default :data:`MAX_DEPTH`).

    Raises:
        NestedTooDeep: it nests deeper than ``limit``.
    """
    if nesting_depth(value, stop_after=limit) > limit:
        raise NestedTooDeep(what, limit)
