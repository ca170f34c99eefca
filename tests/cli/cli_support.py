"""Helpers the CLI tests import: paths, a gated mail script, a subprocess runner."""

from __future__ import annotations

import codecs
import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
"""This directory: it holds ``cli_fixture_tools.py``, which test configs import."""
REPO = HERE.parent.parent
EXAMPLE_SCRIPT = REPO / "examples" / "scripted_hello.json"

MAIL_SCRIPT: list[dict[str, Any]] = [
    {"call": "send_email", "arguments": {"to": "ana@example.com", "body": "hello"}},
    {"reply": "Done: the email is handled."},
]
"""A turn that calls the gated ``send_email`` tool, then replies."""


def _child_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["REVERIE_HOME"] = str(home)
    env["USER"] = "tester"
    env["COLUMNS"] = "200"
    return env


def run_reverie(
    home: Path,
    *args: str,
    timeout: float = 60,
    cwd: Path | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m reverie.cli.app ARGS...`` in a child process with ``REVERIE_HOME=home``
    (in ``cwd``, with ``stdin`` as its standard input when given)."""
    return subprocess.run(
        [sys.executable, "-m", "reverie.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_child_env(home),
        check=False,
        cwd=cwd,
        input=stdin,
    )


def start_reverie(home: Path, *args: str) -> subprocess.Popen[str]:
    """Start ``python -m reverie.cli.app ARGS...`` without waiting (stdout/stderr piped)."""
    return subprocess.Popen(
        [sys.executable, "-m", "reverie.cli.app", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_child_env(home),
    )


def gate_ref(stdout: str) -> str:
    """The gate ref a blocked ``reverie run --json`` printed."""
    payload = json.loads(stdout)
    assert payload["status"] == "blocked", payload
    return str(payload["gate"]["ref"])


_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
"""Terminal escape sequences (colours, cursor moves, readline's mode switches)."""


class PtyReverie:
    """``python -m reverie.cli.app ARGS...`` on a pseudo-terminal, driven like a person would.

    The child is a session leader whose controlling terminal is the pty, so what the test
    writes is typed input (``"\\x03"`` is Ctrl-C: the terminal sends SIGINT, ``"\\x04"`` is
    Ctrl-D) and what it reads is what the screen would show. :meth:`expect` waits for text in
    the output with escape sequences and carriage returns removed.
    """

    def __init__(self, home: Path, *args: str, cwd: Path = REPO) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        env = _child_env(home)
        env["TERM"] = "xterm-256color"
        env.pop("NO_COLOR", None)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "reverie.cli.app", *args],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=cwd,
                env=env,
                start_new_session=True,
                # After setsid: make the pty this session's controlling terminal.
                preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
            )
        finally:
            os.close(slave)
        self.fd = master
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._raw = ""
        self._eof = False
        self._pos = 0

    @property
    def output(self) -> str:
        """Everything shown so far, without escape sequences and carriage returns."""
        return _ANSI.sub("", self._raw).replace("\r", "")

    def _read(self, timeout: float) -> None:
        if self._eof:
            time.sleep(min(timeout, 0.05))
            return
        ready, _, _ = select.select([self.fd], [], [], max(timeout, 0))
        if not ready:
            return
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal (it exited)
            data = b""
        if not data:
            self._eof = True
        self._raw += self._decoder.decode(data, final=not data)

    def expect(self, text: str, timeout: float = 20) -> str:
        """Wait for ``text`` after the previous match; returns the output up to its end."""
        deadline = time.monotonic() + timeout
        while True:
            output = self.output
            found = output.find(text, self._pos)
            if found >= 0:
                start, self._pos = self._pos, found + len(text)
                return output[start : self._pos]
            if self._eof or time.monotonic() >= deadline:
                why = "the program exited" if self._eof else f"{timeout} s passed"
                raise AssertionError(
                    f"{text!r} never appeared ({why}); output since the last match:\n"
                    f"{output[self._pos :]}"
                )
            self._read(deadline - time.monotonic())

    def send(self, text: str) -> None:
        """Type ``text`` (``"\\r"`` is Enter)."""
        os.write(self.fd, text.encode())

    def wait(self, timeout: float = 20) -> int:
        """Wait for the program to exit (reading what it still prints); its exit code."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            if time.monotonic() >= deadline:
                raise AssertionError(f"still running after {timeout} s:\n{self.output}")
            self._read(min(0.1, deadline - time.monotonic()))
        while not self._eof and time.monotonic() < deadline:
            self._read(0.1)
        return self.process.returncode

    def close(self) -> None:
        """Kill the program if it still runs, and close the terminal."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        os.close(self.fd)
