"""``reverie doctor``: is this installation ready to run agents?

Checks, in order: the configuration loads; the store opens; every agent's model spec resolves
and the environment variable its key comes from is set (the value is never read out, let alone
printed); each ``[mcp.servers.NAME]`` starts (or is reached) and lists its tools (a failure is
a warning for an ``optional`` server, else a failure; with ``--offline`` a ``url`` server is
not contacted); the ``[[hooks]]`` import; then, unless ``--offline`` or something already
failed, each agent's model endpoint is asked to list its models (proving it answers and accepts
the key; a scripted model has no endpoint and is skipped). With ``--probe``, each
OpenAI-compatible endpoint is also asked once what it supports (:mod:`reverie.models.probe`)
and the ``[models.NAME]`` keys that describe it are printed. Exit 0 when every check passes
(warnings allowed), 1 when one fails, 2 when the configuration itself is broken.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.markup import escape
from rich.table import Table

from reverie.cli.common import (
    ConfigOption,
    ExitCode,
    JsonOption,
    StoreOption,
    err_console,
    execute,
    load,
    out_console,
)
from reverie.cli.render import print_json
from reverie.core.redact import mask_url, mask_urls
from reverie.errors import ConfigError, ModelError, ReverieError

if TYPE_CHECKING:
    from reverie.config import ReverieConfig

__all__ = ["doctor_command"]

ENDPOINT_TIMEOUT_S = 10.0
"""How long ``doctor`` waits for a model endpoint to list its models."""


CheckStatus = Literal["ok", "warn", "fail"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One line of the report."""

    name: str
    status: CheckStatus
    detail: str


async def _store_check(config: ReverieConfig, override: str | None) -> Check:
    from reverie.config import store_url
    from reverie.store import open_store

    url = store_url(config, override)
    try:
        store = open_store(url)
        await store.open()
        await store.close()
    except (ReverieError, OSError) as exc:
        return Check(name="store", status="fail", detail=mask_urls(f"{url}: {exc}"))
    return Check(name="store", status="ok", detail=f"{mask_url(url)} opens")


def _agent_checks(config: ReverieConfig) -> list[Check]:
    from reverie.config import build_agents, key_env_for

    if not config.agents:
        return [
            Check(
                name="agents",
                status="warn",
                detail="none configured: `reverie run` needs --model SPEC, or add "
                f"[agents.NAME] to {config.source}",
            )
        ]
    checks: list[Check] = []
    # load_config already resolved every model and imported every tool; list what it found.
    built = {agent.name: agent for agent in build_agents(config)}
    for name, agent in config.agents.items():
        label = f"agent {name}"
        names = ", ".join(t.descriptor.name for t in built[name].tools) or "none"
        servers = f"; MCP servers: {', '.join(agent.mcp_servers)}" if agent.mcp_servers else ""
        checks.append(
            Check(
                name=label,
                status="ok",
                detail=f"model {', '.join(agent.model_specs)} resolves; tools: {names}{servers}",
            )
        )
        specs = agent.model_specs
        for spec in specs:
            # A fallback model is asked when the primary fails: its key is checked too.
            key = f"{label} key" if len(specs) == 1 else f"{label} key ({spec})"
            variable = key_env_for(spec, config)
            if variable is None:
                checks.append(Check(name=key, status="ok", detail="needs no API key"))
            elif os.environ.get(variable):
                checks.append(Check(name=key, status="ok", detail=f"{variable} is set"))
            else:
                checks.append(
                    Check(
                        name=key,
                        status="fail",
                        detail=f"{variable} is not set. Fix: export {variable}=<your key>",
                    )
                )
    return checks


async def _endpoint_checks(config: ReverieConfig) -> list[Check]:
    """Ask each agent's model endpoint to list its models (skipped for offline models)."""
    from reverie.config import build_agents

    checks: list[Check] = []
    for agent, model in ((a, m) for a in build_agents(config) for m in a.models):
        probe = getattr(model, "check_endpoint", None)
        if probe is None:
            continue
        label = f"agent {agent.name} endpoint"
        if len(agent.models) > 1:
            label += f" ({getattr(model, 'name', model)})"
        try:
            async with asyncio.timeout(ENDPOINT_TIMEOUT_S):
                await probe()
        except ModelError as exc:
            checks.append(Check(name=label, status="fail", detail=f"{exc.kind}: {exc}"))
        except TimeoutError:
            checks.append(
                Check(
                    name=label,
                    status="fail",
                    detail=f"no answer within {ENDPOINT_TIMEOUT_S:g}s",
                )
            )
        else:
            checks.append(Check(name=label, status="ok", detail="answers and accepts the key"))
    return checks


async def _probe_checks(config: ReverieConfig) -> list[Check]:
    """Ask each OpenAI-compatible endpoint once what it supports; a line per feature and the
    keys that declare it (support is information: a missing feature is a warning)."""
    from reverie.config import build_agents
    from reverie.models.openai import OpenAIChatModel
    from reverie.models.probe import probe_endpoint

    checks: list[Check] = []
    seen: set[str] = set()
    for model in (m for a in build_agents(config) for m in a.models):
        if not isinstance(model, OpenAIChatModel) or model.name in seen:
            continue
        seen.add(model.name)
        try:
            findings, suggested = await probe_endpoint(model)
        except ModelError as exc:
            checks.append(Check(name=f"probe {model.name}", status="fail", detail=str(exc)))
            continue
        for finding in findings:
            checks.append(
                Check(
                    name=f"probe {model.name}: {finding.feature}",
                    status="ok" if finding.supported else "warn",
                    detail=finding.detail,
                )
            )
        keys = ", ".join(
            f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v)}"
            for k, v in suggested.items()
        ).replace("'", '"')
        checks.append(Check(name=f"probe {model.name}: declare", status="ok", detail=keys))
    return checks


async def _mcp_checks(config: ReverieConfig, *, offline: bool) -> list[Check]:
    """Start (or reach) each configured MCP server and list its tools; stop it again."""
    from reverie.config import mcp_server_settings, mcp_servers

    checks: list[Check] = []
    for name, spec in mcp_server_settings(config).items():
        label = f"mcp server {name}"
        users = [a for a, section in config.agents.items() if name in section.mcp_servers]
        used = f"used by {', '.join(users)}" if users else "no agent uses it"
        if offline and spec.url is not None:
            checks.append(
                Check(name=label, status="ok", detail=f"not contacted (--offline); {used}")
            )
            continue
        try:
            async with mcp_servers(config) as servers:
                await servers.start([name])
                toolset = servers.toolset(name)
                tools = [t.descriptor.name for t in toolset.tools()] if toolset else []
                skipped = servers.warnings.get(name)
        except (ReverieError, OSError) as exc:
            checks.append(Check(name=label, status="fail", detail=str(exc)))
            continue
        if skipped is not None:
            detail = f"optional, did not start (its tools are left out): {skipped}; {used}"
            checks.append(Check(name=label, status="warn", detail=detail))
            continue
        listed = ", ".join(tools) or "none"
        status: CheckStatus = "ok"
        missing = sorted(set(spec.allow_tools or ()) - set(toolset.listed_tools if toolset else ()))
        note = ""
        if missing:
            status = "warn"
            note = f"; allow_tools names tools it does not have: {', '.join(missing)}"
        checks.append(
            Check(name=label, status=status, detail=f"answers; tools: {listed}{note}; {used}")
        )
    return checks


def _hook_check(config: ReverieConfig) -> Check | None:
    from reverie.config import register_hooks
    from reverie.hooks import HookRegistry

    if not config.hooks:
        return None
    try:
        registered = register_hooks(config, HookRegistry())
    except ConfigError as exc:
        return Check(name="hooks", status="fail", detail=str(exc))
    return Check(name="hooks", status="ok", detail=f"{len(registered)} trusted hook(s) import")


def _report(checks: list[Check], *, as_json: bool) -> None:
    if as_json:
        print_json(
            {
                "ok": all(c.status != "fail" for c in checks),
                "checks": [
                    {"name": c.name, "status": c.status, "detail": c.detail} for c in checks
                ],
            }
        )
        return
    styles = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[bold red]FAIL[/]"}
    table = Table(show_edge=False, header_style="bold")
    table.add_column("CHECK", no_wrap=True)
    table.add_column("", no_wrap=True)
    table.add_column("DETAIL")
    for check in checks:
        table.add_row(escape(check.name), styles[check.status], escape(check.detail))
    out_console().print(table)


def doctor_command(
    as_json: JsonOption = False,
    config: ConfigOption = None,
    store: StoreOption = None,
    offline: Annotated[
        bool, typer.Option("--offline", help="Do not contact the model endpoints.")
    ] = False,
    probe: Annotated[
        bool,
        typer.Option(
            "--probe",
            help="Also ask each OpenAI-compatible endpoint once what it supports (a few small "
            "requests) and print the [models.NAME] keys that declare it.",
        ),
    ] = False,
) -> None:
    """Check the configuration, the store, each agent's model, key and endpoint, each MCP
    server (it starts and lists its tools), and the hooks.

    Exit code: 0 all good (warnings allowed), 1 a check failed, 2 the configuration is broken.
    Key values are never printed.
    """

    async def main() -> int:
        try:
            cfg = load(config)
        except ConfigError as exc:
            _report([Check(name="config", status="fail", detail=str(exc))], as_json=as_json)
            err_console().print(f"error: {exc}", markup=False)
            return ExitCode.USAGE
        where = cfg.source if cfg.exists else f"{cfg.source} (no file: defaults)"
        checks = [Check(name="config", status="ok", detail=f"{where} loads")]
        checks.append(await _store_check(cfg, store))
        checks.extend(_agent_checks(cfg))
        checks.extend(await _mcp_checks(cfg, offline=offline))
        if not offline and not any(c.status == "fail" for c in checks):
            checks.extend(await _endpoint_checks(cfg))
            if probe and not any(c.status == "fail" for c in checks):
                checks.extend(await _probe_checks(cfg))
        hook_check = _hook_check(cfg)
        if hook_check is not None:
            checks.append(hook_check)
        _report(checks, as_json=as_json)
        return ExitCode.FAILED if any(c.status == "fail" for c in checks) else ExitCode.OK

    execute(main)
