"""Who is asking: login, logout, the ``?token=`` exchange, and the guards every page passes.

- A page (GET) needs a live session; without one the browser is sent to the login form (the
  same answer for every path, so a guess learns nothing).
- A ``?token=…`` URL (what ``reverie dev`` prints) is exchanged for a session once and answered
  with a redirect to the same page without the token, so it leaves the address bar and the
  history; an unknown token goes to the login form, also without it. A browser that has a live
  session keeps it: the token of a link is then ignored (dropped from the URL all the same).
- A change (POST) needs a live session and its CSRF token in the form's ``csrf`` field; the
  login form, which has no session yet, carries a token that must match a ``SameSite=Strict``
  cookie set with the form (double submit).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from reverie.errors import ReverieError
from reverie.serve.console.sessions import Session
from reverie.serve.console.state import Console
from reverie.serve.errors import APIError, from_reverie_error

__all__ = [
    "COOKIE",
    "LOGIN_COOKIE",
    "Action",
    "Page",
    "acting",
    "login_routes",
    "reading",
    "safe_next",
]

COOKIE = "reverie_console"
"""The session cookie (its value is the session id)."""

LOGIN_COOKIE = "reverie_console_login"
"""The login form's double-submit CSRF cookie."""

MAX_FORM_FIELDS = 20

log = logging.getLogger("reverie.serve.console")

Page = Callable[[Request, Session], Awaitable[Response]]
Action = Callable[[Request, Session, FormData], Awaitable[Response]]


def safe_next(value: str | None) -> str:
    """Where to go after login: a console path only (never another site: no open redirect)."""
    if (
        value
        and value.startswith("/console/")
        and not value.startswith("//")
        and "\\" not in value
        and value.isprintable()
    ):
        return value
    return "/console/"


def _cookie(response: Response, request: Request, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def _without_token(request: Request) -> str:
    """The request's path and query, minus ``token``."""
    kept = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    return request.url.path + (f"?{urlencode(kept)}" if kept else "")


def _login_redirect(request: Request) -> RedirectResponse:
    query = {"next": safe_next(_without_token(request))}
    return RedirectResponse(f"/console/login?{urlencode(query)}", status_code=303)


def _start_session(console: Console, request: Request, session: Session, to: str) -> Response:
    # A new id at every login (no fixation), and the browser's previous session ends with it.
    console.sessions.logout(request.cookies.get(COOKIE))
    response = RedirectResponse(to, status_code=303)
    _cookie(response, request, COOKIE, session.session_id, int(console.sessions.ttl_s))
    response.delete_cookie(LOGIN_COOKIE, path="/console")
    return response


def _url_login(console: Console, request: Request, to: str) -> Response:
    """A ``?token=`` URL: exchanged for a session, then ``to`` (without the token).

    Only a browser without a live session is logged in this way: a link someone else sent
    cannot swap a person's session for the sender's (log out first, or use the form).
    """
    if console.sessions.get(request.cookies.get(COOKIE)) is not None:
        return RedirectResponse(to, status_code=303)
    session = console.sessions.login(request.query_params.get("token") or "")
    if session is None:
        query = urlencode({"next": safe_next(to), "failed": "1"})
        return RedirectResponse(f"/console/login?{query}", status_code=303)
    return _start_session(console, request, session, to)


async def _guarded(console: Console, request: Request, work: Awaitable[Response]) -> Response:
    """``work``'s answer; a typed failure becomes the error page with its HTTP status."""
    try:
        return await work
    except APIError as exc:
        return console.error_page(request, exc.status, exc.message)
    except ReverieError as exc:
        error = from_reverie_error(exc)
        return console.error_page(request, error.status, error.message)
    except Exception:
        # Answered here, inside the console's headers (CSP and all), never with a traceback.
        log.exception("console %s %s failed", request.method, request.url.path)
        return console.error_page(request, 500, "the console failed; the server log has why")


def reading(console: Console, page: Page) -> Callable[[Request], Awaitable[Response]]:
    """A GET endpoint for logged-in people (``?token=`` exchanged first)."""

    async def endpoint(request: Request) -> Response:
        if request.query_params.get("token") is not None:
            return _url_login(console, request, _without_token(request))
        session = console.sessions.get(request.cookies.get(COOKIE))
        if session is None:
            if request.headers.get("hx-request"):
                # A live fragment whose session ended: tell htmx to load the login page.
                return Response(status_code=401, headers={"hx-redirect": "/console/login"})
            return _login_redirect(request)
        return await _guarded(console, request, page(request, session))

    return endpoint


def acting(console: Console, action: Action) -> Callable[[Request], Awaitable[Response]]:
    """A POST endpoint: a live session and its CSRF token, or 403 and nothing changes."""

    async def endpoint(request: Request) -> Response:
        session = console.sessions.get(request.cookies.get(COOKIE))
        if session is None:
            return console.error_page(request, 403, "your session has ended: log in again")
        form = await request.form(max_fields=MAX_FORM_FIELDS, max_files=0)
        sent = form.get("csrf")
        if not session.csrf_ok(sent if isinstance(sent, str) else None):
            return console.error_page(request, 403, "this form is stale or forged (CSRF check)")
        return await _guarded(console, request, action(request, session, form))

    return endpoint


def login_routes(console: Console) -> list[Route]:
    """``/console/login`` (form and submit) and ``/console/logout``."""

    async def form(request: Request) -> Response:
        to = safe_next(request.query_params.get("next"))
        if request.query_params.get("token") is not None:
            return _url_login(console, request, to)
        if console.sessions.get(request.cookies.get(COOKIE)) is not None:
            return RedirectResponse(to, status_code=303)  # already logged in
        nonce = secrets.token_urlsafe(32)
        response = console.templates.response(
            "login.html",
            {
                "nonce": nonce,
                "next": to,
                "failed": request.query_params.get("failed") == "1",
                "session": None,
            },
        )
        _cookie(response, request, LOGIN_COOKIE, nonce, 3600)
        return response

    async def submit(request: Request) -> Response:
        data = await request.form(max_fields=MAX_FORM_FIELDS, max_files=0)
        nonce, cookie = data.get("nonce"), request.cookies.get(LOGIN_COOKIE)
        if not isinstance(nonce, str) or not cookie or not secrets.compare_digest(nonce, cookie):
            return console.error_page(request, 403, "the login form is stale: load it again")
        token = data.get("token")
        session = console.sessions.login(token) if isinstance(token, str) else None
        to = safe_next(str(data.get("next") or ""))
        if session is None:
            query = urlencode({"next": to, "failed": "1"})
            return RedirectResponse(f"/console/login?{query}", status_code=303)
        return _start_session(console, request, session, to)

    async def logout(request: Request, session: Session, form: FormData) -> Response:
        console.sessions.logout(session.session_id)
        response = RedirectResponse("/console/login", status_code=303)
        response.delete_cookie(COOKIE, path="/console")
        return response

    return [
        Route("/console/login", form, methods=["GET"]),
        Route("/console/login", submit, methods=["POST"]),
        Route("/console/logout", acting(console, logout), methods=["POST"]),
    ]
