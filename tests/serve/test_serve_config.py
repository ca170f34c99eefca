"""``[auth.tokens]`` and ``[serve]`` in reverie.toml: tokens → scopes, secrets kept out of
messages, and tokens that may live in environment variables instead of the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from reverie import Scope
from reverie.config import auth_tokens, load_config, serve_settings
from reverie.errors import ConfigError


def config_from(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "reverie.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_inline_and_environment_tokens_map_to_their_scopes(tmp_path: Path) -> None:
    path = config_from(
        tmp_path,
        """
[auth.tokens]
"tok-inline-abc123" = { tenant = "acme", user = "ana" }
bob = { token_env = "API_TOKEN_BOB", tenant = "acme", user = "bob" }
""",
    )
    tokens = auth_tokens(load_config(path), {"API_TOKEN_BOB": "tok-from-env-xyz789"})
    assert tokens == {
        "tok-inline-abc123": Scope(tenant="acme", user="ana"),
        "tok-from-env-xyz789": Scope(tenant="acme", user="bob"),
    }


def test_no_auth_table_means_no_tokens_and_serve_defaults(tmp_path: Path) -> None:
    config = load_config(config_from(tmp_path, ""))
    assert auth_tokens(config, {}) == {}
    settings = serve_settings(config)
    assert (settings.host, settings.port) == ("127.0.0.1", 8400)


def test_serve_table_sets_host_and_port(tmp_path: Path) -> None:
    config = load_config(config_from(tmp_path, '[serve]\nhost = "0.0.0.0"\nport = 9000\n'))
    settings = serve_settings(config)
    assert (settings.host, settings.port) == ("0.0.0.0", 9000)


def test_serve_table_sets_the_body_limit_cors_origins_and_shutdown_grace(tmp_path: Path) -> None:
    text = '[serve]\nmax_body_bytes = 1024\ncors_origins = ["https://app.example"]\n'
    settings = serve_settings(load_config(config_from(tmp_path, text + "shutdown_grace_s = 2\n")))
    assert settings.max_body_bytes == 1024
    assert settings.cors_origins == ["https://app.example"]
    assert settings.shutdown_grace_s == 2.0
    defaults = serve_settings(load_config(config_from(tmp_path, "")))
    assert (defaults.max_body_bytes, defaults.cors_origins) == (4 * 1024 * 1024, [])
    assert defaults.shutdown_grace_s == 5.0


def test_the_console_is_on_by_default_and_serve_console_false_turns_it_off(
    tmp_path: Path,
) -> None:
    defaults = serve_settings(load_config(config_from(tmp_path, "")))
    assert defaults.console is True and defaults.console_session_ttl_s == 8 * 3600
    text = "[serve]\nconsole = false\nconsole_session_ttl_s = 600\n"
    settings = serve_settings(load_config(config_from(tmp_path, text)))
    assert settings.console is False and settings.console_session_ttl_s == 600


@pytest.mark.parametrize(
    ("text", "key", "needle"),
    [
        ("[serve]\nport = 70000\n", "serve.port", "less than or equal to 65535"),
        ('[serve]\nport = "80"\n', "serve.port", "valid integer"),
        ("[serve]\nworkers = 2\n", "serve.workers", "unknown key"),
        ("[serve]\nmax_body_bytes = 0\n", "serve.max_body_bytes", "greater than or equal to 1"),
        ('[serve]\ncors_origins = "*"\n', "serve.cors_origins", "valid list"),
        ("[serve]\nshutdown_grace_s = -1\n", "serve.shutdown_grace_s", "greater than or equal"),
        ('[serve]\nconsole = "maybe"\n', "serve.console", "valid boolean"),
        ("[serve]\nconsole_session_ttl_s = 0\n", "serve.console_session_ttl_s", "greater than 0"),
    ],
)
def test_a_bad_serve_table_names_the_key_and_the_fix(
    tmp_path: Path, text: str, key: str, needle: str
) -> None:
    path = config_from(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        serve_settings(load_config(path))
    message = str(caught.value)
    assert message.startswith(f"{path}: {key}: ")
    assert needle in message and ". Fix: " in message


@pytest.mark.parametrize(
    ("entries", "key", "needle"),
    [
        ('"tok-SECRET-1234" = { tenant = "acme" }', "auth.tokens.<entry 1>.user", "missing"),
        ('"tok-SECRET-1234" = "acme/ana"', "auth.tokens.<entry 1>", "not a table"),
        (
            '"tok-SECRET-1234" = { tenant = "acme", user = "ana", role = "admin" }',
            "auth.tokens.<entry 1>.role",
            "unknown key",
        ),
        (
            '"tok-SECRET-1234" = { tenant = "acme", user = "ana" }\n'
            '"tok SECRET" = { tenant = "acme", user = "bob" }',
            "auth.tokens.<entry 2>",
            "whitespace",
        ),
        (
            'ana = { token_env = "API_TOKEN_UNSET", tenant = "acme", user = "ana" }',
            "auth.tokens.ana.token_env",
            "API_TOKEN_UNSET is not set",
        ),
        (
            'ana = { token_env = "tok-SECRET-1234", tenant = "acme", user = "ana" }',
            "auth.tokens.ana.token_env",
            "should match pattern",
        ),
        (
            '"tok-SECRET-1234" = { tenant = "acme", user = "ana" }\n'
            'bob = { token_env = "SAME", tenant = "acme", user = "bob" }',
            "auth.tokens.bob",
            "already given by auth.tokens.<entry 1>",
        ),
    ],
)
def test_a_bad_token_entry_names_the_entry_but_never_the_token(
    tmp_path: Path, entries: str, key: str, needle: str
) -> None:
    path = config_from(tmp_path, f"[auth.tokens]\n{entries}\n")
    with pytest.raises(ConfigError) as caught:
        auth_tokens(load_config(path), {"SAME": "tok-SECRET-1234"})
    message = str(caught.value)
    assert message.startswith(f"{path}: {key}: "), message
    assert needle in message
    assert "SECRET" not in message
    assert ". Fix: " in message


def test_an_unknown_auth_key_is_refused(tmp_path: Path) -> None:
    path = config_from(tmp_path, '[auth]\nmode = "open"\n')
    with pytest.raises(ConfigError, match=r"auth\.mode: unknown key"):
        auth_tokens(load_config(path), {})


@pytest.mark.parametrize("field", ["tenant", "user"])
def test_an_auth_token_with_an_empty_scope_field_is_a_config_error_naming_it(
    tmp_path: Path, field: str
) -> None:
    fields = {"tenant": "acme", "user": "ana", field: ""}
    entry = (
        f'ana = {{ token_env = "SAME", tenant = "{fields["tenant"]}", user = "{fields["user"]}" }}'
    )
    path = config_from(tmp_path, f"[auth.tokens]\n{entry}\n")

    with pytest.raises(ConfigError) as caught:
        auth_tokens(load_config(path), {"SAME": "tok-SECRET-1234"})

    message = str(caught.value)
    assert message.startswith(f"{path}: auth.tokens.ana.{field}: "), message
    assert "SECRET" not in message
