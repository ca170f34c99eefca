"""``reverie serve``'s settings: ``[serve]`` and the bearer tokens of ``[auth.tokens]``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from pydantic import Field, ValidationError

from reverie.config.problems import config_error, dotted, problem_of
from reverie.config.schema import ENV_NAME, ReverieConfig, Section
from reverie.core.scope import Scope

__all__ = ["ServeConfig", "TokenConfig", "auth_tokens", "serve_settings"]


class ServeConfig(Section):
    """``[serve]``: where ``reverie serve`` listens (``--host``/``--port`` win)."""

    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=8400, ge=0, le=65535)
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1)
    """Larger request bodies are answered 413."""
    cors_origins: list[str] = Field(default_factory=list)
    """Browser origins allowed to call the API (``"*"``: any); empty: no CORS."""
    shutdown_grace_s: float = Field(default=5.0, ge=0)
    """On SIGTERM, how long open streams may go on before their runs are cancelled."""
    console: bool = True
    """Serve the operator console at ``/console`` (docs/console.md)."""
    console_session_ttl_s: float = Field(default=8 * 3600.0, gt=0)
    """How long a console login lasts."""


class TokenConfig(Section):
    """One entry of ``[auth.tokens]``: the scope a bearer token acts for.

    The entry's key is the token itself, unless ``token_env`` names the environment variable
    that holds it (then the key is only a label)::

        [auth.tokens]
        "tok-3f9a…" = { tenant = "acme", user = "ana" }
        bob = { token_env = "API_TOKEN_BOB", tenant = "acme", user = "bob" }
    """

    tenant: str = Field(min_length=1)
    user: str = Field(min_length=1)
    token_env: str | None = Field(default=None, pattern=ENV_NAME)
    """The *name* of the environment variable holding the token; the key is then a label."""


_TOKEN_FIX: Final = (
    'write each token as "<token>" = { tenant = "acme", user = "ana" }, or keep the secret out '
    'of the file: label = { token_env = "API_TOKEN_ANA", tenant = "acme", user = "ana" }'
)
_TOKEN_FIELD_FIXES: Final[Mapping[str, str]] = {
    "tenant": 'set tenant = "acme" (a non-empty string)',
    "user": 'set user = "ana" (a non-empty string)',
    "token_env": (
        'set token_env = "VARIABLE_NAME": the name of the environment variable that holds the '
        "token, never the token itself"
    ),
}


_SERVE_FIXES = {
    "host": 'set host = "127.0.0.1" (or "0.0.0.0" to listen on every interface)',
    "port": "set port = 8400 (0 to 65535)",
    "max_body_bytes": "set max_body_bytes = 4194304 (bytes, at least 1)",
    "cors_origins": 'set cors_origins = ["https://app.example.com"] (a list of origins)',
    "shutdown_grace_s": "set shutdown_grace_s = 5 (seconds, 0 or more)",
    "console": "set console = true or false",
    "console_session_ttl_s": "set console_session_ttl_s = 28800 (seconds, above 0)",
}


def serve_settings(config: ReverieConfig) -> ServeConfig:
    """``[serve]``, validated.

    Raises:
        ConfigError: A key of ``[serve]`` is invalid (names the file and the key).
    """
    try:
        return ServeConfig.model_validate(config.serve)
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(p) for p in err["loc"]) or "(table)"
        if err["type"] == "extra_forbidden":
            problem = "unknown key"
            fix = (
                "remove it; [serve] takes host, port, max_body_bytes, cors_origins, "
                "shutdown_grace_s, console and console_session_ttl_s"
            )
        else:
            msg = str(err["msg"])
            problem = msg[:1].lower() + msg[1:]
            fix = _SERVE_FIXES.get(field.split(".")[0], _SERVE_FIXES["host"])
        raise config_error(config.source, f"serve.{field}", problem, fix) from None


def auth_tokens(
    config: ReverieConfig, environ: Mapping[str, str] | None = None
) -> dict[str, Scope]:
    """The bearer tokens of ``[auth.tokens]`` and the scope each acts for.

    Tokens given by ``token_env`` are read from ``environ`` (default: the process environment)
    now. Messages never quote a token: an entry whose key is a token is named by its position
    (``auth.tokens.<entry 2>``), an entry with ``token_env`` by its label.

    Raises:
        ConfigError: The table is malformed, an entry lacks ``tenant`` or ``user``, a
            ``token_env`` variable is not set, or two entries have the same token.
    """
    env = os.environ if environ is None else environ
    source = config.source
    unknown = sorted(set(config.auth) - {"tokens"})
    if unknown:
        raise config_error(
            source, dotted(["auth", unknown[0]]), "unknown key", "remove it; [auth] takes tokens"
        )
    table = config.auth.get("tokens", {})
    if not isinstance(table, dict):
        raise config_error(source, "auth.tokens", "not a table", _TOKEN_FIX)
    tokens: dict[str, Scope] = {}
    owners: dict[str, str] = {}
    for index, (key, entry) in enumerate(table.items(), start=1):
        labelled = isinstance(entry, dict) and "token_env" in entry
        # The key of an inline entry is the secret itself: never print it.
        name = dotted(["auth", "tokens", key]) if labelled else f"auth.tokens.<entry {index}>"
        if not isinstance(entry, dict):
            raise config_error(source, name, "not a table", _TOKEN_FIX)
        try:
            spec = TokenConfig.model_validate(entry)
        except ValidationError as exc:
            err = exc.errors(include_url=False, include_input=False)[0]
            field = ".".join(str(p) for p in err["loc"])
            problem = problem_of(err)
            fix = _TOKEN_FIELD_FIXES.get(field, "an entry takes tenant, user and token_env")
            raise config_error(source, f"{name}.{field}", problem, fix) from None
        if spec.token_env is not None:
            token = env.get(spec.token_env, "").strip()
            if not token:
                raise config_error(
                    source,
                    f"{name}.token_env",
                    f"the environment variable {spec.token_env} is not set",
                    f"export {spec.token_env}=<token> before starting reverie serve",
                )
        else:
            token = key
            if not token.strip() or token != token.strip() or any(c.isspace() for c in token):
                raise config_error(
                    source, name, "a token cannot be empty or contain whitespace", _TOKEN_FIX
                )
        if token in tokens:
            raise config_error(
                source,
                name,
                f"the same token is already given by {owners[token]}",
                "give every caller a token of their own",
            )
        tokens[token] = Scope(tenant=spec.tenant, user=spec.user)
        owners[token] = name
    return tokens
