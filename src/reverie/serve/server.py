"""Running an app with uvicorn: in the foreground (``reverie serve``) or in the background of the
current event loop (tests, embedding)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import math
import signal
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn
from sse_starlette.sse import AppStatus

from reverie.errors import ListenError
from reverie.serve.context import DEFAULT_SHUTDOWN_GRACE_S, STREAM_FAREWELL_S

__all__ = ["background_server", "listen", "run_server"]

_STARTUP_TIMEOUT_S = 10.0


_SHUTDOWN_MARGIN_S = 2.0
"""uvicorn waits this much longer than the streams' grace, so the streams are cut by the app
(their runs cancelled as ``server shutdown``) rather than by uvicorn."""


def _grace(app: Any) -> float:
    ctx = getattr(getattr(app, "state", None), "reverie", None)
    return float(getattr(ctx, "shutdown_grace_s", DEFAULT_SHUTDOWN_GRACE_S))


def _config(app: Any, **options: Any) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        lifespan="on",
        ws="none",
        # Streams end when their run ends; a streamed turn still open after its grace is
        # cancelled and its stream sends its closing error, before uvicorn gives up on it.
        timeout_graceful_shutdown=math.ceil(_grace(app) + STREAM_FAREWELL_S + _SHUTDOWN_MARGIN_S),
        **options,
    )


class _BackgroundServer(uvicorn.Server):
    """uvicorn's server without signal handling (the host owns signals), stopped by an event
    rather than the stock 0.1 s exit poll."""

    stop: asyncio.Event | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        await self.on_tick(0)  # sets the default response headers, as the stock loop does
        if self.stop is not None:
            await self.stop.wait()


class _ForegroundServer(uvicorn.Server):
    """uvicorn's server, whose SIGINT/SIGTERM end :func:`run_server` normally.

    Stock uvicorn raises the signal again once it has shut down, which would kill the process
    (SIGTERM) or raise ``KeyboardInterrupt`` before the runtime and its store are closed.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``0``: a free port), ready for :func:`run_server`.

    Binding first, before anything else starts, makes "the port is in use" a typed error the
    CLI reports with its own exit code, instead of a log line from deep inside uvicorn.

    Raises:
        ListenError: the address is in use, cannot be resolved, or binding is not permitted.
    """
    try:
        infos = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise ListenError(host, port, f"the host cannot be resolved ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        # As uvicorn does: a restarted server may rebind while old connections are in TIME_WAIT
        # (it never lets two listeners share a port on Linux).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        reason = "the address is already in use" if exc.errno == errno.EADDRINUSE else None
        raise ListenError(host, port, reason or exc.strerror or type(exc).__name__) from None
    return sock


async def run_server(
    app: Any,
    *,
    host: str,
    port: int,
    log_level: str = "info",
    sock: socket.socket | None = None,
) -> None:
    """Serve ``app`` until SIGINT or SIGTERM, then shut down gracefully and return.

    New connections are refused at once; open streams may go on for the app's
    ``shutdown_grace_s`` (then their streamed turns are cancelled as ``server shutdown``); the
    app's lifespan then cancels its background work. The caller closes the runtime afterwards.

    Args:
        app: The ASGI app.
        host: The address to listen on (also what the logs name).
        port: The port to listen on.
        log_level: uvicorn's log level.
        sock: A socket from :func:`listen` to serve on instead of binding ``host:port`` here.

    Raises:
        ListenError: ``sock`` is not given and ``host:port`` cannot be bound.
    """
    listener = sock if sock is not None else listen(host, port)
    server = _ForegroundServer(_config(app, host=host, port=port, log_level=log_level))
    try:
        await server.serve(sockets=[listener])
    finally:
        if sock is None:
            listener.close()
        # sse-starlette records a shutdown in a process-wide flag that nothing resets: left
        # set, every stream of a later server in this process would end at once.
        AppStatus.should_exit = False


@contextlib.asynccontextmanager
async def background_server(app: Any, *, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve ``app`` on a free port of ``host`` in this event loop; yields the base URL.

    For tests and embedding: the app runs in the same loop as the caller's runtime, so a test
    can drive it over real HTTP while holding the runtime::

        async with background_server(create_app(rt, agents=..., tokens=...)) as url:
            async with httpx.AsyncClient(base_url=url) as client: ...
    """
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP,
    # and accepted sockets inherit it. With proto 0, Nagle + delayed ACKs add ~40 ms a request.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = _BackgroundServer(
        _config(app, log_config=None, log_level="warning", access_log=False, http="h11")
    )
    server.stop = asyncio.Event()
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(_STARTUP_TIMEOUT_S):
            while not server.started:
                if task.done():
                    task.result()  # startup failed: raise its error
                    raise RuntimeError("the server stopped during startup")
                await asyncio.sleep(0.005)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        server.stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()
