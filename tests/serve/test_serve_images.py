"""Images through ``/v1/chat/completions`` and ``/v1/responses`` (docs/images.md)."""

from __future__ import annotations

import base64
from typing import Any

from reverie import Agent, Limits
from reverie.models.openai import OpenAIChatModel
from reverie.testing import FakeOpenAIServer, tiny_png
from serve.serve_support import serving

URL = "https://images.example.com/cat.png"


def png(padding: bytes = b"") -> bytes:
    return tiny_png(len(padding))


def _agent(srv: FakeOpenAIServer, **kwargs: Any) -> Agent:
    model = OpenAIChatModel("gpt-test", base_url=srv.base_url, api_key="sk-test")
    return Agent(name="eyes", model=model, **kwargs)


def _data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


async def test_chat_completion_image_parts_reach_the_model_as_the_same_image_parts() -> None:
    image = png(b"z" * 50)
    async with (
        FakeOpenAIServer(["A cat and a dog."]) as fake,
        serving(_agent(fake)) as srv,
        srv.openai() as client,
    ):
        answer = await client.chat.completions.create(
            model="eyes",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What are these?"},
                        {"type": "image_url", "image_url": {"url": _data_url(image)}},
                        {"type": "image_url", "image_url": {"url": URL, "detail": "low"}},
                    ],
                }
            ],
        )
    assert answer.choices[0].message.content == "A cat and a dog."
    [user] = [m for m in fake.requests[0]["messages"] if m["role"] == "user"]
    assert user["content"] == [
        {"type": "text", "text": "What are these?"},
        {"type": "image_url", "image_url": {"url": _data_url(image)}},
        {"type": "image_url", "image_url": {"url": URL}},
    ]


async def test_a_chat_completion_with_an_oversized_image_is_413_and_starts_no_run() -> None:
    image = png(b"z" * 3000)
    async with FakeOpenAIServer([]) as fake:
        agent = _agent(fake, limits=Limits(max_image_bytes=1000))
        async with serving(agent) as srv:
            response = await srv.ana.post(
                "/v1/chat/completions",
                json={
                    "model": "eyes",
                    "messages": [
                        {
                            "role": "user",
                            "content": [
                                {"type": "image_url", "image_url": {"url": _data_url(image)}}
                            ],
                        }
                    ],
                },
            )
            runs = await srv.rt.store.list_runs(limit=10)
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "image_too_large"
    assert runs == []
    assert fake.requests == []


async def test_a_chat_completion_with_a_bad_image_url_is_400_invalid_image() -> None:
    async with FakeOpenAIServer([]) as fake, serving(_agent(fake)) as srv:
        response = await srv.ana.post(
            "/v1/chat/completions",
            json={
                "model": "eyes",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "file:///x.png"}}],
                    }
                ],
            },
        )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_image"


async def test_a_chat_completion_on_a_model_without_vision_is_400_images_unsupported() -> None:
    async with FakeOpenAIServer(["never"], vision=False) as fake, serving(_agent(fake)) as srv:
        response = await srv.ana.post(
            "/v1/chat/completions",
            json={
                "model": "eyes",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": URL}}],
                    }
                ],
            },
        )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "images_unsupported"


async def test_a_responses_input_image_reaches_the_model_as_an_image_part() -> None:
    image = png()
    async with FakeOpenAIServer(["A pixel."]) as fake, serving(_agent(fake)) as srv:
        response = await srv.ana.post(
            "/v1/responses",
            json={
                "model": "eyes",
                "input": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_text", "text": "What is it?"},
                            {"type": "input_image", "image_url": _data_url(image)},
                        ],
                    }
                ],
            },
        )
    assert response.status_code == 200, response.text
    [user] = [m for m in fake.requests[0]["messages"] if m["role"] == "user"]
    assert user["content"][1] == {"type": "image_url", "image_url": {"url": _data_url(image)}}


async def test_an_image_whose_bytes_are_not_its_media_type_is_400_and_starts_no_run() -> None:
    broken = _data_url(b"these bytes are not a PNG at all")  # says data:image/png
    jpeg_as_png = _data_url(b"\xff\xd8\xff\xe0" + b"\x00" * 32)
    chat_body = {
        "model": "eyes",
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": broken}}]}
        ],
    }
    responses_body = {
        "model": "eyes",
        "input": [{"role": "user", "content": [{"type": "input_image", "image_url": jpeg_as_png}]}],
    }
    async with FakeOpenAIServer(["never"]) as fake, serving(_agent(fake)) as srv:
        chat = await srv.ana.post("/v1/chat/completions", json=chat_body)
        responses = await srv.ana.post("/v1/responses", json=responses_body)
        runs = await srv.rt.runs.list(limit=10)
    for response in (chat, responses):
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "invalid_image"
    assert "image/png" in chat.json()["error"]["message"]
    assert "image/jpeg bytes" in responses.json()["error"]["message"]
    assert runs == [] and fake.requests == []  # refused at the door: no run, no model call
