"""``reverie dev``: the API and the console on 127.0.0.1 with a fresh token printed as a console
URL, serving the offline demo assistant when reverie.toml configures no agent."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from serve.dev_process import child_env, reverie_process, wait_until_up

pytestmark = pytest.mark.slow  # each test starts a Python subprocess


def test_reverie_dev_prints_a_console_url_whose_token_logs_in_once_and_serves_the_demo(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with reverie_process(["dev", "--port", "0"], child_env(home), wait_for="/console/?token=") as (
        _,
        line,
    ):
        url = line.split("Console: ", 1)[1]
        parts = urlsplit(url)
        assert parts.hostname == "127.0.0.1" and parts.path == "/console/"
        token = parse_qs(parts.query)["token"][0]
        base = f"{parts.scheme}://{parts.netloc}"
        wait_until_up(base)
        with httpx.Client(base_url=base, timeout=60, follow_redirects=False) as browser:
            exchanged = browser.get(url)
            assert exchanged.status_code == 303
            assert exchanged.headers["location"] == "/console/"  # the token left the URL
            assert "HttpOnly" in exchanged.headers["set-cookie"]
            api = {"authorization": f"Bearer {token}"}
            started = httpx.post(
                f"{base}/v1/runs", json={"agent": "assistant", "input": "hi"}, headers=api
            ).json()
            with httpx.stream(
                "GET", f"{base}/v1/runs/{started['run_id']}/events", headers=api, timeout=60
            ) as events:
                for _ in events.iter_lines():
                    pass
            run = browser.get(f"/console/runs/{started['run_id']}")
            runs = browser.get("/console/runs")
            agents = browser.get("/console/agents")
    assert run.status_code == 200 and "status-completed" in run.text
    assert "offline demo assistant" in run.text and "2 + 3 = 5" in run.text
    assert started["run_id"] in runs.text and "tester" in runs.text
    assert re.search(r"<h2>assistant</h2>", agents.text)
    assert token not in run.text + runs.text + agents.text
