"""Bearer auth on every route (DESIGN §16): no or unknown token → 401, OpenAI-style."""

from __future__ import annotations

import openai
import pytest

from reverie import Agent, Scope
from reverie.errors import UsageError
from reverie.serve import create_app
from reverie.testing import ScriptedModel, reply
from serve.serve_support import ANA_TOKEN, error_of, serving

ROUTES = [
    ("GET", "/v1/models"),
    ("GET", "/v1/models/helper"),
    ("POST", "/v1/chat/completions"),
    ("GET", "/v1/runs"),
    ("POST", "/v1/runs"),
    ("GET", "/v1/runs/run_x"),
    ("GET", "/v1/runs/run_x/events"),
    ("POST", "/v1/runs/run_x/steer"),
    ("POST", "/v1/runs/run_x/follow_up"),
    ("POST", "/v1/runs/run_x/cancel"),
    ("GET", "/v1/gates"),
    ("POST", "/v1/gates/g_x/approve"),
    ("POST", "/v1/gates/g_x/deny"),
    ("GET", "/v1/no-such-route"),
]


def helper() -> Agent:
    return Agent(name="helper", model=ScriptedModel([reply("hi")]))


async def test_every_route_refuses_a_request_without_a_token_with_401() -> None:
    async with serving(helper()) as srv:
        for method, path in ROUTES:
            response = await srv.anon.request(method, path, json={})
            assert response.status_code == 401, (method, path)
            error = error_of(response)
            assert error["code"] == "invalid_api_key"
            assert "missing bearer token" in error["message"]
            assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "header",
    ["Bearer not-a-token", f"Basic {ANA_TOKEN}", f"Bearer {ANA_TOKEN}x", "Bearer", ANA_TOKEN],
)
async def test_an_unknown_or_malformed_token_is_refused_with_401(header: str) -> None:
    async with serving(helper()) as srv:
        for method, path in ROUTES:
            response = await srv.anon.request(
                method, path, json={}, headers={"authorization": header}
            )
            assert response.status_code == 401, (method, path)
            error = error_of(response)
            assert error["message"] == "invalid bearer token"
            assert ANA_TOKEN not in response.text


async def test_the_openai_sdk_raises_authentication_error_for_a_bad_token() -> None:
    async with serving(helper()) as srv, srv.openai("wrong-token") as client:
        with pytest.raises(openai.AuthenticationError) as caught:
            await client.models.list()
        assert caught.value.status_code == 401
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(
                model="helper", messages=[{"role": "user", "content": "hi"}]
            )


async def test_a_known_token_is_accepted_and_unknown_routes_answer_404_as_json() -> None:
    async with serving(helper()) as srv:
        assert (await srv.ana.get("/v1/models")).status_code == 200
        missing = await srv.ana.get("/v1/no-such-route")
        assert missing.status_code == 404
        assert error_of(missing)["code"] == "not_found"
        wrong_method = await srv.ana.delete("/v1/runs")
        assert wrong_method.status_code == 405
        assert error_of(wrong_method)["code"] == "method_not_allowed"


def test_create_app_refuses_empty_or_spaced_tokens_and_non_scopes() -> None:
    ana = Scope(tenant="acme", user="ana")
    for tokens in ({"": ana}, {"a b": ana}, {" tok": ana}):
        with pytest.raises(UsageError, match="token"):
            create_app(None, agents={}, tokens=tokens)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="Scope"):
        create_app(None, agents={}, tokens={"tok": "ana"})  # type: ignore[arg-type,dict-item]
    with pytest.raises(UsageError, match=r"not a reverie\.Agent"):
        create_app(None, agents={"x": "agent"}, tokens={})  # type: ignore[arg-type,dict-item]
