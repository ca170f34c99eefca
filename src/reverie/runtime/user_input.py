"""User messages with content parts: checked, bounded and turned into rows or queued inputs.

``Runtime.start`` and ``Runtime.send_input`` call these; everything that reads the rows back
(``StorePrompt``) uses :func:`reverie.core.content.parts_from_meta`. A message's images are
checked against ``Limits.max_image_bytes`` here, before anything is written (docs/images.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reverie.core.content import (
    ContentPart,
    Image,
    Text,
    check_parts,
    has_images,
    parts_meta,
    render_text,
    user_parts,
)
from reverie.core.messages import Message
from reverie.core.transcript import NewItem

__all__ = ["input_payload", "is_user_content", "opening_items"]


def is_user_content(message: object) -> bool:
    """Whether ``message`` is a user message (a ``str`` or parts), not opening ``Message``\\ s."""
    if isinstance(message, str):
        return True
    return isinstance(message, Sequence) and any(isinstance(p, Text | Image) for p in message)


def _checked(message: str | Sequence[ContentPart], max_image_bytes: int) -> tuple[ContentPart, ...]:
    parts = user_parts(message)
    check_parts(parts, max_image_bytes=max_image_bytes)
    return parts


def opening_items(
    message: str | Sequence[ContentPart | Message], *, max_image_bytes: int
) -> list[NewItem]:
    """The rows a run opens with: the user message, or the given opening messages.

    Raises:
        ImageTooLarge: the message's images exceed ``max_image_bytes`` (nothing is written).
        UsageError: a part is neither ``Text`` nor ``Image``.
    """
    if isinstance(message, str):  # one text part: its text is the row, no meta
        return [NewItem(role="user", content=message)]
    messages = [m for m in message if isinstance(m, Message)]
    if len(messages) == len(message):
        for m in messages:
            check_parts(m.parts, max_image_bytes=max_image_bytes)
        return [
            NewItem(
                role=m.role,
                content=render_text(m.parts) if m.parts else m.content,
                tool_calls=m.tool_calls,
                tool_call_id=m.tool_call_id,
                name=m.name,
                meta=parts_meta(m.parts),
            )
            for m in messages
        ]
    parts = _checked(message, max_image_bytes)  # type: ignore[arg-type]
    return [NewItem(role="user", content=render_text(parts), meta=parts_meta(parts))]


def input_payload(message: str | Sequence[ContentPart], *, max_image_bytes: int) -> dict[str, Any]:
    """The queued-input payload of a steering or follow-up message.

    ``text`` is the text-only rendering (what a row's ``content`` holds); a message with images
    also carries its parts, which :func:`~reverie.core.content.parts_entry` hands to the row.

    Raises:
        ImageTooLarge: the message's images exceed ``max_image_bytes`` (nothing is queued).
    """
    if isinstance(message, str):
        return {"text": message}
    parts = _checked(message, max_image_bytes)
    payload: dict[str, Any] = {"text": render_text(parts)}
    if has_images(parts):
        payload.update(parts_meta(parts))
    return payload
