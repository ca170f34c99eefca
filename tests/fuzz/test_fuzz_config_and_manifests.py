"""Config files and manifests: any bytes or document is read, or a ConfigError, nothing else."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, strategies as st

from fuzz.strategies import FUZZ, JSON, TEXT, objects_with, toml_document
from reverie.config import build_agents, load_config
from reverie.core.tomlfile import parse_toml
from reverie.errors import ConfigError
from reverie.hooks.manifest import load_hook_manifest, read_hook_specs
from reverie.memory.manifest import parse_memory_manifest

CONFIG_TABLES = ["store", "agents", "models", "prices", "memory", "serve", "auth", "hooks", "x"]
HOOK_KEYS = ["point", "callable", "name", "phase", "priority", "timeout_s", "fail", "x"]
MEMORY_KEYS = ["name", "lanes", "tools", "passes", "scheduled_ops", "x"]

RAW_BYTES = (
    st.binary(max_size=200)
    | st.text(max_size=80).map(lambda t: t.encode("utf-16"))
    | st.text(max_size=80).map(lambda t: t.encode("utf-8", "surrogatepass"))
    | st.integers(min_value=1, max_value=3000).map(lambda n: b"x = " + b"[" * n + b"]" * n)
)

DOCUMENTS = st.dictionaries(
    st.sampled_from(CONFIG_TABLES), st.dictionaries(TEXT, JSON, max_size=4), max_size=4
)


def check_config_text(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "reverie.toml"
        path.write_bytes(data)
        try:
            config = load_config(path)
            build_agents(config)
        except ConfigError as exc:
            message = str(exc)
            assert message.startswith(f"{path}: ")
            assert "\n" not in message


@FUZZ
@given(RAW_BYTES)
def test_any_bytes_as_a_config_file_give_a_config_or_a_one_line_config_error(data: bytes) -> None:
    check_config_text(data)


@FUZZ
@given(DOCUMENTS)
def test_any_toml_document_as_a_config_gives_a_config_or_a_config_error(
    document: dict[str, dict[str, Any]],
) -> None:
    check_config_text(toml_document(document).encode())


@FUZZ
@given(RAW_BYTES | TEXT.map(str.encode))
def test_parse_toml_raises_only_config_errors(data: bytes) -> None:
    try:
        parse_toml(data, "f.toml")
    except ConfigError as exc:
        assert str(exc).startswith("f.toml: ")


@FUZZ
@given(st.lists(objects_with(HOOK_KEYS), max_size=3) | JSON)
def test_any_hooks_table_is_specs_or_a_config_error(hooks: Any) -> None:
    with contextlib.suppress(ConfigError):
        read_hook_specs({"hooks": hooks}, source="manifest.toml")


@FUZZ
@given(RAW_BYTES)
def test_any_bytes_as_a_hook_manifest_give_specs_or_a_config_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "manifest.toml"
        path.write_bytes(data)
        with contextlib.suppress(ConfigError):
            load_hook_manifest(path)


@FUZZ
@given(objects_with(MEMORY_KEYS) | JSON, st.sampled_from(["builtin", "trusted", "installed"]))
def test_any_memory_manifest_is_a_manifest_or_a_config_error(memory: Any, trust: Any) -> None:
    with contextlib.suppress(ConfigError):
        parse_memory_manifest({"memory": memory}, source="m.toml", trust=trust)


@FUZZ
@given(TEXT | st.text(max_size=200))
def test_any_text_as_a_memory_manifest_is_a_manifest_or_a_config_error(text: str) -> None:
    with contextlib.suppress(ConfigError):
        parse_memory_manifest(text, source="m.toml")
