"""Images in user input (docs/images.md), through the public API and the official SDKs.

Every run here goes through ``Runtime`` to the real ``openai``/``anthropic`` SDK and a fake
server that validates image parts the way the provider does.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from reverie import Agent, Image, Limits, Runtime, Scope, Text, tool
from reverie.errors import ImageTooLarge, UsageError
from reverie.models.hermes import HermesModel
from reverie.models.openai import OpenAIChatModel
from reverie.testing import FakeOpenAIServer, tiny_png
from reverie.testing.fake_openai import FakeReply, FakeToolCall

SCOPE = Scope(tenant="acme", user="ana")
URL = "https://images.example.com/cat.png"


def png(padding: bytes = b"") -> bytes:
    return tiny_png(len(padding))


def openai_agent(srv: FakeOpenAIServer, **kwargs: Any) -> Agent:
    model = OpenAIChatModel("gpt-test", base_url=srv.base_url, api_key="sk-test")
    return Agent(name="eyes", model=model, **kwargs)


def user_content(body: dict[str, Any]) -> Any:
    [user] = [m for m in body["messages"] if m["role"] == "user"]
    return user["content"]


async def test_an_image_given_as_bytes_reaches_openai_as_a_data_url_image_part() -> None:
    image = png()
    async with FakeOpenAIServer(["A cat."]) as srv, Runtime.open(":memory:") as rt:
        r = await rt.run(openai_agent(srv), [Text("What is this?"), Image(data=image)], scope=SCOPE)
    assert r.status == "completed", r.exit
    assert r.text == "A cat."
    data_url = "data:image/png;base64," + base64.b64encode(image).decode()
    assert user_content(srv.requests[0]) == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": data_url}},
    ]


async def test_an_image_url_is_sent_and_stored_as_the_url() -> None:
    async with FakeOpenAIServer(["A cat."]) as srv, Runtime.open(":memory:") as rt:
        r = await rt.run(openai_agent(srv), [Text("And this?"), Image(url=URL)], scope=SCOPE)
        rows = await rt.store.thread_items(r.thread_id)
    assert r.status == "completed", r.exit
    assert user_content(srv.requests[0])[1] == {"type": "image_url", "image_url": {"url": URL}}
    [row] = [i for i in rows if i.role == "user"]
    assert row.meta["parts"][1] == {"type": "image", "url": URL}
    assert row.content == f"And this?\n[image {URL}]"


async def test_an_image_row_carries_a_text_only_content_and_its_bytes_once() -> None:
    image = png(b"x" * 100)
    async with FakeOpenAIServer(["Seen."]) as srv, Runtime.open(":memory:") as rt:
        r = await rt.run(openai_agent(srv), [Text("Look"), Image(data=image)], scope=SCOPE)
        rows = await rt.store.thread_items(r.thread_id)
    [row] = [i for i in rows if i.role == "user"]
    # What memory, curation and `runs show` read: text, the image as a marker, no bytes.
    assert row.content == f"Look\n[image image/png, {len(image)} bytes]"
    [stored] = [p for p in row.meta["parts"] if p["type"] == "image"]
    assert base64.b64decode(stored["data"]) == image
    assert len(stored["sha256"]) == 64


async def test_images_reach_anthropic_as_base64_and_url_image_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reverie.models.anthropic import AnthropicModel
    from reverie.testing import FakeAnthropicServer

    image = png()
    async with FakeAnthropicServer(["Two cats."]) as srv:
        model = AnthropicModel("claude-test", base_url=srv.base_url, api_key="sk-ant-test")
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(
                Agent(name="eyes", model=model),
                [Text("Compare"), Image(data=image), Image(url=URL)],
                scope=SCOPE,
            )
    assert r.status == "completed", r.exit
    assert srv.requests[0]["messages"][0]["content"] == [
        {"type": "text", "text": "Compare"},
        {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": "image/png",
                "data": base64.b64encode(image).decode(),
            },
        },
        {"type": "image", "source": {"type": "url", "url": URL}},
    ]


async def test_a_model_without_vision_fails_the_run_with_images_unsupported_and_no_retry() -> None:
    async with (
        FakeOpenAIServer(["never sent"], vision=False) as srv,
        Runtime.open(":memory:") as rt,
    ):
        r = await rt.run(openai_agent(srv), [Text("What?"), Image(data=png())], scope=SCOPE)
    assert r.status == "failed"
    assert r.exit.kind == "images_unsupported"  # type: ignore[union-attr]
    assert "only supported by certain models" in r.exit.safe_summary  # type: ignore[union-attr]
    assert len(srv.requests) == 1  # refused once: retrying the same images cannot help
    assert srv.remaining == 1


async def test_a_model_without_vision_still_answers_text_only_turns() -> None:
    async with FakeOpenAIServer(["Hello."], vision=False) as srv, Runtime.open(":memory:") as rt:
        r = await rt.run(openai_agent(srv), "hi", scope=SCOPE)
    assert r.status == "completed", r.exit


async def test_an_anthropic_endpoint_without_vision_fails_the_run_with_images_unsupported() -> None:
    from reverie.models.anthropic import AnthropicModel
    from reverie.testing import FakeAnthropicServer

    async with FakeAnthropicServer(["never sent"], vision=False) as srv:
        model = AnthropicModel("local", base_url=srv.base_url, api_key="none")
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(
                Agent(name="eyes", model=model), [Text("?"), Image(url=URL)], scope=SCOPE
            )
    assert r.status == "failed"
    assert r.exit.kind == "images_unsupported"  # type: ignore[union-attr]
    assert len(srv.requests) == 1


async def test_a_hermes_text_protocol_model_refuses_images_without_sending_them() -> None:
    async with FakeOpenAIServer(["never sent"]) as srv:
        inner = OpenAIChatModel("local", base_url=srv.base_url, api_key="sk-test")
        agent = Agent(name="eyes", model=HermesModel(inner))
        async with Runtime.open(":memory:") as rt:
            r = await rt.run(agent, [Text("?"), Image(data=png())], scope=SCOPE)
    assert r.status == "failed"
    assert r.exit.kind == "images_unsupported"  # type: ignore[union-attr]
    assert "Hermes" in r.exit.safe_summary  # type: ignore[union-attr]
    assert srv.requests == []


async def test_an_oversized_image_is_refused_with_image_too_large_and_nothing_is_written() -> None:
    image = png(b"x" * 2000)
    async with FakeOpenAIServer(["never sent"]) as srv:
        agent = openai_agent(srv, limits=Limits(max_image_bytes=1000))
        async with Runtime.open(":memory:") as rt:
            with pytest.raises(ImageTooLarge) as caught:
                await rt.start(agent, [Text("big"), Image(data=image)], scope=SCOPE)
            assert caught.value.limit_bytes == 1000
            assert caught.value.size_bytes == len(image)
            assert await rt.store.list_runs(limit=10) == []
    assert srv.requests == []


async def test_the_image_byte_cap_counts_every_image_of_a_message_together() -> None:
    one = png(b"y" * 400)  # each image fits the cap; both together do not
    cap = len(one) + 10
    async with FakeOpenAIServer(["One image is fine."]) as srv:
        agent = openai_agent(srv, limits=Limits(max_image_bytes=cap))
        async with Runtime.open(":memory:") as rt:
            with pytest.raises(ImageTooLarge):
                await rt.run(agent, [Image(data=one), Image(data=one)], scope=SCOPE)
            assert await rt.store.list_runs(limit=10) == []
            r = await rt.run(agent, [Text("just one"), Image(data=one)], scope=SCOPE)
            rows = await rt.store.thread_items(r.thread_id)
    assert r.status == "completed", r.exit
    stored = [p for i in rows for p in i.meta.get("parts", ()) if p["type"] == "image"]
    assert sum(len(base64.b64decode(p["data"])) for p in stored) <= cap


async def test_steered_images_reach_the_next_model_call_and_oversized_ones_are_refused() -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()

    @tool(effects=set())
    async def wait() -> str:
        """Wait for the test."""
        entered.set()
        await gate.wait()
        return "waited"

    image = png()
    script = [FakeReply(tool_calls=(FakeToolCall("wait", {}),)), "Now I see it."]
    async with FakeOpenAIServer(script) as srv:
        agent = openai_agent(srv, tools=[wait], limits=Limits(max_image_bytes=len(image)))
        async with Runtime.open(":memory:") as rt:
            handle = await rt.start(agent, "wait, then look", scope=SCOPE)
            await asyncio.wait_for(entered.wait(), 30)
            with pytest.raises(ImageTooLarge):
                await handle.steer([Image(data=image + b"\x00")])
            await handle.steer([Text("look at this"), Image(data=image)])
            gate.set()
            r = await handle.result()
            rows = await rt.store.thread_items(r.thread_id)
    assert r.status == "completed", r.exit
    last_user = [m for m in srv.requests[-1]["messages"] if m["role"] == "user"][-1]
    assert last_user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    users = [i.content for i in rows if i.role == "user"]
    assert users == ["wait, then look", f"look at this\n[image image/png, {len(image)} bytes]"]


def test_an_image_needs_an_http_url_or_image_bytes() -> None:
    with pytest.raises(UsageError, match="http"):
        Image(url="file:///etc/passwd")
    with pytest.raises(UsageError, match="PNG, JPEG, GIF or WebP"):
        Image(data=b"not an image")
    with pytest.raises(UsageError, match="exactly one"):
        Image()
    with pytest.raises(UsageError, match="not image/tiff"):
        Image(data=png(), media_type="image/tiff")
    with pytest.raises(UsageError, match="'image/tiff' is not supported"):
        Image(data=b"II*\x00 tiff bytes", media_type="image/tiff")
    with pytest.raises(UsageError, match="holds image/png bytes, not image/jpeg"):
        Image(data=png(), media_type="image/jpeg")


def test_image_bytes_must_carry_the_signature_of_their_declared_media_type() -> None:
    with pytest.raises(UsageError, match="do not start with the image/png signature"):
        Image(data=b"these bytes are not a PNG", media_type="image/png")
    with pytest.raises(UsageError, match="do not start with the image/webp signature"):
        Image(data=b"RIFF\x00\x00\x00\x00WAVE", media_type="image/webp")
    assert Image(data=png(), media_type="image/png").media_type == "image/png"


async def test_a_message_part_that_is_not_text_or_an_image_is_a_usage_error() -> None:
    async with FakeOpenAIServer([]) as srv, Runtime.open(":memory:") as rt:
        with pytest.raises(UsageError, match=r"reverie\.Text or reverie\.Image"):
            not_parts: Any = ["plain strings are not parts"]
            await rt.start(openai_agent(srv), not_parts, scope=SCOPE)
        assert await rt.store.list_runs(limit=10) == []


async def test_the_fake_openai_server_refuses_malformed_image_parts_like_the_api() -> None:
    import openai

    bad_parts: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!!"}},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + _b64(png())}},
        {"type": "image_url", "image_url": "https://x.example/a.png"},
        {"type": "image_url", "image_url": {"url": URL, "detail": "ultra"}},
    ]
    async with FakeOpenAIServer(["ok"] * 5) as srv:
        client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="sk-test", max_retries=0)
        for part in bad_parts:
            messages: Any = [{"role": "user", "content": [part]}]
            with pytest.raises(openai.BadRequestError):
                await client.chat.completions.create(model="m", messages=messages)
        system_image: Any = [
            {"role": "system", "content": [{"type": "image_url", "image_url": {"url": URL}}]}
        ]
        with pytest.raises(openai.BadRequestError, match="role 'user'"):
            await client.chat.completions.create(model="m", messages=system_image)
        await client.close()
    assert srv.remaining == 5


async def test_the_fake_anthropic_server_refuses_malformed_image_blocks_like_the_api() -> None:
    import anthropic

    from reverie.testing import FakeAnthropicServer

    bad_sources: list[dict[str, Any]] = [
        {"type": "base64", "media_type": "image/png", "data": "%%%"},
        {"type": "base64", "media_type": "image/gif", "data": _b64(png())},
        {"type": "base64", "media_type": "image/bmp", "data": _b64(b"BM")},
        {"type": "url", "url": "ftp://x.example/a.png"},
    ]
    async with FakeAnthropicServer(["ok"] * 5) as srv:
        client = anthropic.AsyncAnthropic(base_url=srv.base_url, api_key="k", max_retries=0)
        for source in bad_sources:
            blocks: Any = [{"role": "user", "content": [{"type": "image", "source": source}]}]
            with pytest.raises(anthropic.BadRequestError):
                await client.messages.create(model="m", max_tokens=10, messages=blocks)
        await client.close()
    assert srv.remaining == 5


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_memory_records_a_turn_with_an_image_as_text_only() -> None:
    from reverie.memory import NativeMemory
    from reverie.store.documents import DocumentStore

    image = png(b"q" * 64)
    encoded = base64.b64encode(image).decode()
    async with (
        FakeOpenAIServer(["A picture of a square.", "Still a square."]) as srv,
        Runtime.open(":memory:", memory=NativeMemory()) as rt,
    ):
        agent = openai_agent(srv)
        first = await rt.run(agent, [Text("Describe the picture"), Image(data=image)], scope=SCOPE)
        # The next turn settles the first one's after-turn work (its memory record) first.
        second = await rt.run(agent, "and now?", scope=SCOPE, thread_id=first.thread_id)
        store = rt.store
        assert isinstance(store, DocumentStore)
        hits = await store.search(SCOPE, "picture square")
    assert first.status == second.status == "completed"
    logged = " ".join(h.text for h in hits if h.kind == "log")
    assert "Describe the picture" in logged
    assert f"[image image/png, {len(image)} bytes]" in logged
    assert encoded not in logged
    # The second turn's prompt still carries the first turn's image, bytes intact.
    users = [m for m in srv.requests[1]["messages"] if m["role"] == "user"]
    assert any(
        isinstance(m["content"], list) and m["content"][1]["image_url"]["url"].endswith(encoded)
        for m in users
    )


async def test_an_image_turn_enqueued_on_a_busy_thread_becomes_a_follow_up_with_its_image() -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()

    @tool(effects=set())
    async def wait() -> str:
        """Wait for the test."""
        entered.set()
        await gate.wait()
        return "waited"

    image = png()
    script = [FakeReply(tool_calls=(FakeToolCall("wait", {}),)), "Done waiting.", "A square."]
    async with FakeOpenAIServer(script) as srv, Runtime.open(":memory:") as rt:
        agent = openai_agent(srv, tools=[wait])
        handle = await rt.start(agent, "wait first", scope=SCOPE)
        await asyncio.wait_for(entered.wait(), 30)
        joined = await rt.start(
            agent,
            [Text("then this"), Image(data=image)],
            scope=SCOPE,
            thread_id=handle.thread_id,
            thread_policy="enqueue",
        )
        assert joined.run_id == handle.run_id
        gate.set()
        r = await handle.result()
    assert r.status == "completed", r.exit
    last_user = [m for m in srv.requests[-1]["messages"] if m["role"] == "user"][-1]
    assert last_user["content"][0] == {"type": "text", "text": "then this"}
    assert last_user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")


POSTGRES_URL = os.environ.get("REVERIE_TEST_POSTGRES_URL", "")


@contextlib.asynccontextmanager
async def _sqlite_url(tmp: Path) -> AsyncIterator[str]:
    yield f"sqlite:///{tmp / 'images.db'}"


def _postgres_url(tmp: Path) -> contextlib.AbstractAsyncContextManager[str]:
    from reverie.store.postgres import temporary_schema

    return temporary_schema(POSTGRES_URL, prefix="reverie_images")


@pytest.mark.parametrize(
    "store_url",
    [
        pytest.param(_sqlite_url, id="sqlite"),
        pytest.param(
            _postgres_url,
            id="postgres",
            marks=[
                pytest.mark.postgres,
                pytest.mark.skipif(not POSTGRES_URL, reason="set REVERIE_TEST_POSTGRES_URL"),
            ],
        ),
    ],
)
async def test_a_stored_image_is_read_back_from_a_reopened_store_with_identical_bytes(
    store_url: Callable[[Path], contextlib.AbstractAsyncContextManager[str]], tmp_path: Path
) -> None:
    image = png(b"\x00\xff" * 300)  # every byte value survives the JSON column
    async with store_url(tmp_path) as url, FakeOpenAIServer(["One.", "Two."]) as srv:
        async with Runtime.open(url) as rt:
            first = await rt.run(openai_agent(srv), [Text("Keep"), Image(data=image)], scope=SCOPE)
        async with Runtime.open(url) as rt:
            second = await rt.run(
                openai_agent(srv), "again", scope=SCOPE, thread_id=first.thread_id
            )
    assert first.status == second.status == "completed"
    again = next(m for m in srv.requests[1]["messages"] if m["role"] == "user")
    assert again["content"][1]["image_url"]["url"] == (
        "data:image/png;base64," + base64.b64encode(image).decode()
    )


def test_an_images_repr_never_holds_its_bytes() -> None:
    image = Image(data=png(b"secret-ish pixels"))
    assert "secret-ish" not in repr(image) and "image/png" in repr(image)
