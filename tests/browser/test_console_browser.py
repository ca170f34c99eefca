"""The console in a real browser (headless Chromium) against a real ``reverie serve``: as the
person (login, live runs, approving a gate) and as the attacker (a second tenant, injected
markup). docs/console.md."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from browser.conftest import ANA_TOKEN, EVE_TOKEN, Server

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WAIT_MS = 60_000
"""A hang guard for the live parts (they poll every 2 s); never a timing assumption."""


class Person:
    """A browser context (its own cookies) and one page, watching for dialogs and CSP reports."""

    def __init__(self, browser: Any, server: Server, *, javascript: bool = True) -> None:
        self.server = server
        self.context = browser.new_context(java_script_enabled=javascript)
        self.page = self.context.new_page()
        self.page.set_default_timeout(WAIT_MS)
        self.dialogs: list[str] = []
        self.csp_violations: list[str] = []
        self.page.on("dialog", self._dialog)
        self.page.on("console", self._console)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def _console(self, message: Any) -> None:
        if "Content Security Policy" in message.text:
            self.csp_violations.append(message.text)

    def goto(self, path: str) -> Any:
        return self.page.goto(self.server.base + path)

    def login(self, token: str) -> None:
        self.goto("/console/login")
        self.page.fill("#token", token)
        self.page.click("button[type=submit]")
        self.page.wait_for_url("**/console/")

    def login_by_url(self, token: str) -> None:
        """As ``reverie dev``'s printed URL does: the token leaves the address bar at once."""
        self.goto(f"/console/?token={token}")
        assert self.page.url == f"{self.server.base}/console/"

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def ana(browser: Any, server: Server) -> Iterator[Person]:
    person = Person(browser, server)
    yield person
    person.close()


@pytest.fixture
def eve(browser: Any, server: Server) -> Iterator[Person]:
    person = Person(browser, server)
    yield person
    person.close()


def test_a_person_logs_in_with_a_token_and_a_run_started_over_the_api_appears_live(
    ana: Person, server: Server
) -> None:
    ana.login(ANA_TOKEN)
    assert ana.page.url == f"{server.base}/console/"
    assert ANA_TOKEN not in ana.page.url
    assert ana.page.inner_text("header .who") == "acme / ana"
    cookie = next(c for c in ana.context.cookies() if c["name"] == "reverie_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    started = server.start(ANA_TOKEN, "mailer")
    # No reload: the list's live part brings the new row in.
    row = ana.page.wait_for_selector(f'tr[data-run="{started["run_id"]}"]')
    assert row is not None
    # ... and its status changes in place as the run blocks on its gate.
    ana.page.wait_for_selector(f'tr[data-run="{started["run_id"]}"] .status-blocked')
    assert ana.dialogs == [] and ana.csp_violations == []


def test_approving_a_gate_in_the_browser_completes_the_run(ana: Person, server: Server) -> None:
    started = server.start(ANA_TOKEN, "mailer")
    assert server.settle(ANA_TOKEN, started["run_id"])["status"] == "blocked"
    ana.login(ANA_TOKEN)
    ana.goto("/console/gates")
    row = ana.page.locator("#pending-gates tr", has_text=started["run_id"])
    assert "carol@example.com" in row.inner_text()
    row.locator("button.approve").click()
    ana.page.wait_for_url(f"**/console/runs/{started['run_id']}")
    # The run page follows the resumed run until it completes.
    ana.page.wait_for_selector("#run-live .status-completed")
    assert ana.page.inner_text("#reply") == "sent"
    assert "finished" in ana.page.inner_text("#journal")
    assert server.settle(ANA_TOKEN, started["run_id"])["status"] == "completed"
    assert ana.csp_violations == []


def test_a_second_tenants_browser_sees_none_of_the_firsts_runs_or_gates(
    ana: Person, eve: Person, server: Server
) -> None:
    anas = server.start(ANA_TOKEN, "mailer")
    server.settle(ANA_TOKEN, anas["run_id"])
    ana.login(ANA_TOKEN)
    ana.goto("/console/gates")
    assert anas["run_id"] in ana.page.content()
    eve.login_by_url(EVE_TOKEN)
    assert eve.page.inner_text("header .who") == "globex / eve"
    assert EVE_TOKEN not in eve.page.evaluate("location.href")
    for path in ("/console/runs", "/console/gates", "/console/threads"):
        eve.goto(path)
        assert anas["run_id"] not in eve.page.content(), path
        assert anas["thread_id"] not in eve.page.content(), path
    for path in (
        f"/console/runs/{anas['run_id']}",
        f"/console/threads/{anas['thread_id']}",
    ):
        response = eve.goto(path)
        assert response.status == 404, path
        assert "acme" not in eve.page.content()
    # Ana's session cookie is hers alone: eve's context never had it.
    assert all(c["value"] != ANA_TOKEN for c in eve.context.cookies())


def test_markup_injected_by_a_model_reply_is_inert_in_the_browser(
    ana: Person, server: Server
) -> None:
    started = server.start(ANA_TOKEN, "hostile")
    assert server.settle(ANA_TOKEN, started["run_id"])["status"] == "completed"
    ana.login(ANA_TOKEN)
    for path in (f"/console/runs/{started['run_id']}", f"/console/threads/{started['thread_id']}"):
        ana.goto(path)
        page = ana.page
        assert page.title() != "pwned"
        assert page.evaluate("document.body.dataset.pwned") is None
        assert page.evaluate("document.querySelectorAll('img').length") == 0
        scripts = page.evaluate("[...document.scripts].map(s => s.getAttribute('src'))")
        assert scripts == ["/console/static/htmx.min.js"]
        # The markup is on the page as text, where a person can read it.
        assert "<img src=x onerror=" in page.inner_text("main")
    assert ana.dialogs == []
    assert ana.csp_violations == []


def test_with_javascript_off_a_person_still_logs_in_reads_and_approves(
    browser: Any, server: Server
) -> None:
    started = server.start(ANA_TOKEN, "mailer")
    server.settle(ANA_TOKEN, started["run_id"])
    person = Person(browser, server, javascript=False)
    try:
        person.login(ANA_TOKEN)
        assert person.page.locator(f'tr[data-run="{started["run_id"]}"]').count() == 1
        person.goto(f"/console/runs/{started['run_id']}")
        assert "carol@example.com" in person.page.inner_text("#run-live")
        person.page.locator("#run-live button.approve").click()  # a plain form post
        person.page.wait_for_url(f"**/console/runs/{started['run_id']}")
        assert server.settle(ANA_TOKEN, started["run_id"])["status"] == "completed"
        person.page.reload()
        assert person.page.inner_text("#reply") == "sent"
    finally:
        person.close()
