"""The hooks the file registers: its own ``[[hooks]]`` and its extensions' manifests."""

from __future__ import annotations

from pathlib import Path

from reverie.config.schema import ReverieConfig
from reverie.errors import ConfigError
from reverie.hooks.guardrails import register_builtin_guardrails
from reverie.hooks.manifest import register_config_hooks, register_manifest_hooks
from reverie.hooks.registry import HookRegistration, HookRegistrationError, HookRegistry

__all__ = ["register_hooks"]


def register_hooks(config: ReverieConfig, registry: HookRegistry) -> tuple[HookRegistration, ...]:
    """Register the built-in guardrails ``[guardrails]`` switches on (``builtin``), the file's
    ``[[hooks]]`` as ``trusted`` and its extensions' as ``installed``,
    then promote the installed hooks ``promoted_hooks`` names (their text reaches the model
    verbatim instead of as a summary).

    Raises:
        ConfigError: A hook's callable cannot be imported or the registry refuses it.
    """
    registered: tuple[HookRegistration, ...] = ()
    chosen = config.guardrails
    registered += register_builtin_guardrails(
        registry,
        redact=chosen.redact_pii,
        max_input_chars=chosen.max_input_chars,
        max_reply_chars=chosen.max_reply_chars,
    )
    if config.hooks:
        registered += register_config_hooks(registry, {"hooks": config.hooks}, source=config.source)
    for manifest in config.extensions:
        path = Path(manifest)
        if not path.is_absolute():
            path = config.base_dir / path
        if not path.is_file():
            raise ConfigError(
                f"{config.source}: extensions: {manifest!r} does not exist. Fix: point it at "
                "an extension manifest (a TOML file with [[hooks]] tables), relative to "
                "this file"
            )
        registered += register_manifest_hooks(registry, path)
    for name in config.promoted_hooks:
        try:
            registry.promote(name)
        except HookRegistrationError as exc:
            for registration in registered:  # nothing half-applied
                registry.unregister(registration.name)
            raise ConfigError(
                f"{config.source}: promoted_hooks: {exc.problem}. Fix: list only the ids of "
                "hooks that a manifest in extensions registers"
            ) from None
    return registered
