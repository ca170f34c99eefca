"""Without an optional extra, a command says which one to install in one line, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli.cli_support import EXAMPLE_SCRIPT, HERE

LAUNCHER = HERE / "cli_without_extra.py"
POSTGRES_URL = "postgresql://reverie@127.0.0.1:1/reverie"
"""Never connected to: the missing driver is found first."""

MODULES = {
    "anthropic": "anthropic",
    "mcp": "mcp,mcp_types",
    "serve": "starlette,uvicorn,sse_starlette",
    "postgres": "psycopg,psycopg_pool,procrastinate",
    "procrastinate": "procrastinate",
}

EXTRA_OF = {"procrastinate": "postgres"}
"""Cases that block only part of an extra: the extra the hint names."""

AGENTS_TOML = f"""
[agents.assistant]
model = "scripted:{EXAMPLE_SCRIPT.as_posix()}"

[auth.tokens]
tok-ana = {{ tenant = "acme", user = "ana" }}
"""

MCP_MEMORY_TOML = """
[memory]
provider = "mcp"

[memory.mcp]
command = ["reverie", "mcp-memory"]
"""


def run_without(
    home: Path, extra: str, *args: str, config: str = ""
) -> subprocess.CompletedProcess[str]:
    (home / "reverie.toml").write_text(config, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env |= {"REVERIE_HOME": str(home), "USER": "tester", "ANTHROPIC_API_KEY": "sk-test"}
    return subprocess.run(
        [sys.executable, str(LAUNCHER), MODULES[extra], *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )


CASES = [
    pytest.param(
        "anthropic", ("run", "--model", "anthropic:claude-sonnet-4-5", "hi"), "", id="run"
    ),
    pytest.param("mcp", ("mcp-memory",), "", id="mcp-memory"),
    pytest.param("postgres", ("worker", "--store", POSTGRES_URL), AGENTS_TOML, id="worker"),
    pytest.param(
        "procrastinate",
        ("worker", "--store", "postgresql://postgres@127.0.0.1:1/postgres"),
        AGENTS_TOML,
        id="worker-job-queue",
    ),
    pytest.param("postgres", ("runs", "list", "--store", POSTGRES_URL), "", id="store-url"),
    pytest.param(
        "mcp",
        ("run", "--model", f"scripted:{EXAMPLE_SCRIPT}", "hi"),
        MCP_MEMORY_TOML,
        id="mcp-memory-provider",
    ),
    pytest.param("serve", ("serve", "--port", "0"), AGENTS_TOML, id="serve"),
]


@pytest.mark.parametrize(("extra", "args", "config"), CASES)
def test_a_missing_extra_is_one_line_naming_the_pip_install_and_a_nonzero_exit(
    tmp_path: Path, extra: str, args: tuple[str, ...], config: str
) -> None:
    result = run_without(tmp_path, extra, *args, config=config)

    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert f"pip install 'reverie[{EXTRA_OF.get(extra, extra)}]'" in lines[0]
    assert "Traceback" not in result.stderr


def test_without_an_extra_a_command_that_does_not_need_it_still_works(tmp_path: Path) -> None:
    result = run_without(
        tmp_path, "anthropic", "run", "--model", f"scripted:{EXAMPLE_SCRIPT}", "hi"
    )

    assert result.returncode == 0, result.stderr
    assert "2 + 3 = 5" in result.stdout
