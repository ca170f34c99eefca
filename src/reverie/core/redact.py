"""Secret hygiene for text and data that are shown, logged, traced or stored.

Pure functions of their input:

- :func:`mask_url` / :func:`mask_urls` hide the userinfo of a URL
  (``http://user:secret@host/v1`` reads ``http://***@host/v1``): a password in an endpoint or
  store URL must not reach an error message, a ``repr``, a log line or a span.
- :func:`redact` masks known secret values (configured credentials) in text that came from
  somewhere else, typically a remote server quoting a credential back in its error message.
- :func:`is_secret_name` is **the** rule for "this name holds a secret" (an argument, a JSON
  key, an environment variable); :func:`mask_secrets` is the one walker that applies it to data,
  descending into every mapping, list and tuple (gate arguments, spans, the console);
  :func:`environ_secrets` applies it to the environment.
- :func:`scrub` makes a remote server's text a bounded one-line summary without filesystem
  paths (upstream servers quote their install paths and whole validation dumps).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from reverie.core.depth import WALK_DEPTH
from reverie.errors import NestedTooDeep

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


REDACTED: Final = "[redacted]"
"""What :func:`mask_secrets` puts in place of a secret-named value."""

MIN_ENV_SECRET_CHARS: Final = 8
"""Environment values shorter than this are taken for settings (``"1"``, ``"info"``), not
credentials: masking them everywhere would garble ordinary text."""

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_SECRET_WORDS: Final = frozenset(
    {
        "pass",
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "secret",
        "secrets",
        "token",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "cookie",
        "apikey",
        "sessionid",
    }
)
"""Words that make a name secret wherever they stand in it (``db_password``, ``X-Auth``)."""
_SECRET_PARTS: Final = ("password", "passwd", "secret", "apikey", "credential")
"""Pieces that make a name secret even run together with other words (``dbpassword``)."""
_KEY_WORDS: Final = frozenset({"key", "keys"})


def is_secret_name(name: object) -> bool:
    """Whether a value named ``name`` holds a secret: the one rule, for argument names, JSON
    keys and environment variables alike.

    The name is split into words (``snake_case``, ``kebab-case``, ``camelCase``,
    ``UPPER_CASE``). It is secret when a word is one of password, passwd, passphrase, pass,
    pwd, secret(s), token (``access_token``, ``authToken``), credential(s), auth,
    authorization, cookie, apikey or sessionid; when a word contains password, passwd, secret,
    apikey or credential; or when it ends in ``key`` after another word (``api_key``,
    ``OPENAI_API_KEY``, ``privateKey``, ``ssh_key``). A bare ``key``, ``author``,
    ``max_tokens`` or ``keyboard`` is not.
    """
    words = [w.lower() for w in _WORD.findall(str(name))]
    if not words:
        return False
    for word in words:
        if word in _SECRET_WORDS or word.endswith("token"):
            return True
        if any(part in word for part in _SECRET_PARTS):
            return True
    return len(words) > 1 and words[-1] in _KEY_WORDS


def mask_secrets(value: Any, *, mask: str = REDACTED) -> Any:
    """``value`` with the value under every secret-named key (:func:`is_secret_name`) replaced
    by ``mask``, in every mapping however deep, inside lists and tuples too.

    Returns new containers (mappings become ``dict``, tuples stay tuples, lists lists); other
    values are returned as they are. ``value`` is not changed.

    Raises:
        NestedTooDeep: ``value`` nests deeper than :data:`~reverie.core.depth.WALK_DEPTH`
            (data from outside is checked against the lower boundary limit before it gets
            here).
    """
    return _masked(value, mask, 0)


def _masked(value: Any, mask: str, depth: int) -> Any:
    if isinstance(value, Mapping):
        if depth >= WALK_DEPTH:
            raise NestedTooDeep("the value to mask", WALK_DEPTH)
        return {
            key: mask if is_secret_name(key) else _masked(item, mask, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        if depth >= WALK_DEPTH:
            raise NestedTooDeep("the value to mask", WALK_DEPTH)
        items = [_masked(item, mask, depth + 1) for item in value]
        return tuple(items) if isinstance(value, tuple) else items
    return value


def environ_secrets(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The values of ``environ``'s secret-named variables (:func:`is_secret_name`) long enough
    to be credentials (:data:`MIN_ENV_SECRET_CHARS`): what a process must never send out."""
    return tuple(
        value
        for name, value in environ.items()
        if len(value) >= MIN_ENV_SECRET_CHARS and is_secret_name(name)
    )


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
    "MIN_ENV_SECRET_CHARS",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "environ_secrets",
    "is_secret_name",
    "mask_secrets",
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
