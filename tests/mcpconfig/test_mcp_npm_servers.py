"""Configured agents against the official MCP servers from npm (DESIGN §9.4, issue: MCP for
configured agents, and MCP that heals).

Every agent here is configured only through ``reverie.toml`` (``[mcp.servers.NAME]`` and
``[agents.NAME] mcp_servers``), run by ``reverie run`` in a child process or by a ``Runtime``
from the config loader, against ``@modelcontextprotocol/server-everything``,
``server-filesystem`` and ``server-memory`` (installed by ``.ci/run``; skipped when absent).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

from cli.cli_support import run_reverie
from mcpconfig.mcp_support import (
    demo_server_table,
    npm_server,
    pidfile_table,
    script_file,
    toml_list,
    toml_str,
)
from reverie import Runtime, Scope
from reverie.capabilities import MCPToolset, ToolContext, tools_by_name
from reverie.config import build_agents, load_config, mcp_servers
from reverie.core.capability import CallFailed
from reverie.core.transcript import TranscriptItem
from reverie.store import open_store

ANA = Scope(tenant="acme", user="ana")
START_S = "connect_timeout_s = 60"
"""Start-up budget of every server here: the machine may be loaded."""


def server_table(name: str, short: str, args: list[str] = [], extra: str = "") -> str:  # noqa: B006
    return (
        f"[mcp.servers.{name}]\ncommand = {toml_str(npm_server(short))}\n"
        f"args = {toml_list(args)}\n{START_S}\n{extra}\n"
    )


def tool_results(items: list[TranscriptItem]) -> list[str]:
    return [item.content for item in items if item.role == "tool"]


async def stored_tool_results(home: Path, thread_id: str) -> list[str]:
    store = open_store(f"sqlite:///{home / 'reverie.db'}")
    await store.open()
    try:
        return tool_results(await store.thread_items(thread_id))
    finally:
        await store.close()


async def test_configured_agents_list_the_tools_of_the_official_servers(tmp_path: Path) -> None:
    path = tmp_path / "reverie.toml"
    path.write_text(
        server_table("everything", "everything")
        + server_table("fs", "filesystem", [str(tmp_path)])
        + server_table(
            "mem", "memory", extra=f"env = {{ MEMORY_FILE_PATH = {toml_str(tmp_path / 'g.json')} }}"
        )
        + '[agents.a]\nmodel = "openai:gpt-4.1-mini"\nmcp_servers = ["everything", "fs", "mem"]\n',
        encoding="utf-8",
    )
    config = load_config(path)
    async with mcp_servers(config) as servers:
        await servers.start(config.agents["a"].mcp_servers)
        [agent] = build_agents(config)
        tools = tools_by_name(servers.equip(agent, config.agents["a"].mcp_servers).tools)
    assert {"everything_echo", "everything_get-sum", "fs_read_text_file", "fs_write_file"} <= set(
        tools
    )
    assert {"mem_create_entities", "mem_read_graph", "mem_search_nodes"} <= set(tools)
    # server-filesystem marks reads readOnlyHint only: read-only means safe to repeat.
    read = tools["fs_read_text_file"].descriptor
    assert (read.concurrency, read.idempotent) == ("safe_for_parallel", True)
    write = tools["fs_write_file"].descriptor
    assert write.concurrency == "exclusive"


def test_reverie_run_calls_the_official_servers_tools_from_a_scripted_model(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    files = tmp_path / "files"
    files.mkdir()
    graph = tmp_path / "graph.json"
    script = script_file(
        tmp_path / "s.json",
        [
            {
                "calls": [
                    ["everything_echo", {"message": "hello from reverie"}],
                    ["everything_get-sum", {"a": 20, "b": 22}],
                ]
            },
            {"call": "fs_write_file", "arguments": {"path": str(files / "n.txt"), "content": "hi"}},
            {
                "call": "mem_create_entities",
                "arguments": {
                    "entities": [
                        {"name": "ana", "entityType": "person", "observations": ["likes teal"]}
                    ]
                },
            },
            {"call": "mem_search_nodes", "arguments": {"query": "teal"}},
            {"reply": "all done"},
        ],
    )
    (home / "reverie.toml").write_text(
        server_table("everything", "everything")
        + server_table("fs", "filesystem", [str(files)])
        + server_table("mem", "memory", extra=f"env = {{ MEMORY_FILE_PATH = {toml_str(graph)} }}")
        + f"[agents.helper]\nmodel = {toml_str(script)}\n"
        'mcp_servers = ["everything", "fs", "mem"]\n',
        encoding="utf-8",
    )
    done = run_reverie(home, "run", "--json", "go", timeout=300)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["status"] == "completed" and payload["text"] == "all done"
    results = asyncio.run(stored_tool_results(home, payload["thread_id"]))
    assert "hello from reverie" in results[0]
    assert "42" in results[1]
    assert (files / "n.txt").read_text(encoding="utf-8") == "hi"  # the server really wrote
    assert "likes teal" in results[3]
    assert "likes teal" in graph.read_text(encoding="utf-8")


def test_a_server_killed_mid_run_by_reverie_run_is_restarted_and_the_run_recovers(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    files = tmp_path / "files"
    files.mkdir()
    (files / "note.txt").write_text("kept", encoding="utf-8")
    pids = tmp_path / "fs.pids"
    script = script_file(
        tmp_path / "s.json",
        [
            {"call": "fs_list_directory", "arguments": {"path": str(files)}},
            # Another configured server kills the filesystem server between two calls.
            {"call": "ctl_kill_pidfile", "arguments": {"path": str(pids)}},
            {"call": "fs_list_directory", "arguments": {"path": str(files)}},
            {"reply": "recovered"},
        ],
    )
    (home / "reverie.toml").write_text(
        pidfile_table("fs", pids, npm_server("filesystem"), [str(files)], START_S)
        + demo_server_table("ctl", START_S)
        + f'[agents.helper]\nmodel = {toml_str(script)}\nmcp_servers = ["fs", "ctl"]\n',
        encoding="utf-8",
    )
    done = run_reverie(home, "run", "--json", "go", timeout=300)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["status"] == "completed"
    results = asyncio.run(stored_tool_results(home, payload["thread_id"]))
    first, killed, second = results
    started = pids.read_text().split()
    assert killed == f"killed {started[0]}"
    assert "note.txt" in first and "note.txt" in second  # answered by the restarted server
    assert len(started) == 2 and started[0] != started[1]  # one restart


async def test_a_runtime_from_the_config_recovers_a_server_killed_mid_run(tmp_path: Path) -> None:
    graph = tmp_path / "graph.json"
    pids = tmp_path / "mem.pids"
    script = script_file(
        tmp_path / "s.json",
        [
            {
                "call": "mem_create_entities",
                "arguments": {
                    "entities": [{"name": "bo", "entityType": "cat", "observations": ["naps"]}]
                },
            },
            {"call": "ctl_kill_pidfile", "arguments": {"path": str(pids)}},
            {"call": "mem_open_nodes", "arguments": {"names": ["bo"]}},
            {"reply": "bo naps"},
        ],
    )
    path = tmp_path / "reverie.toml"
    path.write_text(
        pidfile_table(
            "mem",
            pids,
            npm_server("memory"),
            [],
            f"{START_S}\nenv = {{ MEMORY_FILE_PATH = {toml_str(graph)} }}",
        )
        + demo_server_table("ctl", START_S)
        + f'[agents.keeper]\nmodel = {toml_str(script)}\nmcp_servers = ["mem", "ctl"]\n',
        encoding="utf-8",
    )
    config = load_config(path)
    [agent] = build_agents(config)
    async with mcp_servers(config) as servers:
        await servers.start(config.agents["keeper"].mcp_servers)
        keeper = servers.equip(agent, config.agents["keeper"].mcp_servers)
        async with Runtime.open(":memory:") as rt:
            result = await rt.run(keeper, "remember bo", scope=ANA)
            results = tool_results(await rt.store.thread_items(result.thread_id))
        toolset = servers.toolset("mem")
        assert toolset is not None and toolset.restarts == 1
    assert result.status == "completed"
    assert results[1].startswith("killed ")
    assert "naps" in results[2]  # the restarted server answered (from its file)
    assert len(pids.read_text().split()) == 2


def open_writers(fifos: list[Path], deadline_s: float, done: list[str]) -> None:
    """Open each FIFO for writing, in order; each open succeeds only while the server has it
    open for reading. Writing ``b`` first needs the read of ``b`` in progress while the read of
    ``a`` still waits for its writer: both calls on the server at once."""
    for fifo in fifos:
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError:  # ENXIO: no reader yet
                if time.monotonic() > deadline:
                    done.append(f"no reader of {fifo.name}")
                    return
                time.sleep(0.01)
        os.write(fd, f"from {fifo.name}".encode())
        os.close(fd)
        done.append(fifo.name)


async def test_a_read_only_parallel_wave_overlaps_on_the_official_server(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    fifos = [files / "a", files / "b"]
    for fifo in fifos:
        os.mkfifo(fifo)
    script = script_file(
        tmp_path / "s.json",
        [
            {
                "calls": [
                    ["fs_read_text_file", {"path": str(fifos[0])}],
                    ["fs_read_text_file", {"path": str(fifos[1])}],
                ]
            },
            {"reply": "read both"},
        ],
    )
    path = tmp_path / "reverie.toml"
    path.write_text(
        server_table("fs", "filesystem", [str(files)], "call_timeout_s = 120")
        + f'[agents.reader]\nmodel = {toml_str(script)}\nmcp_servers = ["fs"]\n',
        encoding="utf-8",
    )
    config = load_config(path)
    [agent] = build_agents(config)
    done: list[str] = []
    async with mcp_servers(config) as servers:
        await servers.start(["fs"])
        reader = servers.equip(agent, ["fs"])
        writer = threading.Thread(target=open_writers, args=([fifos[1], fifos[0]], 90.0, done))
        writer.start()
        try:
            async with Runtime.open(":memory:") as rt:
                result = await rt.run(reader, "read them", scope=ANA)
                results = tool_results(await rt.store.thread_items(result.thread_id))
        finally:
            await asyncio.to_thread(writer.join)
    assert done == ["b", "a"], done  # b's read was open while a's was still waiting
    assert result.status == "completed"
    assert results == ["from a", "from b"]  # in the model's order


async def test_a_typescript_servers_input_validation_error_is_input_invalid() -> None:
    ctx = ToolContext(run_id="run-1", call_id="call-1", scope=ANA, tool_name="echo")
    async with MCPToolset([npm_server("everything")], connect_timeout_s=60) as ts:
        echo = tools_by_name(ts.tools())["echo"]
        outcome = await echo.invoke({}, ctx)  # message is required: the server rejects it
    assert isinstance(outcome, CallFailed), outcome
    assert outcome.error_kind == "input_invalid"
    assert "-32602" in outcome.message
