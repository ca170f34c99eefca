"""resolve_model: model specs to Model instances."""

from __future__ import annotations

import pytest

from reverie.errors import ConfigError
from reverie.models.anthropic import AnthropicModel
from reverie.models.base import Model
from reverie.models.hermes import HermesModel
from reverie.models.openai import OpenAIChatModel
from reverie.models.registry import OLLAMA_BASE_URL, EndpointConfig, resolve_model


def test_openai_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # keys are read at the first call only
    model = resolve_model("openai:gpt-4.1-mini")
    assert isinstance(model, OpenAIChatModel)
    assert model.name == "openai:gpt-4.1-mini"
    assert model.model == "gpt-4.1-mini"


def test_ollama_spec_points_at_the_local_server_without_a_key() -> None:
    model = resolve_model("ollama:qwen2.5:7b")
    assert isinstance(model, OpenAIChatModel)
    assert model.name == "ollama:qwen2.5:7b"
    assert model.model == "qwen2.5:7b"
    assert OLLAMA_BASE_URL in repr(model)


def test_openai_compat_spec() -> None:
    model = resolve_model("openai-compat:http://gpu-box:8000/v1#meta-llama/Llama-3.1-8B")
    assert isinstance(model, OpenAIChatModel)
    assert model.model == "meta-llama/Llama-3.1-8B"
    assert "http://gpu-box:8000/v1" in repr(model)


def test_anthropic_spec() -> None:
    model = resolve_model("anthropic:claude-sonnet-4-5")
    assert isinstance(model, AnthropicModel)
    assert model.name == "anthropic:claude-sonnet-4-5"


def test_hermes_spec_wraps_the_inner_spec() -> None:
    model = resolve_model("hermes:ollama:hermes3")
    assert isinstance(model, HermesModel)
    assert isinstance(model.inner, OpenAIChatModel)
    assert model.name == "hermes:ollama:hermes3"


def test_a_model_instance_is_returned_unchanged() -> None:
    model = OpenAIChatModel("x")
    assert resolve_model(model) is model
    assert isinstance(model, Model)


def test_configured_endpoint_spec() -> None:
    endpoints = {"together": EndpointConfig("https://api.together.xyz/v1", "TOGETHER_API_KEY")}
    model = resolve_model("together:meta-llama/Llama-3-70b", endpoints=endpoints)
    assert isinstance(model, OpenAIChatModel)
    assert model.name == "together:meta-llama/Llama-3-70b"
    assert "api.together.xyz" in repr(model)


def test_configured_endpoint_can_repoint_a_builtin_provider() -> None:
    endpoints = {"ollama": EndpointConfig("http://gpu-box:11434/v1")}
    model = resolve_model("ollama:llama3", endpoints=endpoints)
    assert "gpu-box" in repr(model)


@pytest.mark.parametrize(
    "spec",
    [
        "gpt-4o",
        "mystery:model",
        "openai:",
        "openai-compat:no-url#m",
        "openai-compat:http://x",
        "hermes:",
    ],
)
def test_bad_specs_are_config_errors_naming_the_spec_and_the_accepted_forms(spec: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_model(spec)
    message = str(info.value)
    assert repr(spec) in message
    assert "openai:<model>" in message
    assert "anthropic:<model>" in message
    assert "hermes:<inner spec>" in message


def test_unknown_prefix_lists_configured_endpoints() -> None:
    endpoints = {"groq": EndpointConfig("https://api.groq.com/openai/v1", "GROQ_API_KEY")}
    with pytest.raises(ConfigError, match="groq:<model>"):
        resolve_model("mystery:model", endpoints=endpoints)


def test_reserved_endpoint_names_are_rejected() -> None:
    with pytest.raises(ConfigError, match="reserved"):
        resolve_model("openai:x", endpoints={"hermes": EndpointConfig("http://x/v1")})
