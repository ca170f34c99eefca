"""Hooks declared in TOML: extension manifests (``installed``) and ``reverie.toml`` (``trusted``).

Both use the same ``[[hooks]]`` tables::

    [[hooks]]
    point = "before_capability"          # a hook point (docs/hooks.md)
    callable = "acme_ext.hooks:no_rm"    # "package.module:attribute" (dots allowed after ':')
    name = "acme.no-rm"                  # the hook id: unique
    phase = "policy"                     # optional: validation | authorization | policy | telemetry
    priority = 0                         # optional: lower runs first within the phase
    event_kinds = ["tool_started"]       # required for point = "event", refused elsewhere
    timeout_ms = 50                      # optional: this hook's timeout

The trust class comes from *where* the table was read, never from the table:
:func:`register_manifest_hooks` registers an extension manifest's hooks as ``installed``;
:func:`register_config_hooks` registers the operator's ``reverie.toml`` hooks as ``trusted``.
Other top-level keys (``[[memory.scheduled_ops]]``, ``[mcp]``, …) are left to their owners.

Loading is all-or-nothing: every entry is validated and its callable imported before any is
registered, and a registration refused half-way is rolled back. Every problem raises
:class:`~reverie.errors.ConfigError` naming the file, the ``[[hooks]]`` entry and key, and the fix.
Importing a callable runs its module's code: only point these at code you have installed.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reverie.core.tomlfile import parse_toml
from reverie.errors import ConfigError
from reverie.hooks.points import HOOK_POINTS, PHASES, HookPoint, Phase
from reverie.hooks.registry import (
    MAX_RESTRICTED_TIMEOUT_S,
    HookFn,
    HookRegistration,
    HookRegistrationError,
    HookRegistry,
)

__all__ = [
    "HookSpec",
    "load_hook_manifest",
    "read_hook_specs",
    "register_config_hooks",
    "register_manifest_hooks",
]

_KEYS: Final = ("point", "callable", "name", "phase", "priority", "event_kinds", "timeout_ms")

_FIXES: Final[Mapping[str, str]] = {
    "point": f"set point to one of {', '.join(HOOK_POINTS)}",
    "callable": 'set callable = "package.module:attribute" naming an importable function',
    "name": "give each hook a unique name of letters, digits and '_.:/@+-'",
    "phase": f"set phase to one of {', '.join(PHASES)}, or leave it out for 'policy'",
    "priority": "set priority to an integer (lower runs first), or leave it out for 0",
    "event_kinds": 'use event_kinds = ["tool_started", ...] with point = "event", and only there',
    "timeout_ms": (
        "set timeout_ms to a positive integer number of milliseconds "
        f"(at most {int(MAX_RESTRICTED_TIMEOUT_S * 1000)} for extension hooks)"
    ),
}

_REGISTRY_FIELD_TO_KEY: Final[Mapping[str, str]] = {"fn": "callable", "timeout_s": "timeout_ms"}

_REGISTRY_FIXES: Final[Mapping[str, str]] = {
    "name": "give the hook a name no other hook (in any manifest or reverie.toml) uses",
    "point": "bind an observer point such as event instead; only reverie.toml can bind after_turn",
    "event_kinds": _FIXES["event_kinds"],
    "timeout_ms": f"set timeout_ms to at most {int(MAX_RESTRICTED_TIMEOUT_S * 1000)}",
}
"""TOML-worded fixes for the rules the registry checks (the registry words them for code)."""


class _HookTable(BaseModel):
    """One ``[[hooks]]`` table, as written."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    point: HookPoint
    callable: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
    name: str = Field(min_length=1)
    phase: Phase = "policy"
    priority: int = 0
    event_kinds: list[str] | None = None
    timeout_ms: int | None = Field(default=None, gt=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class HookSpec:
    """One validated ``[[hooks]]`` entry, before its callable is imported."""

    point: HookPoint
    """The hook point."""
    callable_ref: str
    """Where the hook lives: ``"package.module:attribute"``."""
    name: str
    """The hook id."""
    phase: Phase = "policy"
    """The ordering phase."""
    priority: int = 0
    """Order within the phase."""
    event_kinds: frozenset[str] | None = None
    """The event-kind filter (``event`` point only)."""
    timeout_s: float | None = None
    """The hook's timeout, converted from ``timeout_ms``."""
    index: int = 0
    """The entry's position among the file's ``[[hooks]]`` tables (0-based), for messages."""


def _where(source: str, index: int, name: object, key: str | None) -> str:
    entry = f"[[hooks]] entry {index + 1}"
    if isinstance(name, str) and name:
        entry += f" ({name!r})"
    return f"{source}: {entry}" + (f", key {key!r}" if key else "")


def _config_error(
    source: str, index: int, name: object, key: str, problem: str, fix: str | None = None
) -> ConfigError:
    if fix is None:
        fix = _FIXES.get(key, f"remove {key!r}; a [[hooks]] table takes {', '.join(_KEYS)}")
    return ConfigError(f"{_where(source, index, name, key)}: {problem}. Fix: {fix}")


def read_hook_specs(
    document: Mapping[str, Any], *, source: str | os.PathLike[str]
) -> tuple[HookSpec, ...]:
    """Validate the ``[[hooks]]`` tables of an already-parsed TOML document.

    Args:
        document: The whole parsed document; only its ``hooks`` key is read.
        source: The file it came from, named in every error.

    Returns:
        One spec per table, in file order (empty when there is no ``hooks`` key).

    Raises:
        ConfigError: ``hooks`` is not an array of tables, or a table is invalid. The message
            names the file, the entry and the key, and says how to fix it.
    """
    where = os.fspath(source)
    tables = document.get("hooks", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(
            f"{where}: key 'hooks' must be an array of tables. Fix: write each hook as a "
            "[[hooks]] table (double brackets), not [hooks] or hooks = ..."
        )
    specs: list[HookSpec] = []
    for index, table in enumerate(tables):
        name = table.get("name")
        try:
            parsed = _HookTable.model_validate(table)
        except ValidationError as exc:
            # Only the first problem, with its key. `from None`: pydantic's own text quotes the
            # input values, which must not reach logs or tracebacks.
            error = exc.errors(include_url=False, include_input=False)[0]
            key = str(error["loc"][0]) if error["loc"] else "hooks"
            raise _config_error(where, index, name, key, error["msg"].lower()) from None
        specs.append(
            HookSpec(
                point=parsed.point,
                callable_ref=parsed.callable,
                name=parsed.name,
                phase=parsed.phase,
                priority=parsed.priority,
                event_kinds=None if parsed.event_kinds is None else frozenset(parsed.event_kinds),
                timeout_s=None if parsed.timeout_ms is None else parsed.timeout_ms / 1000,
                index=index,
            )
        )
    return tuple(specs)


def load_hook_manifest(path: str | os.PathLike[str]) -> tuple[HookSpec, ...]:
    """Read and validate the ``[[hooks]]`` tables of a TOML file.

    Args:
        path: The manifest (or config) file.

    Returns:
        One spec per ``[[hooks]]`` table, in file order.

    Raises:
        ConfigError: The file cannot be read, is not valid TOML, or has an invalid hook table.
    """
    where = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise ConfigError(f"{where}: file not found. Fix: check the manifest path") from None
    except OSError as exc:
        raise ConfigError(
            f"{where}: cannot be read ({type(exc).__name__}). Fix: check the file's permissions"
        ) from exc
    return read_hook_specs(parse_toml(raw, where), source=where)


def _import_callable(spec: HookSpec, source: str) -> HookFn:
    module_name, _, attribute = spec.callable_ref.partition(":")

    def fail(problem: str) -> ConfigError:
        return _config_error(source, spec.index, spec.name, "callable", problem)

    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise fail(f"cannot import module {module_name!r}") from exc
    except Exception as exc:
        raise fail(f"importing module {module_name!r} raised {type(exc).__name__}") from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise fail(f"{spec.callable_ref!r} does not exist (no attribute {part!r})") from None
    if not callable(target):
        raise fail(f"{spec.callable_ref!r} is a {type(target).__name__}, not a callable")
    return target


def _register_all(
    registry: HookRegistry,
    specs: tuple[HookSpec, ...],
    source: str,
    register: Callable[..., HookRegistration],
) -> tuple[HookRegistration, ...]:
    # Import everything first, so a bad entry late in the file registers nothing.
    resolved = [(spec, _import_callable(spec, source)) for spec in specs]
    added: list[HookRegistration] = []
    try:
        for spec, fn in resolved:
            try:
                added.append(
                    register(
                        spec.point,
                        fn,
                        name=spec.name,
                        phase=spec.phase,
                        priority=spec.priority,
                        event_kinds=spec.event_kinds,
                        timeout_s=spec.timeout_s,
                    )
                )
            except HookRegistrationError as exc:
                key = _REGISTRY_FIELD_TO_KEY.get(exc.field, exc.field)
                fix = _REGISTRY_FIXES.get(key, exc.fix)
                raise _config_error(source, spec.index, spec.name, key, exc.problem, fix) from exc
    except ConfigError:
        for registration in added:
            registry.unregister(registration.name)
        raise
    return tuple(added)


def register_manifest_hooks(
    registry: HookRegistry, path: str | os.PathLike[str]
) -> tuple[HookRegistration, ...]:
    """Register the hooks of an extension manifest, with trust class ``installed``.

    Args:
        registry: Where to register them (``rt.hooks``).
        path: The extension's TOML manifest.

    Returns:
        The registrations, in file order. On any error nothing is registered.

    Raises:
        ConfigError: The file or an entry is invalid, a callable cannot be imported, or the
            registry refuses an entry (e.g. a taken name, ``after_turn``, a timeout over 1 s).
    """
    source = os.fspath(path)
    return _register_all(registry, load_hook_manifest(path), source, registry.register_installed)


def register_config_hooks(
    registry: HookRegistry,
    config: Mapping[str, Any],
    *,
    source: str | os.PathLike[str] = "reverie.toml",
) -> tuple[HookRegistration, ...]:
    """Register the ``[[hooks]]`` of the operator's parsed ``reverie.toml``, as ``trusted``.

    Args:
        registry: Where to register them (``rt.hooks``).
        config: The whole parsed ``reverie.toml``; only its ``hooks`` key is read.
        source: The file it was read from, named in errors.

    Returns:
        The registrations, in file order. On any error nothing is registered.

    Raises:
        ConfigError: An entry is invalid, a callable cannot be imported, or the registry
            refuses an entry (e.g. a taken name).
    """
    where = os.fspath(source)
    specs = read_hook_specs(config, source=where)
    return _register_all(registry, specs, where, registry.register)
