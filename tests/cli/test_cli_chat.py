"""``reverie chat`` as a person uses it: a child process on a pseudo-terminal, default SQLite.

Each test types into the terminal (Enter is ``\\r``, Ctrl-C ``\\x03``, Ctrl-D ``\\x04``) and reads
the screen, then checks the store with ``reverie runs list`` / ``gates list`` like a user would.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import Result

from cli.cli_support import HERE, REPO, PtyReverie, run_reverie
from reverie.cli.chat import PROMPT, format_call, parse_answer

pytestmark = pytest.mark.slow  # each test starts a Python subprocess

HELLO = "Hello! I asked the add tool: 2 + 3 = 5."
"""The reply of ``examples/scripted_hello.json``."""


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., PtyReverie]]:
    """Start ``reverie ARGS...`` on a pty (REVERIE_HOME = tmp_path/home); killed at the end."""
    children: list[PtyReverie] = []

    def start(*args: str, cwd: Path = REPO) -> PtyReverie:
        child = PtyReverie(tmp_path / "home", *args, cwd=cwd)
        children.append(child)
        return child

    yield start
    for child in children:
        child.close()


def _agent_config(home: Path, tmp_path: Path, steps: list[dict[str, Any]], tools: str) -> None:
    home.mkdir(exist_ok=True)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(steps), encoding="utf-8")
    (home / "reverie.toml").write_text(
        f"pythonpath = [{json.dumps(str(HERE))}]\n"
        "[agents.helper]\n"
        f"model = {json.dumps('scripted:' + str(script))}\n"
        f"tools = {tools}\n",
        encoding="utf-8",
    )


def _runs(home: Path) -> list[dict[str, Any]]:
    listed = run_reverie(home, "runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    runs: list[dict[str, Any]] = json.loads(listed.stdout)
    return runs


def test_a_scripted_session_shows_tool_calls_asks_for_approval_and_continues(
    tmp_path: Path, spawn: Callable[..., PtyReverie]
) -> None:
    home = tmp_path / "home"
    _agent_config(
        home,
        tmp_path,
        [
            {"call": "add", "arguments": {"a": 1, "b": 2}},
            {"call": "send_email", "arguments": {"to": "ana@example.com", "body": "3"}},
            {"reply": "All done: ana has been told."},
        ],
        '["reverie.cli.demo_tools:add", "cli_fixture_tools:send_email"]',
    )
    chat = spawn("chat")

    chat.expect(PROMPT)
    chat.send("tell ana what 1 + 2 is\r")
    chat.expect("→ add(a=1, b=2)")
    chat.expect("✓ add")
    chat.expect('→ send_email(to="ana@example.com", body="3")')
    chat.expect('approve send_email(to="ana@example.com", body="3")? [y/N/reason]')
    chat.send("y\r")
    chat.expect("✓ send_email")
    chat.expect("All done: ana has been told.")

    # A second turn on the same thread; this time the answer is a reason, so a denial.
    chat.expect(PROMPT)
    chat.send("once more\r")
    chat.expect("approve send_email(")
    chat.send("not today\r")
    chat.expect("All done: ana has been told.")
    chat.expect(PROMPT)
    chat.send("/exit\r")
    assert chat.wait() == 0

    runs = _runs(home)
    assert [r["status"] for r in runs] == ["completed", "completed"]
    assert runs[0]["thread_id"] == runs[1]["thread_id"]  # multi-turn: one conversation
    gates = json.loads(run_reverie(home, "gates", "list", "--status", "all", "--json").stdout)
    assert sorted(g["status"] for g in gates) == ["approved", "denied"]
    denied = next(g for g in gates if g["status"] == "denied")
    assert denied["reason"] == "not today"


def test_ctrl_c_cancels_the_running_turn_and_the_chat_goes_on(
    tmp_path: Path, spawn: Callable[..., PtyReverie]
) -> None:
    home = tmp_path / "home"
    # nap_once sleeps the first time only: the first turn hangs, the next one answers.
    _agent_config(
        home,
        tmp_path,
        [{"call": "nap_once", "arguments": {"seconds": 60}}, {"reply": "Awake now."}],
        '["cli_fixture_tools:nap_once"]',
    )
    chat = spawn("chat")

    chat.expect(PROMPT)
    chat.send("take a long nap\r")
    chat.expect("→ nap_once(seconds=60)")
    chat.send("\x03")  # Ctrl-C, as the terminal delivers it: SIGINT to the program
    chat.expect("✗ nap_once: cancelled")
    chat.expect("run cancelled")
    chat.expect(PROMPT)

    chat.send("are you there?\r")
    chat.expect("Awake now.")
    chat.expect(PROMPT)
    chat.send("/exit\r")
    assert chat.wait() == 0

    runs = _runs(home)
    assert [r["status"] for r in runs] == ["completed", "cancelled"]
    # Labelled as what it is: cancelled by the person at the keyboard, not interrupted.
    assert runs[1]["exit"]["reason"] == "Ctrl-C"


def test_exit_new_and_the_readme_command_from_the_repo_root(
    tmp_path: Path, spawn: Callable[..., PtyReverie]
) -> None:
    home = tmp_path / "home"
    # Exactly the README's command, run from the repository root.
    chat = spawn("chat", "--model", "scripted:examples/scripted_hello.json", cwd=REPO)

    chat.expect(PROMPT)
    chat.send("What is 2 + 3?\r")
    chat.expect("→ add(a=2, b=3)")
    chat.expect("✓ add")
    chat.expect(HELLO)
    chat.expect(PROMPT)
    chat.send("/new\r")
    chat.expect(PROMPT)
    chat.send("hi again\r")
    chat.expect(HELLO)
    chat.expect(PROMPT)
    chat.send("/exit\r")
    assert chat.wait() == 0

    runs = _runs(home)
    assert [r["status"] for r in runs] == ["completed", "completed"]
    assert runs[0]["thread_id"] != runs[1]["thread_id"]  # /new started a new thread


@pytest.mark.parametrize(("key", "name"), [("\x04", "Ctrl-D"), ("\x03", "Ctrl-C")])
def test_ctrl_d_or_ctrl_c_at_the_prompt_quits_cleanly(
    key: str, name: str, spawn: Callable[..., PtyReverie]
) -> None:
    chat = spawn("chat", "--model", "scripted:examples/scripted_hello.json")

    chat.expect(PROMPT)
    chat.send(key)
    if key == "\x03":
        # CPython's readline loop can miss a SIGINT that lands between printing the prompt and
        # entering select() (it only checks signals when select is interrupted); a person
        # presses Ctrl-C again, and so does this test if the first one was swallowed.
        try:
            code = chat.wait(timeout=15)
        except AssertionError:
            chat.send(key)
            code = chat.wait()
    else:
        code = chat.wait()

    assert code == 0, name
    assert "Traceback" not in chat.output


def test_piped_input_gets_plain_text(tmp_path: Path) -> None:
    result = run_reverie(
        tmp_path / "home",
        "chat",
        "--model",
        "scripted:examples/scripted_hello.json",
        cwd=REPO,
        stdin="What is 2 + 3?\n",  # then EOF: the chat ends
    )

    assert result.returncode == 0, result.stderr
    assert "→ add(a=2, b=3)\n✓ add\n" + HELLO + "\n" in result.stdout
    assert "\x1b" not in result.stdout  # no colours when stdout is not a terminal


def test_slash_help_lists_the_chat_commands(tmp_path: Path) -> None:
    result = run_reverie(
        tmp_path / "home",
        "chat",
        "--model",
        "scripted:examples/scripted_hello.json",
        cwd=REPO,
        stdin="/help\n",
    )

    assert result.returncode == 0, result.stderr
    for command in ("/new", "/thread", "/help", "/exit"):
        assert command in result.stdout
    assert "unknown command" not in result.stdout


def test_the_chat_shows_the_thread_id_it_can_be_continued_with(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = run_reverie(
        home,
        "chat",
        "--model",
        "scripted:examples/scripted_hello.json",
        cwd=REPO,
        stdin="What is 2 + 3?\n/thread\n",
    )

    assert result.returncode == 0, result.stderr
    thread_id = _runs(home)[0]["thread_id"]
    again = f"reverie chat --model scripted:examples/scripted_hello.json --thread {thread_id}"
    assert again in result.stdout
    # Once after the first turn started the thread, once more for /thread.
    assert result.stdout.count(again) == 2


def test_the_readme_run_command_works_from_the_repo_root(tmp_path: Path) -> None:
    result = run_reverie(
        tmp_path / "home",
        "run",
        "--model",
        "scripted:examples/scripted_hello.json",
        "What is 2 + 3?",
        cwd=REPO,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == HELLO


def test_chat_without_a_model_says_what_to_set(cli: Callable[..., Result], home: Path) -> None:
    result = cli("chat")

    assert result.exit_code == 2
    assert "No agent is configured and no --model was given" in result.output
    assert "OPENAI_API_KEY" in result.output
    assert 'model = "ollama:llama3.1"' in result.output
    assert str(home / "reverie.toml") in result.output


def test_chat_with_an_unknown_thread_exits_2(cli: Callable[..., Result]) -> None:
    result = cli(
        "chat", "--model", f"scripted:{REPO / 'examples/scripted_hello.json'}", "--thread", "thr_x"
    )

    assert result.exit_code == 2
    assert "thr_x" in result.output


def test_format_call_and_answers() -> None:
    assert format_call("add", {"a": 1, "b": 2}) == "add(a=1, b=2)"
    assert format_call("send_email", {"to": "ana@x"}) == 'send_email(to="ana@x")'
    assert format_call("now", {}) == "now()"
    assert format_call("tool", None) == "tool(…)"
    long = format_call("echo", {"text": "x" * 200})
    assert long.endswith("…)") and len(long) < 80

    assert parse_answer("y") == ("approve", "")
    assert parse_answer(" YES ") == ("approve", "")
    assert parse_answer("") == ("deny", "denied by the user")
    assert parse_answer("n") == ("deny", "denied by the user")
    assert parse_answer("not today") == ("deny", "not today")


def test_the_readme_shows_the_commands_these_tests_run() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")

    assert 'reverie run --model scripted:examples/scripted_hello.json "What is 2 + 3?"\n' in readme
    assert "reverie chat --model scripted:examples/scripted_hello.json\n" in readme
