"""The HTTP surface (docs/cli.md): OpenAI-compatible chat completions and reverie's runs API.

Needs the ``serve`` extra (Starlette, uvicorn, sse-starlette)::

    pip install 'reverie[serve]'

Build the app with :func:`create_app` and serve it with uvicorn, or run ``reverie serve``.
``docs/http.md`` is the user's guide. ``import reverie`` never imports this package.
"""

from __future__ import annotations

from reverie.errors import MissingExtraError

try:
    import sse_starlette  # noqa: F401
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # the tests simulate the extra's absence
    raise MissingExtraError("serve", "the HTTP server (reverie serve)") from exc

from reverie.serve.app import create_app
from reverie.serve.server import background_server, listen, run_server

__all__ = ["background_server", "create_app", "listen", "run_server"]
