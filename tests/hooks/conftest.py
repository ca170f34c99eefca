"""Shared fixtures for the hooks tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from reverie.core.scope import Scope
from reverie.hooks import CapabilityHookContext, HookDispatcher, HookRegistry


@pytest.fixture
def scope() -> Scope:
    return Scope(tenant="acme", user="ana")


@pytest.fixture
def registry() -> HookRegistry:
    return HookRegistry()


@pytest.fixture
def dispatcher(registry: HookRegistry) -> HookDispatcher:
    return HookDispatcher(registry)


@pytest.fixture
def call_ctx(scope: Scope) -> Callable[..., CapabilityHookContext]:
    """Build a capability context; ``call_ctx("delete_file", path="/x")``."""

    def build(tool: str = "read_file", **arguments: object) -> CapabilityHookContext:
        return CapabilityHookContext(
            tool=tool, arguments=arguments, scope=scope, run_id="run-1", call_id="call-1"
        )

    return build
