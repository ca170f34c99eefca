"""Content parts of a user message: text and images (docs/images.md).

A user message is a ``str`` or a sequence of parts, ``Text(...)`` and ``Image(...)``::

    [Text("What is in this picture?"), Image(url="https://example.com/cat.png")]
    [Text("And this one?"), Image(data=png_bytes)]  # media type sniffed from the bytes

An image is a URL (``http``/``https``; stored and sent as the URL) or its bytes (PNG, JPEG, GIF or
WebP, the formats both OpenAI and Anthropic accept). The transcript keeps a message with images
as one user row: its ``content`` is a text-only rendering (images as ``[image …]`` markers, what
memory, curation and ``runs show`` read) and ``meta["parts"]`` holds the parts themselves, image
bytes base64-encoded with their SHA-256. The bytes of one message are capped
(``Limits.max_image_bytes``): a message over the cap is refused with
:class:`~reverie.errors.ImageTooLarge` before anything is written.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

from reverie.errors import ImageTooLarge, UsageError

__all__ = [
    "IMAGE_MEDIA_TYPES",
    "MAX_IMAGE_URL_CHARS",
    "PARTS_META_KEY",
    "ContentPart",
    "Image",
    "Text",
    "UserContent",
    "check_parts",
    "has_images",
    "image_bytes",
    "parse_data_url",
    "parts_entry",
    "parts_from_meta",
    "parts_meta",
    "render_text",
    "sniff_media_type",
    "user_parts",
]

IMAGE_MEDIA_TYPES: Final = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The image formats reverie accepts (the ones every supported provider takes)."""
MAX_IMAGE_URL_CHARS: Final = 8192
"""Longest image URL accepted (a data URL is decoded into bytes first, so it is not bound by it)."""
PARTS_META_KEY: Final = "parts"
"""``TranscriptItem.meta`` key holding a message's content parts."""


@dataclass(frozen=True, slots=True)
class Text:
    """A text part of a user message."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise UsageError("Text(...) takes a string")


@dataclass(frozen=True, slots=True, kw_only=True)
class Image:
    """An image part of a user message: a URL, or the image's bytes.

    Example::

        Image(url="https://example.com/cat.png")
        Image(data=Path("cat.png").read_bytes())              # media type sniffed
        Image(data=raw, media_type="image/jpeg")

    Raises:
        UsageError: neither or both of ``url`` and ``data``; a URL that is not ``http(s)`` or is
            longer than :data:`MAX_IMAGE_URL_CHARS`; bytes that are not PNG, JPEG, GIF or WebP
            by their signature (magic number), or a ``media_type`` that is not one of those or
            not the one the bytes are.
    """

    url: str | None = None
    """An ``http``/``https`` URL the provider fetches (stored as the URL, never downloaded)."""
    data: bytes | None = field(default=None, repr=False)
    """The image itself (left out of the repr: it can be megabytes)."""
    media_type: str | None = None
    """``image/png``, ``image/jpeg``, ``image/gif`` or ``image/webp``; default sniffed from
    ``data``, and when given it must be what the bytes are. Ignored for a URL."""

    def __post_init__(self) -> None:
        if (self.url is None) == (self.data is None):
            raise UsageError("Image(...) takes exactly one of url= and data=")
        if self.url is not None:
            _check_url(self.url)
            return
        if not isinstance(self.data, bytes | bytearray | memoryview):
            raise UsageError("Image(data=...) takes bytes")
        data = bytes(self.data)
        object.__setattr__(self, "data", data)
        sniffed = sniff_media_type(data)
        declared = self.media_type
        if sniffed is not None and declared is not None and declared != sniffed:
            # The providers check the bytes against the type: refuse now, not at the API.
            raise UsageError(f"Image(data=...) holds {sniffed} bytes, not {declared}")
        if declared is not None and declared not in IMAGE_MEDIA_TYPES:
            raise UsageError(
                f"Image media_type {declared!r} is not supported; use one of "
                f"{', '.join(IMAGE_MEDIA_TYPES)}"
            )
        if sniffed is None:
            # Every accepted format opens with its signature (magic number): bytes without one
            # are not an image of that format, whatever they are said to be.
            if declared is not None:
                raise UsageError(
                    f"Image(data=...) is said to be {declared}, but its bytes do not start "
                    f"with the {declared} signature: they are not such an image"
                )
            raise UsageError("Image(data=...) is not a PNG, JPEG, GIF or WebP image")
        media_type = sniffed
        object.__setattr__(self, "media_type", media_type)

    @property
    def size(self) -> int:
        """Bytes of ``data`` (0 for a URL)."""
        return len(self.data) if self.data is not None else 0

    @property
    def sha256(self) -> str | None:
        """Hex SHA-256 of ``data`` (``None`` for a URL)."""
        return hashlib.sha256(self.data).hexdigest() if self.data is not None else None

    def base64(self) -> str:
        """``data`` base64-encoded (empty for a URL)."""
        return base64.b64encode(self.data).decode("ascii") if self.data is not None else ""

    def data_url(self) -> str:
        """A ``data:`` URL of the bytes (or the URL itself), as Chat Completions takes it."""
        if self.url is not None:
            return self.url
        return f"data:{self.media_type};base64,{self.base64()}"


ContentPart = Text | Image
"""One part of a user message."""
UserContent = str | Sequence[ContentPart]
"""What ``Runtime.run``/``start`` and ``RunHandle.steer``/``follow_up`` take as the message."""


def sniff_media_type(data: bytes) -> str | None:
    """The image format of ``data`` from its first bytes, or ``None`` if it is none we take."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _check_url(url: object) -> None:
    if not isinstance(url, str):
        raise UsageError("Image(url=...) takes a string")
    if len(url) > MAX_IMAGE_URL_CHARS:
        raise UsageError(f"an image URL is limited to {MAX_IMAGE_URL_CHARS} characters")
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
        raise UsageError(
            "an image URL must be http:// or https:// (pass the bytes as Image(data=...) "
            "instead of a data: or file: URL)"
        )


def parse_data_url(url: str) -> Image:
    """An image from a URL: ``data:image/…;base64,…`` is decoded into bytes, else kept as a URL.

    Raises:
        UsageError: a malformed data URL, an unsupported scheme or format, or data whose bytes
            are not the format the URL names (checked by their signature).
    """
    if not url.startswith("data:"):
        return Image(url=url)
    header, sep, payload = url[5:].partition(",")
    media_type, _, encoding = header.partition(";")
    if not sep or encoding != "base64":
        raise UsageError("an image data URL must be data:<media type>;base64,<data>")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise UsageError("an image data URL does not hold valid base64") from None
    sniffed = sniff_media_type(data)
    if media_type and media_type in IMAGE_MEDIA_TYPES and sniffed != media_type:
        # Checked against the bytes' signature here, at the door: a provider would refuse it
        # after a model call was paid for.
        actual = f"{sniffed} bytes" if sniffed else "not a PNG, JPEG, GIF or WebP image"
        raise UsageError(f"the data URL says {media_type}, but its data is {actual}")
    return Image(data=data, media_type=media_type or None)


def user_parts(message: UserContent) -> tuple[ContentPart, ...]:
    """``message`` as parts (a string is one text part).

    Raises:
        UsageError: an element is not a ``Text`` or an ``Image``, or there is no part at all.
    """
    if isinstance(message, str):
        return (Text(message),)
    if isinstance(message, bytes | bytearray | Mapping) or not isinstance(message, Sequence):
        raise UsageError("a message is a str or a sequence of reverie.Text and reverie.Image parts")
    parts: tuple[ContentPart, ...] = ()
    for part in message:
        if not isinstance(part, Text | Image):
            raise UsageError(
                f"a message part must be reverie.Text or reverie.Image, not {type(part).__name__}"
            )
        parts += (part,)
    if not parts:
        raise UsageError("a message needs at least one part")
    return parts


def has_images(parts: Sequence[ContentPart]) -> bool:
    """Whether any part is an image."""
    return any(isinstance(p, Image) for p in parts)


def image_bytes(parts: Sequence[ContentPart]) -> int:
    """Total bytes of the images given as data (URLs count nothing)."""
    return sum(p.size for p in parts if isinstance(p, Image))


def check_parts(parts: Sequence[ContentPart], *, max_image_bytes: int) -> None:
    """Refuse a message whose image bytes exceed ``max_image_bytes``.

    Raises:
        ImageTooLarge: the images of the message hold more than ``max_image_bytes`` bytes.
    """
    size = image_bytes(parts)
    if size > max_image_bytes:
        raise ImageTooLarge(size, max_image_bytes)


def render_text(parts: Sequence[ContentPart]) -> str:
    """The text-only form of a message: its text, each image as an ``[image …]`` marker.

    What the transcript row's ``content`` holds, so text-only readers (memory, curation, the
    CLI) see the message without its bytes.
    """
    pieces: list[str] = []
    for part in parts:
        if isinstance(part, Text):
            if part.text:
                pieces.append(part.text)
        elif part.url is not None:
            pieces.append(f"[image {part.url}]")
        else:
            pieces.append(f"[image {part.media_type}, {part.size} bytes]")
    return "\n".join(pieces)


def parts_meta(parts: Sequence[ContentPart]) -> dict[str, Any]:
    """The ``meta`` entries a row with these parts carries (none for text-only parts)."""
    if not has_images(parts):
        return {}
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, Text):
            out.append({"type": "text", "text": part.text})
        elif part.url is not None:
            out.append({"type": "image", "url": part.url})
        else:
            out.append(
                {
                    "type": "image",
                    "media_type": part.media_type,
                    "data": part.base64(),
                    "sha256": part.sha256,
                }
            )
    return {PARTS_META_KEY: out}


def parts_entry(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """The parts entry of a row's ``meta`` or a queued input's payload (``{}`` when none)."""
    parts = mapping.get(PARTS_META_KEY)
    return {PARTS_META_KEY: parts} if parts else {}


def parts_from_meta(meta: Mapping[str, Any]) -> tuple[ContentPart, ...]:
    """Inverse of :func:`parts_meta`: a row's parts, or ``()`` for a text-only row.

    Raises:
        UsageError: the stored parts are malformed (a row not written by :func:`parts_meta`).
    """
    raw = meta.get(PARTS_META_KEY)
    if not raw:
        return ()
    parts: list[ContentPart] = []
    for entry in raw:
        kind = entry.get("type")
        if kind == "text":
            parts.append(Text(str(entry.get("text", ""))))
        elif kind == "image" and "url" in entry:
            parts.append(Image(url=entry["url"]))
        elif kind == "image":
            data = base64.b64decode(entry["data"], validate=True)
            if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
                raise UsageError("a stored image does not match its SHA-256")
            parts.append(Image(data=data, media_type=entry["media_type"]))
        else:
            raise UsageError(f"a stored message part has unknown type {kind!r}")
    return tuple(parts)
