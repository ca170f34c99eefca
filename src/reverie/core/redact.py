"""Secret hygiene for text that is shown, logged, traced or stored.

Two tools, both pure functions of their input:

- :func:`mask_url` / :func:`mask_urls` hide the userinfo of a URL
  (``http://user:secret@host/v1`` reads ``http://***@host/v1``): a password in an endpoint or
  store URL must not reach an error message, a ``repr``, a log line or a span.
- :func:`redact` masks known secret values (configured credentials) in text that came from
  somewhere else, typically a remote server quoting a credential back in its error message.
- :func:`scrub` makes a remote server's text a bounded one-line summary without filesystem
  paths (upstream servers quote their install paths and whole validation dumps).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable

MASK = "***"
"""What a masked secret reads as."""

MIN_SECRET_CHARS = 4
"""Shorter values are not masked: replacing every ``a`` in a text would hide nothing useful."""

# scheme://userinfo@ — userinfo is everything up to the last "@" before the host part, with no
# "/", "?", "#" or whitespace in it (RFC 3986 §3.2.1 allows ":" and percent-escapes).
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<userinfo>[^\s/?#@]+)@")


def mask_url(url: str) -> str:
    """``url`` with its userinfo (user and password) replaced by ``***``.

    Example::

        mask_url("http://user:secret@host/v1") == "http://***@host/v1"
    """
    return _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", url)


def mask_urls(text: str) -> str:
    """Every URL in ``text`` with its userinfo masked (the rest of the text unchanged)."""
    if "@" not in text:
        return text  # the common case: nothing to scan
    return _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by ``***``, URLs' userinfo too.

    Secrets shorter than :data:`MIN_SECRET_CHARS` are ignored. Longer secrets are masked first,
    so a secret that contains another is masked whole.
    """
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return mask_urls(text)


def split_userinfo(url: str) -> tuple[str, str | None]:
    """``url`` without its userinfo, and the HTTP Basic ``Authorization`` value it stood for.

    An HTTP client given ``http://user:pw@host`` sends those credentials as Basic auth, and
    also logs the URL, password and all. Sending the header explicitly with the bare URL
    keeps the behaviour and keeps the password out of the client's logs.
    """
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    host = parts.netloc.rsplit("@", 1)[1]
    bare = urlunsplit(parts._replace(netloc=host))
    if parts.username is None:
        return bare, None
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return bare, "Basic " + base64.b64encode(pair.encode()).decode("ascii")


def url_secrets(url: str | None) -> tuple[str, ...]:
    """The password embedded in ``url``, as values :func:`redact` should mask.

    A server quoting a URL back may decode it, and one quoting the request's headers back
    shows the Basic credentials, so all three forms are returned. The user name is not a
    secret (and masking a common word like ``postgres`` everywhere would hide too much).
    """
    if not url:
        return ()
    from urllib.parse import unquote, urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return ()
    if not parts.password:
        return ()
    basic = split_userinfo(url)[1] or ""
    return tuple(sorted({parts.password, unquote(parts.password), basic.removeprefix("Basic ")}))


__all__ = [
    "MASK",
    "MIN_SECRET_CHARS",
    "mask_url",
    "mask_urls",
    "redact",
    "split_userinfo",
    "url_secrets",
]


_PATH = re.compile(
    r"(?<![\w:/.])(?:/[\w.@+~-]+){2,}/?"  # /usr/lib/python3/site-packages/...
    r"|\b[A-Za-z]:\\(?:[\w.@+~ -]+\\)*[\w.@+~-]*"  # C:\Users\...
)
"""A filesystem path in a server's text (a URL's path is not one: it follows its host)."""

PATH_MASK = "<path>"
"""What a scrubbed path reads as."""


def scrub(text: str, limit: int) -> str:
    """``text`` on one line, filesystem paths replaced by ``<path>``, at most ``limit`` chars."""
    text = _PATH.sub(PATH_MASK, " ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"
