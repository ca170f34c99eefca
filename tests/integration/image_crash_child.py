"""A worker killed mid-run by ``test_crash_images``: starts a run with an image, then hangs.

Usage: ``python image_crash_child.py DB BASE_URL IDS_FILE``. The model (at ``BASE_URL``, a fake
server in the test process) never answers the first request, so the worker is still running,
with the image in its transcript, when the test kills it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from reverie import Agent, Image, Runtime, Scope, Text
from reverie.models.openai import OpenAIChatModel
from reverie.testing import tiny_png

SCOPE = Scope(tenant="acme", user="ana")
IMAGE = tiny_png(333)
"""The image the run starts with (the test checks the bytes it sees after the resume)."""
PROMPT = "What is in this picture?"


def agent(base_url: str) -> Agent:
    """The agent of the run (the resuming process builds the same one)."""
    model = OpenAIChatModel("gpt-test", base_url=base_url, api_key="sk-test", timeout_s=300)
    return Agent(name="eyes", model=model)


async def main(db: str, base_url: str, ids_file: str) -> None:
    eyes = agent(base_url)
    async with Runtime.open(f"sqlite:///{db}", agents=[eyes]) as rt:
        handle = await rt.start(eyes, [Text(PROMPT), Image(data=IMAGE)], scope=SCOPE)
        ids = {"run_id": handle.run_id, "thread_id": handle.thread_id}
        await asyncio.to_thread(Path(ids_file).write_text, json.dumps(ids), encoding="utf-8")
        await handle.result()  # never returns: the model hangs until this process is killed


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
