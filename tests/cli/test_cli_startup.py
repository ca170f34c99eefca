"""Starting ``reverie``: light imports, ``-h``, ``--version``, ``python -m reverie``, Ctrl-C.

How fast ``reverie --help`` starts is measured by ``benchmarks/cli_startup.py``; these tests pin
the cause instead: what the program imports before a command needs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

import reverie
from cli.cli_support import REPO

HEAVY = ("openai", "anthropic", "mcp", "starlette", "psycopg", "uvicorn", "procrastinate")
"""SDKs and servers a command imports only when it uses them."""

RUNTIME = ("reverie.runtime", "reverie.store", "reverie.config", "reverie.memory", "jsonschema")
"""What a command that runs nothing (``--help``, ``--version``) has no use for."""

_LOADED = """
import json, sys
{setup}
print(json.dumps(sorted(m for m in {modules!r} if m in sys.modules)))
"""


def _python(code: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["REVERIE_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
        cwd=REPO,
    )


def _loaded_after(setup: str, home: Path, modules: tuple[str, ...] = HEAVY) -> list[str]:
    done = _python(_LOADED.format(setup=setup, modules=modules), home=home)
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.slow
def test_importing_the_cli_loads_no_provider_sdk_or_server(tmp_path: Path) -> None:
    assert _loaded_after("import reverie.cli.app", tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--help", "--version", "-h"])
def test_help_and_version_load_no_provider_sdk_or_server(tmp_path: Path, flag: str) -> None:
    setup = (
        "from reverie.cli.app import app\n"
        "try:\n"
        f"    app([{flag!r}], prog_name='reverie')\n"
        "except SystemExit:\n"
        "    pass\n"
    )
    assert _loaded_after(setup, tmp_path) == []


@pytest.mark.slow
def test_help_loads_neither_the_runtime_nor_the_store(tmp_path: Path) -> None:
    setup = (
        "from reverie.cli.app import app\n"
        "try:\n"
        "    app(['runs', 'list', '--help'], prog_name='reverie')\n"
        "except SystemExit:\n"
        "    pass\n"
    )
    assert _loaded_after(setup, tmp_path, RUNTIME) == []


@pytest.mark.slow
def test_loading_the_configuration_loads_no_provider_sdk(tmp_path: Path) -> None:
    setup = "import reverie, reverie.config, reverie.cli.common\nreverie.config.load_config(None)"
    assert _loaded_after(setup, tmp_path) == []


@pytest.mark.slow
def test_naming_an_openai_model_does_not_import_the_sdk_until_it_is_called(
    tmp_path: Path,
) -> None:
    # Every command resolves the configured agents' models; only a call needs the SDK.
    setup = (
        "from reverie.models.registry import resolve_model\n"
        "for spec in ('openai:gpt-4.1-mini', 'ollama:llama3.1', 'hermes:ollama:qwen3'):\n"
        "    resolve_model(spec)\n"
    )
    assert _loaded_after(setup, tmp_path) == []


def test_short_dash_h_is_help_everywhere(cli: Callable[..., Result]) -> None:
    for args in ((), ("runs",), ("runs", "show"), ("gates", "approve"), ("run",), ("chat",)):
        result = cli(*args, "-h")
        assert result.exit_code == 0, (args, result.output)
        assert "Usage: reverie" in result.stdout
        assert "-h, --help" in result.stdout


def test_flags_are_shown_without_a_value(cli: Callable[..., Result]) -> None:
    result = cli("runs", "list", "--help")

    assert result.exit_code == 0
    assert "--json " in result.stdout
    assert "<bool>" not in result.stdout


def test_version_flag_prints_the_version(cli: Callable[..., Result]) -> None:
    result = cli("--version")

    assert result.exit_code == 0
    assert result.stdout.strip() == f"reverie {reverie.__version__}"


@pytest.mark.slow
def test_python_dash_m_reverie_is_the_reverie_command(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "reverie", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "REVERIE_HOME": str(tmp_path)},
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"reverie {reverie.__version__}"


_INTERRUPT_DURING_IMPORT = """
import os, signal, sys

class InterruptOnImport:
    # Sends the process a real SIGINT while the commands are being imported: Ctrl-C at start-up.
    def find_spec(self, name, path=None, target=None):
        if name == "reverie.cli.app":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, InterruptOnImport())
sys.argv = ["reverie", "--help"]
from reverie.cli import main
main()
print("not reached")
"""


@pytest.mark.slow
def test_ctrl_c_during_start_up_exits_130_without_a_traceback(tmp_path: Path) -> None:
    done = _python(_INTERRUPT_DURING_IMPORT, home=tmp_path)

    assert done.returncode == 130, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert "not reached" not in done.stdout
    assert "interrupted" in done.stderr


def test_the_package_version_is_the_one_pyproject_declares() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    assert reverie.__version__ == project["version"]


def test_the_cli_default_memory_document_is_the_standing_document() -> None:
    from reverie.cli.memory import STANDING_DOCUMENT as CLI_DEFAULT
    from reverie.memory.native import STANDING_DOCUMENT

    assert CLI_DEFAULT == STANDING_DOCUMENT
