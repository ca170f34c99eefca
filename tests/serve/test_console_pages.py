"""The console's pages show what the query API returns, escaped, under a strict CSP; their
actions make the runs API's calls (docs/console.md)."""

from __future__ import annotations

import asyncio
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import httpx

from reverie import Agent, Runtime, tool
from reverie.capabilities import MCPToolset
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.serve import background_server, create_app
from reverie.testing import ScriptedModel, call, reply
from serve.console_support import (
    ANA,
    ANA_TOKEN,
    IMG,
    SCRIPT,
    blocked_run,
    console_serving,
    csrf,
    echo,
    login,
    mailer,
    settled,
)

TESTS = Path(__file__).resolve().parent.parent


class _Markup(HTMLParser):
    """Collects the elements a page really has (what a browser would build)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _elements(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Markup()
    parser.feed(html)
    return parser.tags


def _assert_inert(html: str) -> None:
    """No script but the console's own file, no event handler, no image, no inline style."""
    for tag, attrs in _elements(html):
        if tag == "script":
            assert attrs.get("src") == "/console/static/htmx.min.js", attrs
        assert tag != "img", attrs
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        assert "style" not in attrs, (tag, attrs)


def hostile() -> Agent:
    """A model whose tool arguments and reply carry markup, and a tool whose output does."""

    @tool(effects={"write"}, needs_approval=True)
    async def post(body: str) -> str:
        """Post a message."""
        return f"posted {IMG}"

    model = ScriptedModel(
        lambda r: (
            reply(f"done {SCRIPT} {IMG}")
            if r.messages[-1].role == "tool"
            else call("post", body=SCRIPT)
        )
    )
    return Agent(name="hostile", model=model, tools=[post])


async def test_model_tool_and_memory_markup_renders_as_text_on_every_page() -> None:
    async with console_serving(hostile()) as srv:
        await srv.rt.memory.write(ANA, "MEMORY.md", f"note {SCRIPT} {IMG}", expected_version=0)
        run = await blocked_run(srv.api_ana, "hostile")
        await login(srv.ana, ANA_TOKEN)
        gates = await srv.ana.get("/console/gates")
        token = await csrf(srv.ana)
        await srv.ana.post(f"/console/gates/{run['ref']}/approve", data={"csrf": token})
        assert (await settled(srv.api_ana, run["run_id"]))["status"] == "completed"
        pages = [
            gates,
            await srv.ana.get(f"/console/runs/{run['run_id']}"),
            await srv.ana.get(f"/console/runs/{run['run_id']}/live"),
            await srv.ana.get(f"/console/threads/{run['thread_id']}"),
            await srv.ana.get("/console/memory", params={"q": "note"}),
        ]
    for page in pages:
        assert page.status_code == 200
        _assert_inert(page.text)
        assert "&lt;script&gt;" in page.text or "&lt;img" in page.text
    assert "&lt;img src=x onerror=" in pages[1].text  # the reply and the tool output, as text


async def test_every_console_response_sends_a_strict_csp_and_refuses_framing() -> None:
    async with console_serving(echo()) as srv:
        await login(srv.ana, ANA_TOKEN)
        responses = [
            await srv.anon.get("/console/login"),
            await srv.anon.get("/console/runs"),  # the redirect to login
            await srv.ana.get("/console/runs"),
            await srv.ana.get("/console/runs/rows"),
            await srv.ana.get("/console/runs/run_missing"),
            await srv.ana.get("/console/no-such-page"),
            await srv.ana.get("/console/static/htmx.min.js"),
            await srv.ana.get("/console/static/console.css"),
        ]
    for response in responses:
        csp = response.headers["content-security-policy"]
        directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
        assert directives["default-src"] == "'self'"
        assert directives["script-src"] == "'self'"
        assert directives["frame-ancestors"] == "'none'"
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"
    assert responses[2].headers["cache-control"] == "no-store"
    assert responses[6].headers["content-type"].startswith("text/javascript")


async def test_no_console_page_has_inline_script_or_a_token() -> None:
    async with console_serving(mailer(), echo()) as srv:
        run = await blocked_run(srv.api_ana)
        await login(srv.ana, ANA_TOKEN)
        login_page = await srv.anon.get("/console/login")
        paths = [
            "/console/runs",
            f"/console/runs/{run['run_id']}",
            "/console/gates",
            "/console/threads",
            f"/console/threads/{run['thread_id']}",
            "/console/memory",
            "/console/agents",
        ]
        pages = [await srv.ana.get(p) for p in paths]
    _assert_inert(login_page.text)
    for path, page in zip(paths, pages, strict=True):
        assert page.status_code == 200, path
        _assert_inert(page.text)
        assert ANA_TOKEN not in page.text, path


async def test_the_runs_list_filters_by_status_agent_and_thread_and_pages_by_cursor() -> None:
    async with console_serving(mailer(), echo()) as srv:
        blocked = await blocked_run(srv.api_ana)
        done = []
        for _ in range(3):
            started = await srv.api_ana.post("/v1/runs", json={"agent": "echo", "input": "hi"})
            done.append(started.json()["run_id"])
            await settled(srv.api_ana, done[-1])
        await login(srv.ana, ANA_TOKEN)

        async def listed(query: str) -> list[str]:
            page = await srv.ana.get(f"/console/runs?{query}")
            assert page.status_code == 200
            return re.findall(r'data-run="([^"]+)"', page.text)

        assert await listed("status=blocked") == [blocked["run_id"]]
        assert await listed("agent=echo") == done[::-1]
        assert await listed(f"thread={blocked['thread_id']}") == [blocked["run_id"]]
        assert await listed("status=completed&agent=mailer") == []
        from reverie.serve.console import runs as console_runs

        original = console_runs.PAGE_SIZE
        console_runs.PAGE_SIZE = 2
        try:
            first = await srv.ana.get("/console/runs")
            cursor = re.search(r'id="next-page" href="/console/runs\?([^"]+)"', first.text)
            assert cursor is not None
            second = await listed(cursor.group(1).replace("&amp;", "&"))
        finally:
            console_runs.PAGE_SIZE = original
        page_one = re.findall(r'data-run="([^"]+)"', first.text)
        assert page_one + second == [*done[::-1], blocked["run_id"]]
        bad = await srv.ana.get("/console/runs?before=nonsense")
        unknown = await srv.ana.get("/console/runs?status=exploded")
    assert bad.status_code == 400 and unknown.status_code == 400


async def test_the_runs_list_filters_by_the_day_runs_started_by() -> None:
    async with console_serving(echo()) as srv:
        started = await srv.api_ana.post("/v1/runs", json={"agent": "echo", "input": "hi"})
        run_id = started.json()["run_id"]
        await settled(srv.api_ana, run_id)
        created = (await srv.api_ana.get(f"/v1/runs/{run_id}")).json()["created_at"]
        await login(srv.ana, ANA_TOKEN)
        same_day = await srv.ana.get("/console/runs", params={"until": created[:10]})
        earlier = await srv.ana.get("/console/runs", params={"until": "2000-01-01"})
        bad = await srv.ana.get("/console/runs", params={"until": "yesterday"})
    assert f'data-run="{run_id}"' in same_day.text
    assert 'data-run="' not in earlier.text
    assert "hx-get" not in earlier.text.split('id="run-rows"')[1][:40]  # a past window: not live
    assert bad.status_code == 400


async def test_approving_a_gate_in_the_console_resumes_the_run_to_completion() -> None:
    async with console_serving(mailer("all sent")) as srv:
        run = await blocked_run(srv.api_ana)
        await login(srv.ana, ANA_TOKEN)
        inbox = await srv.ana.get("/console/gates")
        assert run["ref"] in inbox.text and "carol@example.com" in inbox.text
        response = await srv.ana.post(
            f"/console/gates/{run['ref']}/approve", data={"csrf": await csrf(srv.ana)}
        )
        assert response.status_code == 303
        assert response.headers["location"] == f"/console/runs/{run['run_id']}"
        assert (await settled(srv.api_ana, run["run_id"]))["text"] == "all sent"
        page = await srv.ana.get(f"/console/runs/{run['run_id']}")
        again = await srv.ana.post(
            f"/console/gates/{run['ref']}/approve", data={"csrf": await csrf(srv.ana)}
        )
        resolved = await srv.ana.get("/console/gates")
    assert "status-completed" in page.text and "all sent" in page.text
    # The journal: the approved call finished; send_email is not idempotent.
    journal = page.text.split('id="journal"')[1].split("</table>")[0]
    assert "send_email" in journal and "finished" in journal and "<td>no</td>" in journal
    assert again.status_code == 409  # resolved once
    assert 'id="resolved-gates"' in resolved.text and "approved" in resolved.text


async def test_denying_a_gate_with_a_reason_tells_the_model_and_shows_when() -> None:
    async with console_serving(mailer("understood")) as srv:
        run = await blocked_run(srv.api_ana)
        await login(srv.ana, ANA_TOKEN)
        token = await csrf(srv.ana)
        await srv.ana.post(
            f"/console/gates/{run['ref']}/deny", data={"csrf": token, "reason": "not today"}
        )
        await settled(srv.api_ana, run["run_id"])
        gates = (await srv.api_ana.get("/v1/gates?status=all")).json()["data"]
        inbox = await srv.ana.get("/console/gates")
    assert [(g["status"], g["reason"]) for g in gates] == [("denied", "not today")]
    resolved = inbox.text.split('id="resolved-gates"')[1]
    assert "denied" in resolved and "not today" in resolved
    assert gates[0]["resolved_at"][:10] in resolved


async def test_the_run_pages_actions_steer_follow_up_stop_and_cancel_an_active_run() -> None:
    async with console_serving(mailer()) as srv:
        run = await blocked_run(srv.api_ana)
        await login(srv.ana, ANA_TOKEN)
        token = await csrf(srv.ana)
        base = f"/console/runs/{run['run_id']}"
        page = await srv.ana.get(base)
        for action in ("steer", "follow_up", "stop", "cancel"):
            assert f'action="{base}/{action}"' in page.text
        steer = await srv.ana.post(f"{base}/steer", data={"csrf": token, "text": "be brief"})
        empty = await srv.ana.post(f"{base}/follow_up", data={"csrf": token, "text": " "})
        stop = await srv.ana.post(f"{base}/stop", data={"csrf": token, "reason": "bogus"})
        graceful = await srv.ana.post(f"{base}/stop", data={"csrf": token, "reason": "host"})
        resume = await srv.ana.post(f"{base}/resume", data={"csrf": token})
        cancel = await srv.ana.post(f"{base}/cancel", data={"csrf": token})
        after = await srv.ana.post(f"{base}/steer", data={"csrf": token, "text": "late"})
        status = (await srv.api_ana.get(f"/v1/runs/{run['run_id']}")).json()["status"]
    assert steer.status_code == 303 and cancel.status_code == 303
    assert empty.status_code == 400 and stop.status_code == 400
    assert graceful.status_code == 303
    # A run waiting on a person resumes through its gate, not the Resume button.
    assert resume.status_code == 409 and "waits on a gate" in resume.text
    assert status == "cancelled"
    assert after.status_code == 409  # the run has ended: said plainly, nothing queued


async def test_a_thread_continues_from_its_page_and_a_busy_thread_is_said_plainly() -> None:
    async with console_serving(mailer(), echo()) as srv:
        await login(srv.ana, ANA_TOKEN)
        token = await csrf(srv.ana)
        new = await srv.ana.post(
            "/console/threads", data={"csrf": token, "agent": "echo", "text": "hello there"}
        )
        assert new.status_code == 303
        run_id = new.headers["location"].rsplit("/", 1)[1]
        first = await settled(srv.api_ana, run_id)
        thread = f"/console/threads/{first['thread_id']}"
        more = await srv.ana.post(thread, data={"csrf": token, "agent": "echo", "text": "again"})
        await settled(srv.api_ana, more.headers["location"].rsplit("/", 1)[1])
        page = await srv.ana.get(thread)
        busy = await blocked_run(srv.api_ana)
        busy_thread = f"/console/threads/{busy['thread_id']}"
        rejected = await srv.ana.post(
            busy_thread, data={"csrf": token, "agent": "echo", "text": "hi", "policy": "reject"}
        )
        queued = await srv.ana.post(
            busy_thread, data={"csrf": token, "agent": "echo", "text": "hi", "policy": "enqueue"}
        )
        queued_page = await srv.ana.get(queued.headers["location"])
    assert page.text.count("hello there") == 1 and "again" in page.text
    assert rejected.status_code == 409 and "the thread is busy" in rejected.text
    assert queued.headers["location"] == f"/console/runs/{busy['run_id']}?note=queued"
    assert 'id="queued-note"' in queued_page.text


async def test_the_agents_page_lists_models_tools_effects_and_idempotency() -> None:
    async with console_serving(mailer(), echo()) as srv:
        await login(srv.ana, ANA_TOKEN)
        page = await srv.ana.get("/console/agents")
    assert page.status_code == 200
    cards = page.text.split('class="card agent"')[1:]
    echo_card, mailer_card = cards
    assert "add" in echo_card and "none (pure)" in echo_card and "<td>yes</td>" in echo_card
    assert "send_email" in mailer_card and "write" in mailer_card and "needed" in mailer_card
    assert "ScriptedModel" in mailer_card


async def test_the_memory_page_shows_versions_as_diffs_passes_and_search() -> None:
    async with console_serving(echo()) as srv:
        v1 = await srv.rt.memory.write(ANA, "MEMORY.md", "likes tea\n", expected_version=0)
        v2 = await srv.rt.memory.write(
            ANA, "MEMORY.md", "likes coffee\nlives in Lyon\n", expected_version=v1.version
        )
        curator = ScriptedModel(
            [
                call("memory_read", path="MEMORY.md"),
                call(
                    "memory_write",
                    target="MEMORY.md",
                    content="likes coffee, lives in Lyon\n",
                    expected_version=v2.version,
                ),
                call(
                    "structured_result", changed=True, summary="joined two facts", entries_merged=1
                ),
            ]
        )
        await srv.rt.memory.curate(ANA, model=curator)
        await login(srv.ana, ANA_TOKEN)
        page = await srv.ana.get("/console/memory", params={"q": "Lyon"})
        runs = await srv.ana.get("/console/runs")
    # The pass's run is listed by what it is, not by its ephemeral agent's name.
    assert "background turn (unbound" in runs.text and "unbound:" not in runs.text
    assert page.status_code == 200
    assert '<span class="del">-likes tea</span>' in page.text
    assert '<span class="add">+likes coffee</span>' in page.text
    # The curation pass: its outcome and summary, and the version it wrote as a diff.
    passes = page.text.split("Curation passes")[1]
    assert "<strong>written</strong> · joined two facts" in passes and "merged 1" in passes
    assert '<span class="add">+likes coffee, lives in Lyon</span>' in page.text
    assert "version 3" in page.text
    results = page.text.split("Results for")[1].split("Standing document")[0]
    assert "Lyon" in results


async def test_the_static_files_are_served_by_reverie_itself() -> None:
    async with console_serving(echo()) as srv:
        htmx = await srv.anon.get("/console/static/htmx.min.js")
        traversal = await srv.anon.get("/console/static/../sessions.py")
    assert htmx.status_code == 200 and htmx.text.startswith("/* htmx 2.0.4")
    assert traversal.status_code == 404


async def test_resume_from_the_run_page_continues_a_run_no_worker_advances(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'resume.db'}"
    calling = asyncio.Event()

    async def first_worker(request: ModelRequest) -> ModelResponse:
        calling.set()
        await asyncio.Event().wait()  # the worker dies here, mid model call
        return reply("unreachable")

    dying = Agent(name="writer", model=ScriptedModel(first_worker))
    rt = await Runtime.open(url)
    handle = await rt.start(dying, "write", scope=ANA)
    await calling.wait()
    await rt.aclose()
    writer = Agent(name="writer", model=ScriptedModel(lambda r: reply("written after resume")))
    async with Runtime.open(url) as rt:
        app = create_app(rt, agents={"writer": writer}, tokens={ANA_TOKEN: ANA})
        async with background_server(app) as base, httpx.AsyncClient(base_url=base) as client:
            assert (await rt.runs.get(handle.run_id)).status == "running"
            await login(client, ANA_TOKEN)
            page = await client.get(f"/console/runs/{handle.run_id}")
            assert f'action="/console/runs/{handle.run_id}/resume"' in page.text
            token = await csrf(client)
            resumed = await client.post(
                f"/console/runs/{handle.run_id}/resume", data={"csrf": token}
            )
            api = {"authorization": f"Bearer {ANA_TOKEN}"}
            async with client.stream(
                "GET", f"/v1/runs/{handle.run_id}/events", headers=api
            ) as events:
                async for _ in events.aiter_lines():
                    pass
            done = (await client.get(f"/v1/runs/{handle.run_id}", headers=api)).json()
    assert resumed.status_code == 303
    assert done["status"] == "completed" and done["text"] == "written after resume"


async def test_the_agents_page_names_each_mcp_tools_server_and_its_health() -> None:
    server = [sys.executable, str(TESTS / "capabilities" / "mcp_demo_server.py")]
    async with MCPToolset(server, label="demo", prefix="demo") as toolset:
        agent = Agent(
            name="mcp-user", model=ScriptedModel(lambda r: reply("hi")), tools=toolset.tools()
        )
        async with console_serving(agent) as srv:
            await login(srv.ana, ANA_TOKEN)
            up = await srv.ana.get("/console/agents")
    assert "demo_add" in up.text
    assert "MCP servers: <strong>demo</strong> (connected)" in up.text
    row = up.text.split("<td>demo_add</td>")[1].split("</tr>")[0]
    assert "demo" in row and "connected" in row and "not connected" not in row
