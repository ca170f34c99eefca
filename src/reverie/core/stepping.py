"""Awaiting the rest of a coroutine whose first step was run by hand.

A caller that runs a coroutine's first step itself (``coroutine.send(None)``) learns whether it
finishes without waiting, and arms what only a waiting call needs (a timer, a cancellation race)
only then: most calls of a pure tool or an instant model never wait.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["Resumed"]


class Resumed:
    """Awaits the rest of a coroutine whose first step has run and yielded ``first``.

    What ``await`` (``yield from``, PEP 380) does for a coroutine, from its first suspension:
    each value the coroutine yields goes to the task driving us, each value or exception the
    task sends comes back to the coroutine, and closing us closes it.
    """

    __slots__ = ("_first", "_work")

    def __init__(self, work: Coroutine[Any, Any, Any], first: Any) -> None:
        self._work = work
        self._first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        work, value = self._work, self._first
        self._first = None
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                work.close()
                raise
            except BaseException as exc:  # what the task throws in: cancellation, mostly
                try:
                    value = work.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    value = work.send(sent)
                except StopIteration as done:
                    return done.value
