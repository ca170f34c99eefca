"""Turning a tool's return value into the text the model reads (docs/tools.md).

Two steps, kept apart so MCP results (already text) can share the cap:

* :func:`serialize_output` — ``str`` as-is, ``None`` → ``""``, structured values (pydantic
  models, dataclasses, mappings, sequences, sets) → compact JSON, anything else → ``str()``.
* :func:`cap_output` — at most ``max_bytes`` UTF-8 bytes, cut on a character boundary, with a
  visible marker that says how much was dropped, so the model knows it did not see everything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pydantic_core
from pydantic import BaseModel

DEFAULT_MAX_OUTPUT_BYTES = 16_384
"""Default cap on one tool result, in UTF-8 bytes."""

_JSON_TYPES = (BaseModel, Mapping, list, tuple, set, frozenset)
_SCALARS = frozenset({int, float, bool})
"""Exact types that are never structured (a subclass takes the general path)."""


def serialize_output(value: object) -> str:
    """Render a tool's return value as text for the model.

    Args:
        value: Whatever the tool returned.

    Returns:
        The text form, not yet size-capped.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if type(value) in _SCALARS:
        return str(value)  # what the last line gives them, without the structure checks
    if _is_structured(value):
        # pydantic's serializer knows models, dataclasses, enums, datetimes, UUIDs, …; anything
        # it does not know falls back to str() instead of failing the call. NaN/inf become null
        # so the result is always valid JSON.
        return pydantic_core.to_json(value, fallback=str).decode("utf-8")
    return str(value)


def cap_output(text: str, max_bytes: int) -> str:
    """Cap ``text`` at ``max_bytes`` UTF-8 bytes, marker included.

    The cut never splits a multibyte character. When the text is cut, the result ends with
    ``"\\n…[truncated N bytes]"`` where ``N`` is the number of bytes dropped.

    Args:
        text: The full output.
        max_bytes: The cap, in UTF-8 bytes (positive).

    Returns:
        ``text`` unchanged if it fits, else a prefix of it plus the marker.
    """
    # "replace" keeps lone surrogates (possible in str from a tool) from raising here.
    data = text.encode("utf-8", errors="replace")
    if len(data) <= max_bytes:
        return data.decode("utf-8")
    # Reserve room for the widest marker this cut can need, then back up to a char boundary.
    budget = max(0, max_bytes - len(_marker(len(data)).encode("utf-8")))
    while budget > 0 and (data[budget] & 0xC0) == 0x80:
        budget -= 1
    return data[:budget].decode("utf-8") + _marker(len(data) - budget)


def render_output(value: object, max_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> str:
    """:func:`serialize_output` then :func:`cap_output`."""
    return cap_output(serialize_output(value), max_bytes)


def _marker(dropped: int) -> str:
    return f"\n…[truncated {dropped} bytes]"


def _is_structured(value: object) -> bool:
    if isinstance(value, _JSON_TYPES):
        return True
    return dataclasses.is_dataclass(value) and not isinstance(value, type)
