"""The model-spec grammar (reverie.models.spec): one rule per test, and the errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from reverie.errors import ConfigError, ModelSpecError
from reverie.models.pricing import PriceTable
from reverie.models.registry import EndpointConfig, api_key_env, resolve_model
from reverie.models.spec import SPEC_FORMS, ModelSpec, provider_of


def test_a_provider_spec_is_the_provider_then_the_model() -> None:
    spec = ModelSpec.parse("openai:gpt-4.1-mini")
    assert (spec.provider, spec.model, spec.base_url, spec.inner) == (
        "openai",
        "gpt-4.1-mini",
        None,
        None,
    )
    assert str(spec) == "openai:gpt-4.1-mini"


def test_the_model_is_everything_after_the_first_colon() -> None:
    spec = ModelSpec.parse("ollama:qwen2.5:7b")
    assert (spec.provider, spec.model) == ("ollama", "qwen2.5:7b")


def test_whitespace_around_the_spec_and_its_parts_is_ignored() -> None:
    assert ModelSpec.parse("  anthropic : claude-sonnet-4-5 \n") == ModelSpec.parse(
        "anthropic:claude-sonnet-4-5"
    )
    compat = ModelSpec.parse("openai-compat: http://gpu:8000/v1 # llama ")
    assert (compat.base_url, compat.model) == ("http://gpu:8000/v1", "llama")


def test_openai_compat_takes_an_http_url_then_hash_then_the_model() -> None:
    spec = ModelSpec.parse("openai-compat:https://gpu-box:8000/v1#meta-llama/Llama-3.1-8B")
    assert spec.provider == "openai-compat"
    assert spec.base_url == "https://gpu-box:8000/v1"
    assert spec.model == "meta-llama/Llama-3.1-8B"
    assert str(spec) == "openai-compat:https://gpu-box:8000/v1#meta-llama/Llama-3.1-8B"


def test_hermes_wraps_an_inner_spec_and_nests() -> None:
    spec = ModelSpec.parse("hermes:hermes:ollama:qwen3")
    assert spec.provider == "hermes"
    assert spec.inner == ModelSpec.parse("hermes:ollama:qwen3")
    assert spec.base == ModelSpec.parse("ollama:qwen3")
    assert spec.model == "qwen3"
    assert str(spec) == "hermes:hermes:ollama:qwen3"


def test_scripted_names_a_path() -> None:
    spec = ModelSpec.parse("scripted:examples/scripted_hello.json")
    assert (spec.provider, spec.model) == ("scripted", "examples/scripted_hello.json")


def test_an_endpoint_name_is_any_other_prefix() -> None:
    spec = ModelSpec.parse("together:meta-llama/Llama-3-70b")
    assert (spec.provider, spec.model) == ("together", "meta-llama/Llama-3-70b")


def test_a_list_is_the_primary_then_its_fallbacks() -> None:
    specs = ModelSpec.parse_list(["openai:gpt-4.1", "anthropic:claude-haiku-4-5"])
    assert [s.provider for s in specs] == ["openai", "anthropic"]
    assert ModelSpec.parse_list("ollama:llama3") == (ModelSpec.parse("ollama:llama3"),)


@pytest.mark.parametrize(
    ("spec", "rule"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("gpt-4o", "did you mean 'openai:gpt-4o'"),
        (":gpt-4o", "no provider before ':'"),
        ("open ai:gpt-4o", "cannot contain whitespace"),
        ("openai:", "needs a model name after 'openai'"),
        ("together:  ", "needs a model name after 'together'"),
        ("openai-compat:no-url#m", "openai-compat needs <url>#<model>"),
        ("openai-compat:http://x", "openai-compat needs <url>#<model>"),
        ("hermes:", "hermes: needs an inner spec"),
        ("hermes:gpt-4o", "its inner spec is invalid: no provider prefix"),
        ("hermes:scripted:a.json", "cannot wrap a scripted: model"),
        ("scripted:", "scripted:path/to/script.json"),
    ],
)
def test_a_spec_breaking_a_rule_is_a_typed_error_naming_the_spec_the_rule_and_the_forms(
    spec: str, rule: str
) -> None:
    with pytest.raises(ModelSpecError) as info:
        ModelSpec.parse(spec)
    error = info.value
    assert isinstance(error, ConfigError)
    assert error.spec == spec
    assert rule in error.reason
    message = str(error)
    assert repr(spec) in message and rule in message
    for form in SPEC_FORMS:
        assert form in message


def test_an_empty_list_of_specs_is_refused() -> None:
    with pytest.raises(ModelSpecError, match="names no model"):
        ModelSpec.parse_list([])


def test_a_list_entry_breaking_a_rule_is_refused() -> None:
    with pytest.raises(ModelSpecError, match="'gpt-4o'"):
        ModelSpec.parse_list(["openai:gpt-4o", "gpt-4o"])


def test_a_spec_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(ModelSpecError, match="must be a string"):
        ModelSpec.parse(42)  # type: ignore[arg-type]


def test_a_url_password_in_a_bad_spec_is_masked_in_the_error() -> None:
    with pytest.raises(ModelSpecError) as info:
        ModelSpec.parse("openai-compat:https://ana:hunter2@gpu:8000/v1")
    assert "hunter2" not in str(info.value)


def test_the_resolver_refuses_what_the_parser_refuses() -> None:
    for bad in ("gpt-4o", "openai:", "hermes:", "openai-compat:http://x"):
        with pytest.raises(ModelSpecError):
            resolve_model(bad)


def test_the_resolver_refuses_a_scripted_spec_and_says_where_it_is_read() -> None:
    with pytest.raises(ModelSpecError, match=r"reverie\.config\.resolve_model_spec"):
        resolve_model("scripted:a.json")


def test_the_key_variable_follows_the_spec_and_the_endpoints() -> None:
    endpoints = {
        "together": EndpointConfig("https://api.together.xyz/v1", "TOGETHER_API_KEY"),
        "openai": EndpointConfig("https://proxy/v1", "PROXY_KEY"),
    }
    assert api_key_env("anthropic:claude-haiku-4-5") == "ANTHROPIC_API_KEY"
    assert api_key_env("openai:gpt-4o") == "OPENAI_API_KEY"
    assert api_key_env("openai:gpt-4o", endpoints) == "PROXY_KEY"
    assert api_key_env("hermes:together:llama", endpoints) == "TOGETHER_API_KEY"
    assert api_key_env("ollama:llama3") is None
    assert api_key_env("openai-compat:http://x/v1#m") is None
    assert api_key_env("scripted:a.json") is None


def test_prices_and_telemetry_read_names_by_the_same_grammar() -> None:
    table = PriceTable.default()
    assert table.price_for("gpt-4o") is not None
    assert table.price_for("hermes:openai:gpt-4o-2024-08-06") == table.price_for("gpt-4o")
    assert table.price_for("openai-compat:http://gpu:8000/v1#gpt-4o") == table.price_for("gpt-4o")
    free = table.price_for("hermes:ollama:qwen3:8b")
    assert free is not None and free.input_per_mtok == 0.0
    assert provider_of("hermes:ollama:qwen3") == "hermes"
    assert provider_of("anthropic:claude-haiku-4-5") == "anthropic"
    assert provider_of("my-custom-model") == "my-custom-model"


def test_a_bad_spec_in_reverie_toml_is_reported_at_its_key_with_the_rule(tmp_path: Path) -> None:
    from reverie.config import load_config

    path = tmp_path / "reverie.toml"
    path.write_text('[agents.helper]\nmodel = ["openai:gpt-4.1-mini", "hermes:"]\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: agents.helper.model[1]: ")
    assert "hermes: needs an inner spec" in message
    assert "Fix: set model = " in message


def test_the_config_reads_scripted_specs_and_endpoint_keys_by_the_same_grammar(
    tmp_path: Path,
) -> None:
    from reverie.config import key_env_for, load_config, resolve_model_spec

    (tmp_path / "script.json").write_text('[{"reply": "hi"}]')
    path = tmp_path / "reverie.toml"
    path.write_text(
        '[models.together]\nbase_url = "https://api.together.xyz/v1"\n'
        'api_key_env = "TOGETHER_API_KEY"\n'
    )
    config = load_config(path)
    model = resolve_model_spec(" scripted: script.json ", config=config, base_dir=tmp_path)
    assert model.name == "scripted:script.json"
    assert key_env_for("hermes:together:llama", config) == "TOGETHER_API_KEY"
    with pytest.raises(ModelSpecError):
        key_env_for("gpt-4o", config)
