"""``[mcp.servers.NAME]`` in ``reverie.toml``: configured agents get MCP tools (DESIGN §9.4).

Driven through the config loader (``load_config`` + :class:`~reverie.mcp_servers.MCPServers` +
``Runtime``), the CLI's session, and ``reverie run`` / ``reverie doctor`` in child processes,
against the Python demo server (the official npm servers: ``test_mcp_npm_servers.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cli.cli_support import run_reverie
from mcpconfig.mcp_support import demo_server_table, script_file, toml_str
from reverie import Runtime, Scope
from reverie.cli.common import open_session
from reverie.config import build_agents, load_config, mcp_servers
from reverie.errors import CapabilityError, ConfigError

ANA = Scope(tenant="acme", user="ana")
MEMORY_SERVER = [sys.executable, "-m", "reverie", "mcp-memory"]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def config_error(path: Path, text: str) -> str:
    write(path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return str(info.value)


@pytest.mark.parametrize(
    ("table", "key", "fix"),
    [
        ('[mcp.servers.x]\nargs = ["a"]\n', "mcp.servers.x", "command"),
        ('[mcp.servers.x]\ncommand = "a"\nurl = "http://h/mcp"\n', "mcp.servers.x", "command"),
        ('[mcp.servers.x]\nurl = "http://h/mcp"\nargs = ["a"]\n', "mcp.servers.x", "url"),
        ('[mcp.servers.x]\ncommand = "a"\nheaders = { A = "b" }\n', "mcp.servers.x", "url"),
        ('[mcp.servers.x]\ncommand = "a"\ncomand = "b"\n', "mcp.servers.x.comand", "takes"),
        ('[mcp.servers.x]\nurl = "ftp://h"\n', "mcp.servers.x.url", "https://host/mcp"),
        ('[mcp.servers.x]\ncommand = "a"\nconnect_timeout_s = 0\n', "connect_timeout_s", "60"),
        ('[mcp.servers.x]\ncommand = "a"\ncall_timeout_s = "30"\n', "call_timeout_s", "30"),
        ('[mcp.servers.x]\ncommand = "a"\nprefix = "a b"\n', "mcp.servers.x.prefix", '""'),
        ('[mcp.servers.x]\ncommand = "a"\nallow_tools = "t"\n', "allow_tools", "tool"),
        ('[mcp.servers.x]\ncommand = "a"\noptional = "yes"\n', "optional", "true"),
        ('[mcp.servers.x]\ncommand = "a"\nenv = { T = "${BAD" }\n', "mcp.servers.x.env.T", "${"),
        ('[mcp.servers."a b"]\ncommand = "a"\n', "mcp.servers", "a-z"),
        ('[mcp.server.x]\ncommand = "a"\n', "mcp.server", "servers"),
        (
            '[agents.a]\nmodel = "openai:gpt-4.1-mini"\nmcp_servers = ["nope"]\n',
            "agents.a.mcp_servers[0]",
            "[mcp.servers.nope]",
        ),
        ('[agents.a]\nmodel = "openai:gpt-4.1-mini"\nmcp_servers = "x"\n', "mcp_servers", "["),
    ],
)
def test_bad_mcp_server_config_is_an_error_naming_the_file_the_key_and_the_fix(
    tmp_path: Path, table: str, key: str, fix: str
) -> None:
    path = tmp_path / "reverie.toml"
    message = config_error(path, table)
    assert message.startswith(f"{path}: ")
    assert key in message
    _, sep, tail = message.partition(". Fix: ")
    assert sep and fix in tail, message


def test_secret_values_of_env_and_headers_are_never_quoted_in_errors(tmp_path: Path) -> None:
    message = config_error(
        tmp_path / "reverie.toml",
        '[mcp.servers.x]\ncommand = "a"\nheaders = { Authorization = "tok-SECRET-1" }\n',
    )
    assert "tok-SECRET-1" not in message


async def test_a_configured_agent_gets_its_servers_tools_prefixed_and_filtered(
    tmp_path: Path,
) -> None:
    script = script_file(
        tmp_path / "s.json",
        [{"call": "calc_add", "arguments": {"a": 2, "b": 3}}, {"reply": "five"}],
    )
    path = write(
        tmp_path / "reverie.toml",
        demo_server_table("demo", 'allow_tools = ["add", "shout", "pid"]\ndeny_tools = ["pid"]')
        + demo_server_table("calc", 'allow_tools = ["add"]')
        + demo_server_table("bare", 'prefix = ""\nallow_tools = ["shout"]')
        + f'[agents.helper]\nmodel = {toml_str(script)}\nmcp_servers = ["calc", "demo", "bare"]\n'
        + '[agents.plain]\nmodel = "openai:gpt-4.1-mini"\n',
    )
    config = load_config(path)
    agents = {a.name: a for a in build_agents(config)}
    async with mcp_servers(config) as servers:
        await servers.start(config.agents["helper"].mcp_servers)
        helper = servers.equip(agents["helper"], config.agents["helper"].mcp_servers)
        assert [t.descriptor.name for t in helper.tools] == [
            "calc_add",
            "demo_add",
            "demo_shout",
            "shout",
        ]
        assert servers.toolset("demo") is not None
        assert [t.descriptor.name for t in agents["plain"].tools] == []
        async with Runtime.open(":memory:") as rt:
            result = await rt.run(helper, "2 + 3?", scope=ANA)
            items = await rt.store.thread_items(result.thread_id)
    assert result.status == "completed"
    assert [i.content for i in items if i.role == "tool"] == ["5"]


async def test_per_server_connect_and_call_timeouts_are_configured(tmp_path: Path) -> None:
    path = write(
        tmp_path / "reverie.toml",
        demo_server_table("demo", "connect_timeout_s = 45\ncall_timeout_s = 2.5"),
    )
    config = load_config(path)
    async with mcp_servers(config) as servers:
        await servers.start()
        toolset = servers.toolset("demo")
        assert toolset is not None
        assert (toolset.connect_timeout_s, toolset.timeout_s) == (45.0, 2.5)
        assert {t.descriptor.timeout_s for t in toolset.tools()} == {2.5}


async def test_servers_start_once_per_process_and_are_shared_by_its_runs(tmp_path: Path) -> None:
    steps = [{"call": "demo_pid"}, {"reply": "done"}]
    a = script_file(tmp_path / "a.json", steps)
    b = script_file(tmp_path / "b.json", steps)
    path = write(
        tmp_path / "reverie.toml",
        demo_server_table("demo")
        + '[store]\nurl = "sqlite:///runs.db"\n'
        + f'[agents.a]\nmodel = {toml_str(a)}\nmcp_servers = ["demo"]\n'
        + f'[agents.b]\nmodel = {toml_str(b)}\nmcp_servers = ["demo"]\n',
    )
    config = load_config(path)
    pids: list[str] = []
    async with open_session(config, None, agents=build_agents(config)) as session:
        toolset = session.mcp.toolset("demo")
        for name in ("a", "b", "a"):
            result = await session.rt.run(session.agent(name), "pid?", scope=ANA)
            assert result.status == "completed"
            items = await session.rt.store.thread_items(result.thread_id)
            pids.extend(i.content for i in items if i.role == "tool")
        assert session.mcp.toolset("demo") is toolset  # one server for every agent and run
    assert len(pids) == 3 and len(set(pids)) == 1, pids
    assert toolset is not None and not toolset.connected  # stopped with the session


async def test_stdio_env_values_come_from_environment_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVERIE_TEST_SECRET_VALUE", "s3cret")
    path = write(
        tmp_path / "reverie.toml",
        demo_server_table("demo", 'env = { GREETING = "hi ${REVERIE_TEST_SECRET_VALUE}!" }'),
    )
    config = load_config(path)
    async with mcp_servers(config) as servers:
        await servers.start(["demo"])
        toolset = servers.toolset("demo")
        assert toolset is not None
        answer = await toolset.call_raw("getenv", {"name": "GREETING"})
    assert answer.structured_content == {"result": "hi s3cret!"}


async def test_a_variable_a_server_needs_that_is_not_set_is_a_startup_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REVERIE_TEST_UNSET_VAR", raising=False)
    path = write(
        tmp_path / "reverie.toml",
        demo_server_table("demo", 'env = { TOKEN = "${REVERIE_TEST_UNSET_VAR}" }'),
    )
    config = load_config(path)  # loading reads no variable: only starting the server does
    async with mcp_servers(config) as servers:
        with pytest.raises(ConfigError) as info:
            await servers.start()
    message = str(info.value)
    assert f"{path}: mcp.servers.demo.env.TOKEN" in message
    assert "REVERIE_TEST_UNSET_VAR is not set" in message


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
async def memory_http(tmp_path: Path) -> AsyncIterator[str]:
    """``reverie mcp-memory --http PORT --token-env MEM_TOKEN`` (it requires the bearer token)."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *MEMORY_SERVER,
        "--http",
        str(port),
        "--token-env",
        "MEM_TOKEN",
        "--store",
        f"sqlite:///{tmp_path / 'mem.db'}",
        env={**os.environ, "MEM_TOKEN": "http-secret-42"},
        stdout=asyncio.subprocess.DEVNULL,
    )
    try:
        async with asyncio.timeout(60):
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    await asyncio.sleep(0.05)
                    continue
                writer.close()
                await writer.wait_closed()
                break
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        await proc.wait()


@pytest.mark.parametrize("token", ["http-secret-42", "wrong"])
async def test_http_header_values_come_from_environment_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memory_http: str, token: str
) -> None:
    monkeypatch.setenv("REVERIE_TEST_MEM_TOKEN", token)
    path = write(
        tmp_path / "reverie.toml",
        f"[mcp.servers.mem]\nurl = {toml_str(memory_http)}\n"
        'headers = { Authorization = "Bearer ${REVERIE_TEST_MEM_TOKEN}" }\n',
    )
    config = load_config(path)
    async with mcp_servers(config) as servers:
        if token == "wrong":  # the server refuses: the header really carried the variable
            with pytest.raises(CapabilityError, match=r"mcp\.servers\.mem: the server did not"):
                await servers.start()
            return
        await servers.start()
        toolset = servers.toolset("mem")
        assert toolset is not None
        assert {"mem_memory_search", "mem_memory_add_session"} <= {
            t.descriptor.name for t in toolset.tools()
        }


async def test_two_servers_offering_the_same_tool_name_is_an_error_naming_the_agent(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path / "reverie.toml",
        demo_server_table("one", 'prefix = ""')
        + demo_server_table("two", 'prefix = ""')
        + '[agents.a]\nmodel = "openai:gpt-4.1-mini"\nmcp_servers = ["one", "two"]\n',
    )
    config = load_config(path)
    with pytest.raises(ConfigError, match=r"agents\.a\.mcp_servers: .*two tools named") as info:
        async with open_session(config, ":memory:", agents=build_agents(config)):
            pass  # pragma: no cover - never reached
    assert "prefix" in str(info.value)


# ------------------------------------------------------------------------ the CLI, end to end
BROKEN = (
    f"[mcp.servers.broken]\ncommand = {toml_str(sys.executable)}\n"
    'args = ["-c", "raise SystemExit(3)"]\n'
)


def cli_config(home: Path, tmp_path: Path, servers: str, agent_servers: str) -> None:
    script = script_file(
        tmp_path / "s.json",
        [{"call": "demo_add", "arguments": {"a": 20, "b": 22}}, {"reply": "it is 42"}],
    )
    home.mkdir(exist_ok=True)
    write(
        home / "reverie.toml",
        servers + f"[agents.helper]\nmodel = {toml_str(script)}\nmcp_servers = {agent_servers}\n",
    )


def test_reverie_run_gives_a_configured_agent_the_tools_of_its_mcp_servers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cli_config(home, tmp_path, demo_server_table("demo"), '["demo"]')
    done = run_reverie(home, "run", "--json", "what is 20 + 22?", timeout=180)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["status"] == "completed" and payload["text"] == "it is 42"
    assert payload["usage"]["capability_calls"] == 1


def test_a_server_that_fails_to_start_is_a_startup_error_naming_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cli_config(home, tmp_path, demo_server_table("demo") + BROKEN, '["demo", "broken"]')
    done = run_reverie(home, "run", "hi", timeout=180)
    assert done.returncode == 1, done.stderr
    assert f"{home / 'reverie.toml'}: mcp.servers.broken: the server did not start" in " ".join(
        done.stderr.split()
    )
    assert "optional = true" in done.stderr


def test_an_optional_server_that_fails_to_start_is_a_warning_and_no_tools(tmp_path: Path) -> None:
    home = tmp_path / "home"
    optional = BROKEN + "optional = true\n"
    cli_config(home, tmp_path, demo_server_table("demo") + optional, '["demo", "broken"]')
    done = run_reverie(home, "run", "--json", "hi", timeout=180)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["text"] == "it is 42"
    assert "mcp.servers.broken: optional server did not start" in done.stderr


def doctor(home: Path) -> tuple[int, dict[str, dict[str, str]]]:
    done = run_reverie(home, "doctor", "--json", "--offline", timeout=180)
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    return done.returncode, checks


def test_doctor_connects_to_each_mcp_server_and_lists_its_tools(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cli_config(
        home, tmp_path, demo_server_table("demo", 'allow_tools = ["add", "nope"]'), '["demo"]'
    )
    code, checks = doctor(home)
    check = checks["mcp server demo"]
    assert check["status"] == "warn", check  # allow_tools names a tool the server lacks
    assert "tools: demo_add;" in check["detail"]
    assert "nope" in check["detail"] and "used by helper" in check["detail"]
    assert "MCP servers: demo" in checks["agent helper"]["detail"]
    assert code == 0


def test_doctor_fails_a_server_that_does_not_start_and_warns_for_an_optional_one(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    optional = BROKEN.replace("broken", "maybe") + "optional = true\n"
    cli_config(home, tmp_path, BROKEN + optional, '["broken", "maybe"]')
    code, checks = doctor(home)
    assert checks["mcp server broken"]["status"] == "fail"
    assert "mcp.servers.broken: the server did not start" in checks["mcp server broken"]["detail"]
    assert checks["mcp server maybe"]["status"] == "warn"
    assert code == 1


def test_a_finished_reverie_run_leaves_no_mcp_server_behind(tmp_path: Path) -> None:
    """A finished ``reverie run`` leaves no MCP server behind (they stop with the session)."""
    home = tmp_path / "home"
    pidfile = tmp_path / "pids"
    table = demo_server_table("demo").replace(
        f"command = {toml_str(sys.executable)}\n", 'command = "sh"\n'
    )
    table = table.replace(
        "args = [",
        f'args = ["-c", "echo $$ >> \\"$0\\"; exec \\"$@\\"", {toml_str(pidfile)}, '
        f"{toml_str(sys.executable)}, ",
    )
    cli_config(home, tmp_path, table, '["demo"]')
    done = run_reverie(home, "run", "hi", timeout=180)
    assert done.returncode == 0, done.stderr
    [pid] = pidfile.read_text().split()
    alive = subprocess.run(["kill", "-0", pid], capture_output=True, check=False)
    assert alive.returncode != 0  # gone


def test_the_documented_mcp_servers_example_loads(tmp_path: Path) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = doc.split("### `[mcp.servers.NAME]`", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    config = load_config(write(tmp_path / "reverie.toml", example))
    assert config.agents["assistant"].mcp_servers == ["files", "notes"]
    servers = mcp_servers(config)
    assert servers.names == ("files", "notes")


def test_reverie_serve_starts_each_server_once_and_shares_it_across_requests(
    tmp_path: Path,
) -> None:
    import signal
    import time

    import httpx
    import openai

    home = tmp_path / "home"
    home.mkdir()
    pids = tmp_path / "pids"
    script = script_file(tmp_path / "s.json", [{"call": "demo_pid"}, {"reply": "done"}])
    table = demo_server_table("demo").replace(
        f"command = {toml_str(sys.executable)}\nargs = [",
        f'command = "sh"\nargs = ["-c", "echo $$ >> \\"$0\\"; exec \\"$@\\"", '
        f"{toml_str(pids)}, {toml_str(sys.executable)}, ",
    )
    write(
        home / "reverie.toml",
        table
        + f'[agents.assistant]\nmodel = {toml_str(script)}\nmcp_servers = ["demo"]\n'
        + '[auth.tokens]\nana = { token_env = "API_TOKEN_ANA", tenant = "acme", user = "ana" }\n',
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(REVERIE_HOME=str(home), USER="tester", API_TOKEN_ANA="tok-serve-1")
    process = subprocess.Popen(
        [sys.executable, "-m", "reverie.cli.app", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120  # MCP servers start before it listens
        while True:
            assert process.poll() is None, process.communicate()
            try:
                httpx.get(f"{url}/v1/models", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "reverie serve did not start listening"
                time.sleep(0.05)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="tok-serve-1", max_retries=0)
        with client:
            for _ in range(2):
                completion = client.chat.completions.create(
                    model="assistant", messages=[{"role": "user", "content": "pid?"}]
                )
                assert completion.choices[0].message.content == "done"
    finally:
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
    assert process.returncode == 0, stderr
    [pid] = pids.read_text().split()  # one server process for the whole `reverie serve`

    async def tool_results() -> list[str]:
        async with Runtime.open(f"sqlite:///{home / 'reverie.db'}") as rt:
            runs = await rt.store.list_runs(scope=Scope(tenant="acme", user="ana"))
            found: list[str] = []
            for run in runs:
                items = await rt.store.thread_items(run.thread_id)
                found.extend(i.content for i in items if i.role == "tool")
            return found

    assert asyncio.run(tool_results()) == [pid, pid]
