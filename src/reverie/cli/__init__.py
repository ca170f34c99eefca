"""The ``reverie`` command line (Typer + Rich): see :mod:`reverie.cli.app` and ``docs/cli.md``.

Only :func:`main` lives here and it imports the commands when called, so importing one module
of the package stays light.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

__all__ = ["main", "restore_interrupts"]

INTERRUPTED_EXIT = 130
"""What a Ctrl-C during start-up exits with, as shells report SIGINT."""


def _interrupted(signum: int, frame: FrameType | None) -> None:
    # Start-up (imports, parsing, --help) has nothing to clean up: leave at once, quietly,
    # rather than with a KeyboardInterrupt traceback out of whichever import was running.
    sys.stderr.write("\ninterrupted\n")
    raise SystemExit(INTERRUPTED_EXIT)


def restore_interrupts() -> None:
    """Give Ctrl-C back to Python once a command starts its work.

    From here on a Ctrl-C is a ``KeyboardInterrupt`` again, which the commands turn into a
    cancelled run and exit code 130 (and ``asyncio.run`` installs its own handler only over
    the default one).
    """
    on_main = threading.current_thread() is threading.main_thread()
    if on_main and signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main() -> None:
    """Console-script entry point: ``reverie`` (and ``python -m reverie``).

    The commands are imported here, inside a SIGINT handler that exits 130 without a
    traceback, so a Ctrl-C while the program starts is as quiet as one while it runs.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _interrupted)
    try:
        from reverie.cli.app import app

        app(prog_name="reverie")
    finally:
        restore_interrupts()
