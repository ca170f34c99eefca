"""Wall time of ``reverie --help`` and ``reverie --version``, each a fresh process.

    python benchmarks/cli_startup.py [--repeat 7]

Each command is started ``--repeat`` times as ``python -m reverie ARGS``; the figure is the
median and the best wall time, next to a bare ``python -c pass`` and to importing Typer and Rich
alone (what any Typer program pays). Target: under 0.5 s for both commands.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_S = 0.5


def timed(argv: list[str], env: dict[str, str], repeat: int) -> list[float]:
    times: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "REVERIE_HOME": home}
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import typer, rich": [sys.executable, "-c", "import typer, rich.console"],
            "reverie --help": [sys.executable, "-m", "reverie", "--help"],
            "reverie --version": [sys.executable, "-m", "reverie", "--version"],
        }
        print(f"{'command':<20} {'median':>9} {'best':>9}")
        for label, argv in cases.items():
            times = timed(argv, env, args.repeat)
            median, best = statistics.median(times), min(times)
            mark = ""
            if label.startswith("reverie"):
                mark = "  ok" if median < TARGET_S else f"  over the {TARGET_S} s target"
            print(f"{label:<20} {median * 1000:>7.0f}ms {best * 1000:>7.0f}ms{mark}")


if __name__ == "__main__":
    main()
