"""A real ``reverie serve`` child and headless Chromium driven by Playwright (docs/console.md).

The browser is Debian's ``chromium`` (``/usr/bin/chromium``; ``$REVERIE_CHROMIUM`` overrides),
never Playwright's own download. Without Playwright or the browser every test here is skipped,
saying which is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from serve.dev_process import child_env, reverie_process, wait_until_up

CHROMIUM = os.environ.get("REVERIE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TESTS = Path(__file__).resolve().parent.parent

ANA_TOKEN = "tok-browser-ana-8c1f2e"
EVE_TOKEN = "tok-browser-eve-3a9d57"
HOSTILE_REPLY = (
    "done <script>document.title='pwned'</script> "
    "<img src=x onerror=\"document.body.dataset.pwned='1'\">"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = _missing()
    for item in items:
        if reason and Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.skip(reason=reason))


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright; the dev extra has it)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no chromium at {CHROMIUM} (apt-get install chromium, or set REVERIE_CHROMIUM)"
    return None


@dataclass
class Server:
    """The child server: its base URL and an API client per tenant."""

    base: str

    def api(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.base, headers={"authorization": f"Bearer {token}"}, timeout=60
        )

    def start(self, token: str, agent: str, text: str = "go") -> dict[str, Any]:
        with self.api(token) as api:
            response = api.post("/v1/runs", json={"agent": agent, "input": text})
            assert response.status_code == 201, response.text
            return dict(response.json())

    def settle(self, token: str, run_id: str) -> dict[str, Any]:
        """The run once its event stream ended (it completed, failed or blocked)."""
        with self.api(token) as api:
            with api.stream("GET", f"/v1/runs/{run_id}/events") as events:
                for _ in events.iter_lines():
                    pass
            return dict(api.get(f"/v1/runs/{run_id}").json())


def _config(tmp: Path) -> Path:
    home = tmp / "home"
    home.mkdir()
    mailer = tmp / "mailer.json"
    mailer.write_text(
        json.dumps(
            [{"call": "send_email", "arguments": {"to": "carol@example.com"}}, {"reply": "sent"}]
        )
    )
    hostile = tmp / "hostile.json"
    hostile.write_text(json.dumps([{"reply": HOSTILE_REPLY}]))
    (home / "reverie.toml").write_text(
        f"""
[agents.mailer]
model = {json.dumps("scripted:" + str(mailer))}
tools = ["browser.browser_tools:send_email"]

[agents.hostile]
model = {json.dumps("scripted:" + str(hostile))}

[auth.tokens]
ana = {{ token_env = "TOK_ANA", tenant = "acme", user = "ana" }}
eve = {{ token_env = "TOK_EVE", tenant = "globex", user = "eve" }}
""",
        encoding="utf-8",
    )
    return home


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``reverie serve --port 0`` in a child process, for every test of a module."""
    home = _config(tmp_path_factory.mktemp("console-browser"))
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p)
    env = child_env(home, TOK_ANA=ANA_TOKEN, TOK_EVE=EVE_TOKEN, PYTHONPATH=path)
    with reverie_process(["serve", "--port", "0"], env, wait_for="reverie serve:") as (_, line):
        found = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert found is not None, line
        wait_until_up(found.group(0))
        yield Server(base=found.group(0))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium (module scope: one browser, a context per person)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            launched.close()
