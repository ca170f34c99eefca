"""Shared fixtures for the model provider tests: API keys in the environment."""

from __future__ import annotations

import pytest

OPENAI_TEST_KEY = "sk-test-OPENAI-secret-0123456789"
ANTHROPIC_TEST_KEY = "sk-ant-test-ANTHROPIC-secret-0123456789"


@pytest.fixture
def openai_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """``OPENAI_API_KEY`` set to a recognisable fake value (returned)."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_TEST_KEY)
    return OPENAI_TEST_KEY


@pytest.fixture
def anthropic_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """``ANTHROPIC_API_KEY`` set to a recognisable fake value (returned)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_TEST_KEY)
    return ANTHROPIC_TEST_KEY
