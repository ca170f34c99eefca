"""DESIGN §12 MCP provider: trusted scope in every call; bounded, scope-checked rows;
transport failures are ``Unavailable``; the credential is passed on and never logged."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memory.memory_support import ANA, BOB, FAKE_SERVER, memory_message, prompt_text, tool_results
from reverie import Agent, Runtime
from reverie.core.messages import ModelRequest, ModelResponse
from reverie.core.scope import Scope
from reverie.memory import MCPMemory, Snippets, Unavailable, memory_from_config
from reverie.memory.sanitize import utf8_len
from reverie.testing import ScriptedModel, call, reply

pytestmark = pytest.mark.slow  # each test starts a Python subprocess


@pytest.fixture
async def fake() -> AsyncIterator[type[MCPMemory]]:
    """Nothing to set up: each test builds its provider; this closes them all afterwards."""
    opened: list[MCPMemory] = []

    class Tracked(MCPMemory):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            opened.append(self)

    yield Tracked
    for provider in opened:
        await provider.aclose()


def serve(mode: str, **kwargs: object) -> dict[str, object]:
    return {"command": [*FAKE_SERVER, mode], "timeout_s": 10.0, "retry_after_s": 0.0, **kwargs}


async def search(provider: MCPMemory, scope: Scope = ANA, limit: int = 5) -> object:
    return await provider.read_long_term(scope, "favourite colour", limit)


async def test_every_call_carries_the_trusted_scope_and_the_query_is_the_only_model_field(
    fake: type[MCPMemory],
) -> None:
    provider = fake(**serve("honest"))  # type: ignore[arg-type]
    scope = Scope(tenant="acme", user="ana", agent="helper", project="apollo")
    model = ScriptedModel([call("memory_search", query="what I said", limit=3), reply("ok")])
    async with Runtime.open(":memory:", memory=provider) as rt:
        r = await rt.run(Agent(name="a", model=model), "hello memory", scope=scope)
    assert r.status == "completed"
    before = memory_message(model.requests[0])
    assert before is not None
    [result] = tool_results(model.requests[1])
    echoes = [before.content, result]
    for text in echoes:
        start = text.index("echo ") + len("echo ")
        echo = json.loads(text[start : text.index("}", start) + 1].replace('\\"', '"'))
        assert (echo["tenant"], echo["user"]) == ("acme", "ana")
        assert (echo["agent"], echo["project"]) == ("helper", "apollo")
    assert '\\"query\\": \\"what I said\\"' in result
    assert '"query": "hello memory"' in before.content  # the lane's query: the user's message
    schema = model.requests[0].tools
    assert schema is not None
    [search_spec] = [t for t in schema if t.name == "memory_search"]
    assert set(search_spec.parameters["properties"]) == {"query", "limit"}


async def test_a_model_cannot_pass_scope_fields(fake: type[MCPMemory]) -> None:
    provider = fake(**serve("honest"))  # type: ignore[arg-type]
    model = ScriptedModel(
        [call("memory_search", query="x", tenant="evil", user="bob"), reply("ok")]
    )
    async with Runtime.open(":memory:", memory=provider) as rt:
        await rt.run(Agent(name="a", model=model), "hi", scope=ANA)
    [result] = tool_results(model.requests[1])
    assert result.startswith("error (input_invalid)") and "unexpected argument" in result


@pytest.mark.parametrize("mode", ["foreign", "noscope"])
async def test_rows_of_another_scope_or_without_scope_are_dropped_and_counted(
    fake: type[MCPMemory], mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    provider = fake(**serve(mode))  # type: ignore[arg-type]
    result = await search(provider)
    assert isinstance(result, Snippets)
    assert [s.text for s in result.items] == ["mine: likes teal"]
    assert provider.security_events == 3
    assert "security event" in caplog.text and "SECRET" not in caplog.text


@pytest.mark.parametrize("mode", ["foreign", "noscope"])
async def test_foreign_rows_never_reach_a_prompt_or_a_tool_result(
    fake: type[MCPMemory], mode: str
) -> None:
    provider = fake(**serve(mode))  # type: ignore[arg-type]
    model = ScriptedModel([call("memory_search", query="colour", limit=20), reply("ok")])
    async with Runtime.open(":memory:", memory=provider) as rt:
        r = await rt.run(Agent(name="a", model=model), "my favourite colour?", scope=ANA)
        hits = await rt.memory.search(ANA, "colour", limit=20)
    assert r.status == "completed"
    seen = "\n".join(prompt_text(req) for req in model.requests)
    assert "mine: likes teal" in seen and "SECRET" not in seen
    assert [h.text for h in hits] == ["mine: likes teal"]
    assert provider.security_events == 9  # three per search: lane, tool, rt.memory.search


async def test_ten_thousand_rows_are_bounded_to_max_rows_and_the_limit(
    fake: type[MCPMemory],
) -> None:
    provider = fake(**serve("many", max_rows=50, max_bytes=2_000))  # type: ignore[arg-type]
    result = await search(provider, limit=20)
    assert isinstance(result, Snippets)
    assert len(result.items) <= 20
    assert sum(utf8_len(s.text) for s in result.items) <= 2_000
    assert provider.security_events == 0


async def test_a_five_megabyte_row_is_bounded_before_host_budgeting(
    fake: type[MCPMemory],
) -> None:
    provider = fake(**serve("huge", max_bytes=10_000))  # type: ignore[arg-type]
    result = await search(provider)
    assert isinstance(result, Snippets)
    [snippet] = result.items
    assert utf8_len(snippet.text) <= 10_000
    model = ScriptedModel([reply("ok")])
    async with Runtime.open(":memory:", memory=provider) as rt:
        await rt.run(Agent(name="a", model=model), "favourite colour?", scope=ANA)
    remembered = memory_message(model.requests[0])
    assert remembered is not None and utf8_len(remembered.content) < 4_000


@pytest.mark.parametrize("mode", ["garbage", "wrongshape", "error", "crash"])
async def test_broken_answers_are_unavailable_never_empty(fake: type[MCPMemory], mode: str) -> None:
    provider = fake(**serve(mode))  # type: ignore[arg-type]
    result = await search(provider)
    assert isinstance(result, Unavailable), result  # broken is not EMPTY


async def test_no_answer_within_the_timeout_is_unavailable(fake: type[MCPMemory]) -> None:
    provider = fake(**serve("slow", timeout_s=1.0))  # type: ignore[arg-type]
    await provider.bind(None)  # type: ignore[arg-type]
    started = time.monotonic()
    result = await search(provider)
    assert isinstance(result, Unavailable)
    assert time.monotonic() - started < 60  # the 1 s bound, not the server's hour of silence


async def test_unreachable_servers_are_unavailable_and_the_runtime_still_opens(
    fake: type[MCPMemory],
) -> None:
    dead = fake(command=["python3", "-c", "import sys; sys.exit(3)"], timeout_s=2.0)
    nowhere = fake(url="http://127.0.0.1:9/mcp", timeout_s=2.0)
    for provider in (dead, nowhere):
        model = ScriptedModel([call("memory_search", query="x"), reply("ok")])
        async with Runtime.open(":memory:", memory=provider) as rt:
            r = await rt.run(Agent(name="a", model=model), "favourite colour?", scope=ANA)
        assert r.status == "completed"
        remembered = memory_message(model.requests[0])
        assert remembered is not None and "long-term memory is unavailable" in remembered.content
        [result] = tool_results(model.requests[1])
        assert result.startswith("error (unavailable)")


async def test_a_failed_connection_is_not_retried_on_every_call(
    fake: type[MCPMemory], tmp_path: Path
) -> None:
    # The "server" notes each start in a file, then dies: a second call must not start it again.
    starts = tmp_path / "starts"
    code = f"import sys; open({str(starts)!r}, 'a').write('x'); sys.exit(3)"
    provider = fake(command=[sys.executable, "-c", code], timeout_s=60.0)
    assert isinstance(await search(provider), Unavailable)
    assert isinstance(await search(provider), Unavailable)
    assert starts.read_text() == "x"  # backing off: no new process


async def test_recording_failure_over_mcp_does_not_fail_the_turn(fake: type[MCPMemory]) -> None:
    provider = fake(**serve("error"))  # type: ignore[arg-type]
    async with Runtime.open(":memory:", memory=provider) as rt:
        r = await rt.run(Agent(name="a", model=ScriptedModel([reply("fine")])), "hi", scope=ANA)
    assert (r.status, r.text) == ("completed", "fine")


async def test_turns_are_recorded_with_the_trusted_scope(
    fake: type[MCPMemory], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_file = tmp_path / "sessions.jsonl"
    monkeypatch.setenv("FAKE_MEMORY_LOG", str(log_file))
    # The SDK passes only a safe environment to stdio servers: forward the log path explicitly.
    provider = fake(**serve("honest", credential_env="FAKE_MEMORY_LOG"))  # type: ignore[arg-type]
    async with Runtime.open(":memory:", memory=provider) as rt:
        await rt.run(Agent(name="a", model=ScriptedModel([reply("hi ana")])), "hello", scope=ANA)
        await rt.run(Agent(name="b", model=ScriptedModel([reply("hi bob")])), "hey", scope=BOB)
    # Turns are recorded after each run, in the background: in either order.
    records = [json.loads(line) for line in log_file.read_text().splitlines()]
    by_user = {r["user"]: r for r in records}
    assert sorted((r["tenant"], r["user"]) for r in records) == [("acme", "ana"), ("acme", "bob")]
    assert by_user["ana"]["messages"] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi ana"},
    ]
    assert by_user["bob"]["messages"] == [
        {"role": "user", "content": "hey"},
        {"role": "assistant", "content": "hi bob"},
    ]


async def test_the_credential_reaches_a_stdio_server_and_is_never_logged(
    fake: type[MCPMemory], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "tok-SUPERSECRET-4242"
    monkeypatch.setenv("FAKE_MEMORY_TOKEN", secret)
    caplog.set_level(logging.DEBUG)
    provider = fake(**serve("honest", credential_env="FAKE_MEMORY_TOKEN"))  # type: ignore[arg-type]
    result = await search(provider)
    assert isinstance(result, Snippets)
    digest = hashlib.sha256(secret.encode()).hexdigest()[:16]
    assert f'"given_sha": "{digest}"' in result.items[0].text
    assert secret not in caplog.text and secret not in repr(provider)


async def test_a_missing_credential_is_unavailable(
    fake: type[MCPMemory], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FAKE_MEMORY_TOKEN", raising=False)
    provider = fake(**serve("honest", credential_env="FAKE_MEMORY_TOKEN"))  # type: ignore[arg-type]
    result = await search(provider)
    assert isinstance(result, Unavailable) and "FAKE_MEMORY_TOKEN" in result.reason


def database_bytes(db: Path) -> bytes:
    """The bytes of a SQLite database and its ``-wal`` and ``-shm`` files."""
    return b"".join(p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name))


async def test_a_credential_quoted_back_by_the_server_is_redacted_before_it_is_logged_or_stored(
    fake: type[MCPMemory],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    secret = "tok-QUOTED-BACK-7373"
    monkeypatch.setenv("FAKE_MEMORY_TOKEN", secret)
    caplog.set_level(logging.DEBUG)
    provider = fake(**serve("quote", credential_env="FAKE_MEMORY_TOKEN"))  # type: ignore[arg-type]
    model = ScriptedModel([call("memory_search", query="colour"), reply("ok")])
    db = tmp_path / "quote.db"
    async with Runtime.open(f"sqlite:///{db}", memory=provider) as rt:
        r = await rt.run(Agent(name="a", model=model), "hello memory", scope=ANA)
        assert r.status == "completed"
        [result] = tool_results(model.requests[1])
        assert secret not in result
        stored = database_bytes(db)
    assert stored
    assert secret.encode() not in stored
    # The server's text reached the log at INFO, with the credential masked.
    assert "memory_search: token *** is not allowed here" in caplog.text
    assert secret not in caplog.text
    assert all(secret not in prompt_text(request) for request in model.requests)


def server_pid(result: object) -> int:
    """The pid the honest fake server echoes in its row."""
    assert isinstance(result, Snippets), result
    echo = json.loads(result.items[0].text.removeprefix("echo "))
    pid: int = echo["pid"]
    return pid


async def test_a_stdio_memory_server_that_dies_is_restarted_and_the_next_call_recovers(
    fake: type[MCPMemory],
) -> None:
    provider = fake(**serve("honest"))  # type: ignore[arg-type]
    first = server_pid(await search(provider))
    os.kill(first, signal.SIGKILL)
    # The next search recovers on a restarted server (never `Unavailable` for the process's
    # life, as before): the search is re-run if the loss is only noticed under it.
    second = server_pid(await search(provider))
    assert second != first
    third = server_pid(await search(provider))
    assert third == second


async def test_a_memory_server_killed_mid_run_is_restarted_and_the_run_recalls_again(
    fake: type[MCPMemory],
) -> None:
    provider = fake(**serve("honest"))  # type: ignore[arg-type]
    pids: list[int] = []

    def script(request: ModelRequest) -> ModelResponse:
        results = tool_results(request)
        if not results:
            return call("memory_search", query="colour")
        found = re.search(r'\\?"pid\\?": (\d+)', results[-1])
        assert found is not None, results[-1]  # the search answered (not unavailable)
        pids.append(int(found.group(1)))
        if len(results) == 1:
            os.kill(pids[0], signal.SIGKILL)  # the server dies between two tool calls
            return call("memory_search", query="colour again")
        return reply("done")

    async with Runtime.open(":memory:", memory=provider) as rt:
        r = await rt.run(Agent(name="a", model=ScriptedModel(script)), "colour?", scope=ANA)
    assert r.status == "completed"
    assert len(pids) == 2 and pids[0] != pids[1]


async def test_the_mcp_providers_tool_names_come_from_configuration_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_file = tmp_path / "sessions.jsonl"
    monkeypatch.setenv("FAKE_MEMORY_LOG", str(log_file))
    settings = memory_from_config(
        {
            "provider": "mcp",
            "mcp": {
                "command": [*FAKE_SERVER, "honest"],
                # The SDK passes a stdio server only a safe environment: forward the log path.
                "credential_env": "FAKE_MEMORY_LOG",
                "search_tool": "acme_recall",
                "record_tool": "acme_remember",
                "timeout_s": 10.0,
            },
        }
    )
    provider = settings.provider
    assert isinstance(provider, MCPMemory)
    model = ScriptedModel([call("memory_search", query="colours", limit=2), reply("teal")])
    try:
        async with Runtime.open(":memory:", memory=provider) as rt:
            r = await rt.run(Agent(name="a", model=model), "what do I like?", scope=ANA)
    finally:
        await provider.aclose()
    assert r.status == "completed"
    before = memory_message(model.requests[0])  # the long-term lane, before the run
    assert before is not None and "recalled by acme_recall for what do I like?" in before.content
    [result] = tool_results(model.requests[1])  # the model's memory_search tool
    assert "recalled by acme_recall for colours" in result
    records = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [(r["tool"], r["user"]) for r in records] == [("acme_remember", "ana")]


@pytest.mark.parametrize("mode", ["structured", "text_rows", "text_results", "text_list"])
async def test_the_provider_accepts_each_documented_response_envelope(
    fake: type[MCPMemory], mode: str
) -> None:
    provider = fake(**serve(mode))  # type: ignore[arg-type]
    result = await search(provider)
    assert isinstance(result, Snippets), result
    assert [s.text for s in result.items] == [f"mine via {mode}"]
    assert provider.security_events == 0
