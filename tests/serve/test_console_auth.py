"""The console's login, sessions and CSRF (docs/console.md, DESIGN §20): the API's tokens and
scopes, a token never left in a URL, an HttpOnly SameSite=Strict cookie that expires, and a
CSRF token on every change."""

from __future__ import annotations

import re

import httpx

from reverie.serve import create_app
from serve.console_support import (
    ANA,
    ANA_TOKEN,
    EVE_TOKEN,
    TOKENS,
    blocked_run,
    console_serving,
    csrf,
    login,
    mailer,
)


async def test_a_console_page_without_a_session_sends_the_browser_to_the_login_form() -> None:
    async with console_serving(mailer()) as srv:
        for path in ("/console/", "/console/runs/run_guessed", "/console/gates", "/console/memory"):
            response = await srv.anon.get(path)
            assert response.status_code == 303, path
            assert response.headers["location"].startswith("/console/login?next=")
        form = await srv.anon.get("/console/login")
    assert form.status_code == 200
    assert 'name="token"' in form.text and 'type="password"' in form.text


async def test_a_token_in_the_url_is_exchanged_once_for_a_cookie_and_dropped_from_the_url() -> None:
    async with console_serving(mailer()) as srv:
        response = await srv.ana.get(
            "/console/runs", params={"token": ANA_TOKEN, "status": "blocked"}
        )
        assert response.status_code == 303
        assert response.headers["location"] == "/console/runs?status=blocked"
        cookie = response.headers["set-cookie"]
        assert cookie.startswith("reverie_console=")
        assert ANA_TOKEN not in cookie  # the cookie is a session id, not the token
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
        assert "Max-Age=" in cookie
        assert "Secure" not in cookie  # plain HTTP on 127.0.0.1: a Secure cookie is never sent
        page = await srv.ana.get("/console/runs?status=blocked")
    assert page.status_code == 200
    assert f"{ANA.tenant} / {ANA.user}" in page.text
    assert ANA_TOKEN not in page.text


async def test_an_unknown_token_in_the_url_leads_to_the_login_form_without_it() -> None:
    async with console_serving(mailer()) as srv:
        response = await srv.anon.get("/console/gates", params={"token": "not-a-token"})
        assert response.status_code == 303
        location = response.headers["location"]
        assert "not-a-token" not in location and location.startswith("/console/login?")
        assert "set-cookie" not in response.headers
        assert (await srv.anon.get("/console/gates")).status_code == 303


async def test_the_login_form_exchanges_a_token_for_a_session() -> None:
    async with console_serving(mailer()) as srv:
        form = await srv.anon.get("/console/login?next=/console/gates")
        nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
        assert nonce is not None
        data = {"nonce": nonce.group(1), "token": ANA_TOKEN, "next": "/console/gates"}
        response = await srv.anon.post("/console/login", data=data)
        assert response.status_code == 303 and response.headers["location"] == "/console/gates"
        assert (await srv.anon.get("/console/gates")).status_code == 200


async def test_login_never_redirects_off_the_console() -> None:
    async with console_serving(mailer()) as srv:
        for target in ("https://evil.example/", "//evil.example/", "/v1/runs", "/console/\\x"):
            form = await srv.anon.get("/console/login")
            nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
            assert nonce is not None
            data = {"nonce": nonce.group(1), "token": ANA_TOKEN, "next": target}
            response = await srv.anon.post("/console/login", data=data)
            assert response.headers["location"] == "/console/", target
            srv.anon.cookies.clear()


async def test_a_login_post_without_the_forms_cookie_is_refused() -> None:
    async with console_serving(mailer()) as srv:
        forged = await srv.anon.post(
            "/console/login", data={"nonce": "made-up", "token": ANA_TOKEN}
        )
        assert forged.status_code == 403
        assert "set-cookie" not in forged.headers
        assert (await srv.anon.get("/console/")).status_code == 303


async def test_logout_ends_the_session_for_the_cookie_too() -> None:
    async with console_serving(mailer()) as srv:
        await login(srv.ana, ANA_TOKEN)
        old_cookie = srv.ana.cookies.get("reverie_console")
        token = await csrf(srv.ana)
        response = await srv.ana.post("/console/logout", data={"csrf": token})
        assert response.status_code == 303
        assert (await srv.ana.get("/console/runs")).status_code == 303
        # A copy of the old cookie is worth nothing either.
        replay = await srv.anon.get(
            "/console/runs", headers={"cookie": f"reverie_console={old_cookie}"}
        )
        assert replay.status_code == 303


async def test_an_expired_session_is_sent_back_to_the_login_form() -> None:
    # A lifetime far below the clock's resolution: the session has expired when next used.
    async with console_serving(mailer(), console_session_ttl_s=1e-9) as srv:
        await login(srv.ana, ANA_TOKEN)
        response = await srv.ana.get("/console/runs")
    assert response.status_code == 303
    assert response.headers["location"].startswith("/console/login")


async def test_the_session_cookie_is_secure_over_tls() -> None:
    async with console_serving(mailer()) as srv:
        app = create_app(srv.rt, agents={}, tokens=TOKENS)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://reverie.test") as c:
            response = await c.get("/console/", params={"token": ANA_TOKEN})
    assert response.status_code == 303
    assert "Secure" in response.headers["set-cookie"]


async def test_every_change_needs_the_sessions_csrf_token() -> None:
    async with console_serving(mailer()) as srv:
        run = await blocked_run(srv.api_ana)
        await login(srv.ana, ANA_TOKEN)
        cancel = f"/console/runs/{run['run_id']}/cancel"
        approve = f"/console/gates/{run['ref']}/approve"
        for data in ({}, {"csrf": "forged"}):
            assert (await srv.ana.post(cancel, data=data)).status_code == 403
            assert (await srv.ana.post(approve, data=data)).status_code == 403
        # Without a session at all (a cross-site form: SameSite=Strict sends no cookie).
        assert (await srv.anon.post(cancel, data={"csrf": "x"})).status_code == 403
        assert (await srv.api_ana.get(f"/v1/runs/{run['run_id']}")).json()["status"] == "blocked"
        assert (await srv.api_ana.get("/v1/gates")).json()["data"][0]["status"] == "pending"
        # Another session's CSRF token is no good either.
        await login(srv.anon, ANA_TOKEN)
        other = await csrf(srv.anon)
        assert (await srv.ana.post(cancel, data={"csrf": other})).status_code == 403
        response = await srv.ana.post(cancel, data={"csrf": await csrf(srv.ana)})
        assert response.status_code == 303
        status = (await srv.api_ana.get(f"/v1/runs/{run['run_id']}")).json()["status"]
    assert status == "cancelled"


async def test_console_false_serves_no_console() -> None:
    async with console_serving(mailer(), console=False) as srv:
        response = await srv.anon.get("/console/", params={"token": ANA_TOKEN})
    assert response.status_code == 401  # the API's bearer check: no console route exists


async def test_each_login_makes_a_new_session_and_ends_the_browsers_previous_one() -> None:
    async with console_serving(mailer()) as srv:
        await login(srv.ana, ANA_TOKEN)
        first = srv.ana.cookies.get("reverie_console")
        # The form (a person's own choice) logs in again from the same browser: both cookies go.
        cookies = f"reverie_console={first}; reverie_console_login=n0nce"
        again = await srv.anon.post(
            "/console/login",
            data={"nonce": "n0nce", "token": ANA_TOKEN},
            headers={"cookie": cookies},
        )
        assert again.status_code == 303
        second = again.cookies.get("reverie_console")
        assert first and second and first != second
        old = await srv.anon.get("/console/runs", headers={"cookie": f"reverie_console={first}"})
        new = await srv.anon.get("/console/runs", headers={"cookie": f"reverie_console={second}"})
    assert old.status_code == 303 and new.status_code == 200


async def test_the_login_page_takes_a_url_token_and_sends_a_logged_in_person_on() -> None:
    async with console_serving(mailer()) as srv:
        exchanged = await srv.ana.get(
            "/console/login", params={"token": ANA_TOKEN, "next": "/console/gates"}
        )
        assert exchanged.status_code == 303
        assert exchanged.headers["location"] == "/console/gates"
        again = await srv.ana.get("/console/login", params={"next": "/console/memory"})
        refused = await srv.anon.get("/console/login", params={"token": "wrong-token"})
    assert again.status_code == 303 and again.headers["location"] == "/console/memory"
    assert refused.status_code == 303 and "wrong-token" not in refused.headers["location"]


async def test_a_url_token_never_replaces_a_live_session() -> None:
    # A link carrying someone else's token (login CSRF) leaves the person logged in as they were.
    async with console_serving(mailer()) as srv:
        await login(srv.ana, ANA_TOKEN)
        mine = srv.ana.cookies.get("reverie_console")
        response = await srv.ana.get("/console/gates", params={"token": EVE_TOKEN})
        assert response.status_code == 303 and response.headers["location"] == "/console/gates"
        assert "set-cookie" not in response.headers
        page = await srv.ana.get("/console/gates")
    assert srv.ana.cookies.get("reverie_console") == mine
    assert "acme / ana" in page.text and "globex" not in page.text
