"""The providers' rules for image input, enforced by the fake servers.

The real APIs answer HTTP 400 to an image part they cannot take; the fakes check the same, so a
test that makes reverie send a malformed image fails the way it would against the provider:

Chat Completions (:func:`check_chat_images`)
    An ``image_url`` part only in a ``user`` message; ``image_url`` is an object with a string
    ``url``, an ``http(s)`` URL or ``data:image/<png|jpeg|gif|webp>;base64,<data>`` whose data is
    valid base64 of an image of that format; ``detail``, if given, is ``auto``, ``low`` or
    ``high``. A model without vision refuses every image part with OpenAI's message ("Invalid
    content type. image_url is only supported by certain models.").
Messages API (:func:`check_anthropic_images`)
    An ``image`` block only in a ``user`` message; its ``source`` is ``{"type": "base64",
    "media_type", "data"}`` (a supported format, valid base64, the bytes of that format, at most
    5 MB) or ``{"type": "url", "url"}`` (``http(s)``). A model without vision refuses it as
    compatible servers do ("this model does not support image input").
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from reverie.core.content import IMAGE_MEDIA_TYPES, sniff_media_type

__all__ = ["ImageRefusal", "check_anthropic_images", "check_chat_images", "tiny_png"]

OPENAI_NO_VISION: Final = "Invalid content type. image_url is only supported by certain models."
"""What OpenAI answers when a model without vision gets an image part."""
ANTHROPIC_NO_VISION: Final = "this model does not support image input"
"""What Anthropic-compatible servers answer for a model without vision."""
ANTHROPIC_MAX_IMAGE_BYTES: Final = 5 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ImageRefusal:
    """Why a request's image was refused: the 400's message and the field at fault."""

    message: str
    param: str | None = None


def _decoded(data: object) -> bytes | None:
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _is_http(url: object) -> bool:
    return isinstance(url, str) and url.startswith(("http://", "https://"))


def _check_data(media_type: str, data: object) -> str | None:
    """What is wrong with base64 ``data`` said to be ``media_type`` (``None``: nothing)."""
    if media_type not in IMAGE_MEDIA_TYPES:
        return (
            f"unsupported image media type {media_type!r}; use one of "
            f"{', '.join(IMAGE_MEDIA_TYPES)}"
        )
    raw = _decoded(data)
    if raw is None or not raw:
        return "the image data is not valid base64"
    if sniff_media_type(raw) != media_type:
        return f"the image data does not match the media type {media_type!r}"
    return None


def check_chat_images(messages: Any, *, vision: bool = True) -> ImageRefusal | None:
    """The first image rule a Chat Completions ``messages`` array breaks, if any."""
    if not isinstance(messages, list):
        return None
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "image_url":
                continue
            where = f"messages.[{i}].content.[{j}]"
            if not vision:
                return ImageRefusal(OPENAI_NO_VISION, f"{where}.type")
            if message.get("role") != "user":
                return ImageRefusal(
                    "Image URLs are only allowed for messages with role 'user'", f"{where}.type"
                )
            refusal = _chat_image(part.get("image_url"), where)
            if refusal is not None:
                return refusal
    return None


def _chat_image(image_url: object, where: str) -> ImageRefusal | None:
    if not isinstance(image_url, Mapping) or not isinstance(image_url.get("url"), str):
        return ImageRefusal("image_url must be an object with a string url", f"{where}.image_url")
    if image_url.get("detail", "auto") not in ("auto", "low", "high"):
        return ImageRefusal("image_url.detail must be auto, low or high", f"{where}.image_url")
    url: str = image_url["url"]
    if _is_http(url):
        return None
    if not url.startswith("data:") or ";base64," not in url:
        return ImageRefusal("Invalid image URL: send an http(s) URL or a base64 data URL", where)
    media_type, _, data = url[5:].partition(";base64,")
    problem = _check_data(media_type, data)
    return None if problem is None else ImageRefusal(problem, f"{where}.image_url.url")


def check_anthropic_images(messages: Any, *, vision: bool = True) -> ImageRefusal | None:
    """The first image rule a Messages API ``messages`` array breaks, if any."""
    if not isinstance(messages, list):
        return None
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            if not isinstance(block, Mapping) or block.get("type") != "image":
                continue
            where = f"messages.{i}.content.{j}"
            if not vision:
                return ImageRefusal(ANTHROPIC_NO_VISION)
            if message.get("role") != "user":
                return ImageRefusal(f"{where}: image blocks are only allowed in user messages")
            problem = _anthropic_source(block.get("source"))
            if problem is not None:
                return ImageRefusal(f"{where}.source: {problem}")
    return None


def _anthropic_source(source: object) -> str | None:
    if not isinstance(source, Mapping):
        return "Field required"
    kind = source.get("type")
    if kind == "url":
        return None if _is_http(source.get("url")) else "url must be an http(s) URL"
    if kind != "base64":
        return f"unsupported source type {kind!r}; use base64 or url"
    media_type = source.get("media_type")
    problem = _check_data(str(media_type), source.get("data"))
    if problem is not None:
        return problem
    raw = _decoded(source.get("data")) or b""
    if len(raw) > ANTHROPIC_MAX_IMAGE_BYTES:
        return f"image exceeds {ANTHROPIC_MAX_IMAGE_BYTES} bytes maximum"
    return None


def tiny_png(padding: int = 0) -> bytes:
    """A valid 1x1 PNG, ``padding`` bytes larger (in a text chunk): an image for tests."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    extra = chunk(b"tEXt", b"pad\x00" + b"." * padding) if padding else b""
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + extra
        + chunk(b"IDAT", zlib.compress(b"\x00\x00"))
        + chunk(b"IEND", b"")
    )
