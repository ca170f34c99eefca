"""Ids are unique, prefixed, time-ordered, and not shared across a fork."""

from __future__ import annotations

import os

from reverie.core.ids import new_id


def test_ids_are_unique_and_prefixed() -> None:
    ids = [new_id("run") for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("run_") for i in ids)


def test_ids_sort_by_creation_time_prefix() -> None:
    first, second = new_id("x"), new_id("x")
    assert first.split("_")[1] <= second.split("_")[1]


def test_a_forked_child_does_not_reuse_the_parents_random_bytes() -> None:
    new_id("warm")  # the parent has a pool
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read)
        os.write(write, new_id("c").encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    parent = new_id("c")
    assert child.split("_")[2] != parent.split("_")[2]
