"""Agents from ``[agents.*]``: their tools imported, their model specs resolved."""

from __future__ import annotations

import importlib
import os
import re
from typing import Any, Final

from reverie.capabilities import tool
from reverie.capabilities.tool import Capability
from reverie.config.problems import MODEL_FIX, config_error, dotted
from reverie.config.schema import CompactionConfig, ReverieConfig
from reverie.errors import ConfigError, MissingExtraError, ModelSpecError, UsageError
from reverie.models.base import Model
from reverie.models.registry import api_key_env, resolve_model
from reverie.models.spec import ModelSpec
from reverie.runtime.agent import Agent
from reverie.runtime.compaction import Compaction

__all__ = ["build_agents", "extra_fix", "key_env_for", "resolve_model_spec"]

_REF: Final = r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"


def resolve_model_spec(
    spec: str,
    *,
    config: ReverieConfig | None = None,
    base_dir: str | os.PathLike[str] | None = None,
) -> Model:
    """Turn a model spec into a :class:`Model`: ``scripted:FILE.json`` or a registry spec.

    Args:
        spec: ``scripted:path.json`` (:mod:`reverie.testing.scripted_file`) or any spec
            :func:`reverie.models.registry.resolve_model` accepts.
        config: Supplies the ``[models.NAME]`` endpoints.
        base_dir: Where a relative ``scripted:`` path starts (default: the current directory).

    Raises:
        ConfigError: The spec is malformed, names an unknown provider, or its script is invalid.
    """
    endpoints = config.endpoints() if config else None
    try:
        parsed = ModelSpec.parse(spec)
    except ModelSpecError:
        # The registry's message lists the configured endpoints among the accepted forms.
        return resolve_model(spec, endpoints=endpoints)
    if parsed.provider == "scripted":
        from reverie.testing.scripted_file import load_scripted_model

        return load_scripted_model(parsed, base_dir=base_dir)
    return resolve_model(spec, endpoints=endpoints)


def build_agents(config: ReverieConfig) -> list[Agent]:
    """The agents of ``[agents.*]``, with tools imported and models resolved.

    Models are built fresh on every call and may hold SDK clients: close them with
    ``await model.aclose()`` when done (the CLI does).

    Raises:
        ConfigError: A tool cannot be imported or is not a tool, a model spec is invalid, or the
            agent's settings are refused (names the key).
    """
    agents: list[Agent] = []
    for name, section in config.agents.items():
        key = dotted(["agents", name])
        tools: list[Any] = []
        for index, ref in enumerate(section.tools):
            tools.extend(_import_tools(config.source, f"{key}.tools[{index}]", ref))
        models: list[Model] = []
        for index, spec in enumerate(section.model_specs):
            where = f"{key}.model" if isinstance(section.model, str) else f"{key}.model[{index}]"
            try:
                models.append(resolve_model_spec(spec, config=config, base_dir=config.base_dir))
            except ConfigError as exc:
                # A scripted file's error carries its own fix; a registry error gets ours.
                problem, _, fix = str(exc).partition(". Fix: ")
                raise config_error(config.source, where, problem, fix or MODEL_FIX) from None
            except ImportError as exc:
                raise config_error(
                    config.source,
                    where,
                    f"the provider's package is not installed ({exc.name or exc})",
                    extra_fix(exc),
                ) from None
        output_type = None
        if section.output_type is not None:
            where = f"{key}.output_type"
            output_type = _import_ref(config.source, where, section.output_type, _OUTPUT_TYPE_FIX)
        try:
            agents.append(
                Agent(
                    name=name,
                    model=models[0] if len(models) == 1 else models,
                    instructions=section.instructions,
                    tools=tools,
                    limits=section.limits.to_limits(),
                    on_limit=section.on_limit,
                    on_drift=section.on_drift,
                    output_type=output_type,
                    compaction=_compaction(config, f"{key}.compaction", section.compaction),
                    settings=section.settings.to_settings() if section.settings else None,
                )
            )
        except UsageError as exc:
            where = key
            if "output_type" in str(exc):
                where = f"{key}.output_type"
            elif "Settings." in str(exc):
                where = f"{key}.settings"
            raise config_error(
                config.source, where, str(exc), "see docs/configuration.md for agents"
            ) from None
    return agents


def _compaction(
    config: ReverieConfig, key: str, section: CompactionConfig | None
) -> Compaction | None:
    """An agent's :class:`Compaction` from its ``compaction`` table (``None``: off)."""
    if section is None or not section.enabled:
        return None
    settings: dict[str, Any] = section.model_dump(exclude_none=True, exclude={"enabled", "model"})
    if section.model is not None:
        try:
            settings["model"] = resolve_model_spec(
                section.model, config=config, base_dir=config.base_dir
            )
        except ConfigError as exc:
            problem, _, fix = str(exc).partition(". Fix: ")
            raise config_error(config.source, f"{key}.model", problem, fix or MODEL_FIX) from None
    try:
        return Compaction(**settings)
    except UsageError as exc:
        raise config_error(config.source, key, str(exc), "see docs/compaction.md") from None


def _import_tools(source: str, key: str, ref: str) -> list[Any]:
    """Import ``package.module:attribute`` and return the capabilities it names."""
    target = _import_ref(source, key, ref, _TOOL_FIX)
    items = list(target) if isinstance(target, list | tuple) else [target]
    tools: list[Any] = []
    for item in items:
        if isinstance(item, Capability):
            tools.append(item)
        elif callable(item):
            # A plain function: wrapped like a bare @tool (undeclared effects run exclusively).
            try:
                tools.append(tool(item))
            except UsageError as exc:
                raise config_error(source, key, str(exc), _TOOL_FIX) from None
        else:
            raise config_error(
                source, key, f"{ref!r} is a {type(item).__name__}, not a tool", _TOOL_FIX
            )
    return tools


def _import_ref(source: str, key: str, ref: str, fix: str) -> object:
    """Import ``package.module:attribute`` and return the object it names."""
    if not re.match(_REF, ref):
        raise config_error(source, key, "not a 'package.module:attribute' reference", fix)
    module_name, _, attribute = ref.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise config_error(
            source,
            key,
            f"cannot import module {module_name!r}",
            "install the package, or add its directory to pythonpath = [...] at the top of "
            "this file",
        ) from exc
    except Exception as exc:
        raise config_error(
            source, key, f"importing module {module_name!r} raised {type(exc).__name__}", fix
        ) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise config_error(
                source, key, f"{ref!r} does not exist (no attribute {part!r})", fix
            ) from None
    return target


_OUTPUT_TYPE_FIX: Final = (
    'set output_type = "package.module:attribute" naming a pydantic model class or a JSON '
    "Schema dict with an object root"
)
_TOOL_FIX: Final = (
    'name an @tool function, a plain function, or a list of tools as "package.module:attribute"'
)


def extra_fix(exc: ImportError) -> str:
    missing = MissingExtraError.of(exc, "the model provider")
    if missing is None:
        return "install the package the provider needs"
    return f"pip install 'reverie[{missing.extra}]'"


def key_env_for(spec: str, config: ReverieConfig | None = None) -> str | None:
    """The environment variable a model spec reads its key from (``None``: needs no key).

    The same rule :func:`reverie.models.registry.resolve_model` builds models by; used by
    ``reverie doctor`` to say which variable to set without ever reading its value.

    Raises:
        ModelSpecError: ``spec`` is not a valid model spec.
    """
    return api_key_env(spec, config.endpoints() if config else None)
