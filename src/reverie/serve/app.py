"""``create_app``: the Starlette application behind ``reverie serve``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from reverie.core.scope import Scope
from reverie.errors import UsageError
from reverie.models.sdk_model import keep_clients
from reverie.runtime.agent import Agent
from reverie.runtime.runtime import Runtime
from reverie.serve.auth import BearerAuth, TokenTable
from reverie.serve.chat import ChatRoutes
from reverie.serve.context import DEFAULT_SHUTDOWN_GRACE_S, ServeContext
from reverie.serve.errors import SHOULD_RETRY, Redactor, exception_handlers
from reverie.serve.idempotency import IDEMPOTENCY_HEADER
from reverie.serve.limits import DEFAULT_MAX_BODY_BYTES, BodyLimit
from reverie.serve.responses import ResponseRoutes
from reverie.serve.runs import RunRoutes
from reverie.serve.schedules import ScheduleRoutes
from reverie.serve.triggers import TRIGGERS_PREFIX, Trigger, TriggerRoutes

__all__ = ["create_app"]


def create_app(
    runtime: Runtime,
    *,
    agents: Mapping[str, Agent],
    tokens: Mapping[str, Scope],
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    cors_origins: Sequence[str] = (),
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S,
    recover: bool = False,
    schedules: bool = False,
    triggers: Mapping[str, Trigger] | None = None,
    console: bool = True,
    console_session_ttl_s: float | None = None,
) -> Starlette:
    """The HTTP API of ``runtime``: OpenAI-compatible chat completions and reverie's runs API.

    Args:
        runtime: An open runtime. The app does not close it: its owner does, after the server
            stopped.
        agents: The agents clients may use, by the name they use (``model`` in chat
            completions, ``agent`` in ``POST /v1/runs``). They are registered with the runtime,
            so runs blocked on a gate can be approved and resumed here.
        tokens: Bearer tokens and the scope each acts for. Every route needs one; a token's
            scope is the only identity a request has.
        max_body_bytes: Larger request bodies are answered 413 before they are read.
        cors_origins: Browser origins allowed to call the API (``"*"``: any). Empty: no CORS
            headers, so browsers refuse cross-origin calls. Preflight requests are answered
            before authentication (browsers send them without credentials).
        shutdown_grace_s: When the server stops, open streams may go on this long; then the
            streamed turns still running are cancelled with the reason ``server shutdown``.
        recover: When the app starts, resume (in the background) the runs of served agents
            whose worker died (:meth:`Runtime.recover`).
        triggers: Inbound webhooks by name (``POST /v1/triggers/{name}``, verified by their
            Standard Webhooks signature instead of a bearer token; docs/schedules.md).
        schedules: Fire the stored schedules (:meth:`Schedules.serve`) while the app runs;
            ``reverie serve`` does.
        console: Serve the operator console at ``/console`` (docs/console.md): the same
            tokens, scopes and query API, with a session cookie instead of a header.
        console_session_ttl_s: How long a console login lasts (default: 8 hours).

    Returns:
        A Starlette app; serve it with uvicorn (``reverie serve`` does; :func:`run_server`
        gives its streams their grace). Its lifespan enters the served agents' models (each
        keeps one SDK client, with its connections, while the app is served) and cancels the
        app's background work on shutdown.

    Raises:
        UsageError: an empty agent name, a value that is not an :class:`Agent`, a token that
            is empty, contains whitespace or does not map to a :class:`Scope`, or a
            ``max_body_bytes`` below 1 or a negative ``shutdown_grace_s``.

    Example::

        async with Runtime.open("sqlite:///reverie.db") as rt:
            app = create_app(rt, agents={"assistant": agent},
                             tokens={"s3cret": Scope(tenant="acme", user="ana")})
            await uvicorn.Server(uvicorn.Config(app, port=8400)).serve()
    """
    for name, agent in agents.items():
        if not isinstance(agent, Agent):
            raise UsageError(f"agents[{name!r}] is a {type(agent).__name__}, not a reverie.Agent")
        if not name or not name.strip():
            raise UsageError("served agent names must be non-empty")
        runtime.register(agent)
    if max_body_bytes < 1:
        raise UsageError("max_body_bytes must be at least 1")
    if shutdown_grace_s < 0:
        raise UsageError("shutdown_grace_s must be 0 or more")
    table = TokenTable(tokens)
    ctx = ServeContext(runtime, agents, redact=Redactor(tokens), shutdown_grace_s=shutdown_grace_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as models:
            # One SDK client per served model for the server's life (a client per call is
            # freed only by the cyclic collector: the server's memory grew with every turn).
            await keep_clients(models, (m for a in agents.values() for m in a.all_models))
            if recover:
                # In the background: recover() waits for every run it resumes to end.
                ctx.tasks.spawn(runtime.recover(), name="recover runs")
            if schedules:
                # Fires the stored schedules (docs/schedules.md) until the app stops.
                ctx.tasks.spawn(runtime.schedules.serve(), name="fire schedules")
            try:
                yield
            finally:
                await ctx.tasks.aclose()

    app = Starlette(
        routes=[
            *ChatRoutes(ctx).routes(),
            *ResponseRoutes(ctx).routes(),
            *RunRoutes(ctx).routes(),
            *ScheduleRoutes(ctx).routes(),
            *(TriggerRoutes(ctx, triggers).routes() if triggers else []),
        ],
        middleware=[
            *_cors(cors_origins),
            Middleware(BodyLimit, max_bytes=max_body_bytes),
            *_console(ctx, table, console_session_ttl_s, enabled=console),
            Middleware(
                BearerAuth,
                tokens=table,
                signed_prefixes=(TRIGGERS_PREFIX,) if triggers else (),
            ),
        ],
        exception_handlers=exception_handlers(),
        lifespan=lifespan,
    )
    app.state.reverie = ctx
    app.state.redact = ctx.redact
    return app


def _console(
    ctx: ServeContext, tokens: TokenTable, ttl_s: float | None, *, enabled: bool
) -> list[Middleware]:
    """The console before the bearer check (it has its own login), when enabled."""
    if not enabled:
        return []
    if ttl_s is not None and not ttl_s > 0:
        raise UsageError("console_session_ttl_s must be above 0")
    # Imported here: jinja2 and the templates load only for a server that has a console.
    from reverie.serve.console import ConsoleMount, console_app
    from reverie.serve.console.sessions import DEFAULT_SESSION_TTL_S

    app = console_app(ctx, tokens, session_ttl_s=ttl_s or DEFAULT_SESSION_TTL_S)
    return [Middleware(ConsoleMount, console=app)]


def _cors(origins: Sequence[str]) -> list[Middleware]:
    """CORS outermost, so a preflight is answered before authentication."""
    if not origins:
        return []
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=list(origins),
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type", IDEMPOTENCY_HEADER, "last-event-id"],
            expose_headers=["x-reverie-run-id", SHOULD_RETRY, "location"],
        )
    ]
