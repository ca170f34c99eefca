"""``reverie serve``'s memory is flat under sustained load (DESIGN §20; docs/benchmarks.md).

The soak benchmark itself (``benchmarks/soak_serve.py``) drives a real ``reverie serve`` child
process, with fewer and smaller waves than its defaults: concurrent chat completions through
real HTTP, one in five streamed, two tenants, the agent's model a fake OpenAI server, so the
turns go through the real OpenAI adapter. The criterion is memory, never time: after a warm-up
(the first half of the waves: the allocator's arenas, bounded caches), the server's resident
memory must grow by less than 10% over the second half. A server that keeps something of
every finished turn grows with every wave (it was ~1 MB a turn: an SDK client per model call,
freed only by the rare full collections of the server's garbage-collector settings).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,  # a Python subprocess serving hundreds of turns
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/status"),
]

SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak_serve.py"
WAVES = 6
TURNS = 110
"""Concurrent turns a wave: 660 turns in all, 330 after the warm-up. Fewer concurrent turns
hide the leak this pins down: the model clients a wave leaves behind are freed when few of
them are alive at a young collection."""
MAX_GROWTH = 0.10


def test_reverie_serve_memory_stays_flat_under_sustained_load() -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # this checkout's reverie
    args = ["--waves", str(WAVES), "--turns", str(TURNS), "--stream-every", "5", "--json"]
    done = subprocess.run(
        [sys.executable, str(SOAK), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=280,  # a hang guard under pytest-timeout's 300 s, not a time budget
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    rss: list[int] = figures["rss"]
    assert len(rss) == WAVES
    middle = WAVES // 2
    grew = rss[-1] / rss[middle - 1] - 1
    mib = [round(value / 2**20, 1) for value in rss]
    assert grew < MAX_GROWTH, f"RSS after each wave (MiB): {mib}; +{grew:.0%} after wave {middle}"
