"""The public surface of DESIGN §2: exactly these names, importable as documented."""

from __future__ import annotations

import reverie
import reverie.config
import reverie.testing


def test_top_level_all_is_exactly_the_public_names() -> None:
    assert sorted(reverie.__all__) == sorted(
        [
            "Agent",
            "Compaction",
            "Gate",
            "Image",
            "Limits",
            "RunHandle",
            "RunResult",
            "Runtime",
            "Schedule",
            "Scope",
            "Settings",
            "Text",
            "tool",
        ]
    )
    for name in reverie.__all__:
        assert getattr(reverie, name) is not None


def test_the_config_package_exports_the_names_of_the_config_module() -> None:
    # reverie.config became a package of small modules; what it exports did not change.
    assert sorted(reverie.config.__all__) == sorted(
        [
            "CONFIG_FILE_NAME",
            "AgentConfig",
            "EndpointSection",
            "LimitsConfig",
            "PriceConfig",
            "ReverieConfig",
            "ServeConfig",
            "StoreConfig",
            "TelemetryConfig",
            "TokenConfig",
            "auth_tokens",
            "build_agents",
            "config_error",
            "curation_model",
            "default_config_path",
            "key_env_for",
            "load_config",
            "mcp_server_settings",
            "mcp_servers",
            "memory_settings",
            "register_hooks",
            "resolve_model_spec",
            "reverie_home",
            "serve_settings",
            "store_url",
        ]
    )
    for name in reverie.config.__all__:
        assert getattr(reverie.config, name) is not None


def test_testing_module_exports_the_scripted_model_helpers() -> None:
    for name in ("ScriptedModel", "reply", "call", "calls", "error"):
        assert name in reverie.testing.__all__
        assert getattr(reverie.testing, name) is not None


def test_limits_defaults_match_the_design() -> None:
    limits = reverie.Limits()
    assert limits.max_iterations == 32
    assert limits.max_calls_per_batch == 32
    assert limits.max_model_calls is None and limits.max_capability_calls is None
    assert limits.wall_clock_s is None and limits.max_usd is None


def test_limits_narrow_never_widen() -> None:
    base = reverie.Limits(max_iterations=10, max_model_calls=5)
    narrowed = base.narrow(reverie.Limits(max_iterations=50, max_model_calls=2))
    assert narrowed.max_iterations == 10 and narrowed.max_model_calls == 2


def test_scope_requires_tenant_and_user() -> None:
    import pytest

    with pytest.raises(ValueError):
        reverie.Scope(tenant="", user="ana")


def test_agent_offers_run_and_run_sync_and_scope_offers_local() -> None:
    import inspect

    assert inspect.iscoroutinefunction(reverie.Agent.run)
    assert callable(reverie.Agent.run_sync)
    for method in (reverie.Agent.run, reverie.Agent.run_sync):
        assert list(inspect.signature(method).parameters)[:2] == ["self", "message"]
        assert inspect.signature(method).parameters["scope"].default is None
    assert reverie.Scope.local("ana") == reverie.Scope(tenant="local", user="ana")


def test_an_agent_refuses_a_plain_function_as_a_tool_with_a_clear_error() -> None:
    import pytest

    from reverie.errors import UsageError
    from reverie.testing import ScriptedModel

    def undecorated(a: int) -> int:
        return a

    with pytest.raises(UsageError, match="@tool"):
        reverie.Agent(name="a", model=ScriptedModel([]), tools=[undecorated])


def test_an_agent_refuses_two_tools_with_one_name() -> None:
    import pytest

    from reverie.errors import UsageError
    from reverie.testing import ScriptedModel

    @reverie.tool
    def same(a: int) -> int:
        """A tool."""
        return a

    with pytest.raises(UsageError, match="two tools"):
        reverie.Agent(name="a", model=ScriptedModel([]), tools=[same, same])


def test_agent_output_type_and_run_result_output_are_public_fields() -> None:
    import dataclasses

    agent_fields = {f.name for f in dataclasses.fields(reverie.Agent) if not f.name.startswith("_")}
    assert {
        "name",
        "model",
        "instructions",
        "tools",
        "limits",
        "on_limit",
        "family",
    } <= agent_fields
    assert {"hooks", "output_type", "on_drift"} <= agent_fields
    result_fields = {f.name for f in dataclasses.fields(reverie.RunResult)}
    assert result_fields == {
        "status",
        "text",
        "exit",
        "run_id",
        "thread_id",
        "usage",
        "gate",
        "output",
        "drift",
    }


async def test_a_runtime_offers_the_runs_and_gates_query_views() -> None:
    from reverie.runtime.queries import Gates, Runs

    async with reverie.Runtime.open(":memory:") as rt:
        assert isinstance(rt.runs, Runs) and isinstance(rt.gates, Gates)
        assert await rt.runs.list() == [] and await rt.gates.list() == []
