"""Native memory search over many entries (DESIGN §18: 100k entries, <= 20 ms p95).

    python benchmarks/memory_search.py [--entries 100000] [--queries 200]

Fills one owner's daily log on a SQLite file (FTS5) with ``entries`` 12-word notes drawn from a
5,000-word vocabulary with a Zipf-like frequency (as content words are in real text, the stop
words above them left out), puts every tenth
entry under another owner (the search must filter those out), then times ``search`` for two-word
queries drawn from the same distribution. ``--vocabulary 50`` shows the degenerate case where
every query matches a quarter of all entries.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

from reverie.core.scope import Scope
from reverie.store.sqlite import SQLiteStore


def vocabulary(size: int) -> tuple[list[str], list[float]]:
    """Pronounceable synthetic words and Zipf weights (1/rank)."""
    consonants, vowels = "bcdfghklmnprstvz", "aeiou"
    words = [
        "".join(consonants[(i // 80**k) % 16] + vowels[(i // (16 * 80**k)) % 5] for k in range(3))
        + str(i)
        for i in range(size)
    ]
    # Ranks start at 100: the hundred most frequent words of real text are stop words, which
    # search drops (reverie.store.documents.search_terms), so they cannot make a query costly.
    return words, [1.0 / (rank + 100) for rank in range(size)]


OWNER = Scope(tenant="bench", user="ana")
OTHER = Scope(tenant="bench", user="bob")


async def fill(
    store: SQLiteStore, entries: int, rng: random.Random, words: list[str], weights: list[float]
) -> None:
    start = date(2026, 1, 1)
    batch = []
    for i in range(entries):
        text = " ".join(rng.choices(words, weights, k=12))
        scope = OTHER if i % 10 == 0 else OWNER
        batch.append(store.append_log(scope, start + timedelta(days=i % 365), text))
        if len(batch) >= 500:  # concurrent appends share group commits
            await asyncio.gather(*batch)
            batch = []
    await asyncio.gather(*batch)


async def main(entries: int, queries: int, size: int) -> None:
    rng = random.Random(7)
    words, weights = vocabulary(size)
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "m.db")
        await store.open()
        try:
            t0 = time.perf_counter()
            await fill(store, entries, rng, words, weights)
            fill_s = time.perf_counter() - t0
            timings = []
            for _ in range(queries):
                query = " ".join(rng.choices(words, weights, k=2))
                t = time.perf_counter()
                await store.search(OWNER, query, limit=5)
                timings.append(time.perf_counter() - t)
        finally:
            await store.close()
    timings.sort()
    p95 = timings[int(len(timings) * 0.95) - 1]
    print(
        f"{entries} entries, {size}-word vocabulary (filled in {fill_s:.1f} s), "
        f"{queries} two-word queries, limit 5"
    )
    print(
        f"  p50 {statistics.median(timings) * 1e3:.2f} ms   p95 {p95 * 1e3:.2f} ms   "
        f"max {timings[-1] * 1e3:.2f} ms   (target p95 <= 20 ms)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--vocabulary", type=int, default=5000)
    a = parser.parse_args()
    asyncio.run(main(a.entries, a.queries, a.vocabulary))
