"""``[triggers.NAME]``: inbound webhooks of ``reverie serve`` (docs/schedules.md#triggers).

::

    [triggers.tickets]
    agent = "triage"
    scope = { tenant = "acme", user = "ana" }
    secret_env = "TICKETS_WEBHOOK_SECRET"       # the Standard Webhooks secret, whsec_…
    input = "A ticket changed:\\n${payload}"

The secret is read from the environment variable ``secret_env`` names, never from the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pydantic import Field, ValidationError

from reverie.config.problems import config_error, table_error
from reverie.config.schedules import ScopeConfig
from reverie.config.schema import ReverieConfig, Section
from reverie.core.scope import Scope
from reverie.errors import UsageError

__all__ = ["Trigger", "TriggerConfig", "config_triggers"]

_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


@dataclass(frozen=True, slots=True, kw_only=True)
class Trigger:
    """An inbound webhook that starts a run of a served agent."""

    agent: str
    """The served agent's name (as in ``create_app(agents=...)``)."""
    scope: Scope
    """Whom the runs act for (the host's choice; never read from the request)."""
    secret: str = field(repr=False)
    """The Standard Webhooks signing secret (``whsec_…``); never logged or shown."""
    input: str = "A webhook arrived. Its payload:\n${payload}"
    """The run's message; ``${payload}`` becomes the enveloped JSON payload, ``${trigger}`` the
    trigger's name."""

    def __post_init__(self) -> None:
        if not isinstance(self.scope, Scope):
            raise UsageError("a trigger's scope must be a reverie.Scope set by the host")
        if not self.secret:
            raise UsageError("a trigger needs its signing secret")


class TriggerConfig(Section):
    """One ``[triggers.NAME]`` table."""

    agent: str = Field(min_length=1)
    scope: ScopeConfig
    secret_env: str = Field(pattern=_ENV_NAME)
    input: str | None = None


def config_triggers(config: ReverieConfig) -> dict[str, Trigger]:
    """The triggers of ``[triggers]``, with their secrets read from the environment.

    Raises:
        ConfigError: A table that is not a valid trigger, or a secret variable that is unset
            (the message names the key and the variable, never a value).
    """
    out: dict[str, Trigger] = {}
    for name, table in sorted(config.triggers.items()):
        key = f"triggers.{name}"
        try:
            section = TriggerConfig.model_validate(table)
        except ValidationError as exc:
            fix = "see docs/schedules.md#triggers for the keys of a trigger"
            raise table_error(config.source, key, exc, fix) from None
        secret = os.environ.get(section.secret_env, "")
        if not secret:
            raise config_error(
                config.source,
                f"{key}.secret_env",
                f"the environment variable {section.secret_env} is not set",
                f"export {section.secret_env}=whsec_… (the sender's signing secret)",
            )
        extra = {} if section.input is None else {"input": section.input}
        out[name] = Trigger(
            agent=section.agent,
            scope=Scope(**section.scope.model_dump()),
            secret=secret,
            **extra,
        )
    return out
