"""Guardrails over HTTP: a streaming client receives nothing a guardrail blocks (DESIGN §20)."""

from __future__ import annotations

from reverie import Agent
from reverie.hooks import Deny, InputGuardContext, ReplyGuardContext
from reverie.testing import ScriptedModel, reply
from serve.serve_support import error_of, serving

SECRET = "the vault code is 4417"


def no_vault_codes(ctx: ReplyGuardContext) -> Deny | None:
    return Deny("vault codes are not shared") if "vault code" in ctx.text else None


async def test_a_streaming_chat_completions_client_receives_nothing_of_a_denied_reply() -> None:
    agent = Agent(name="talker", model=ScriptedModel([reply(f"Sure: {SECRET}. Anything else?")]))
    async with serving(agent) as srv:
        srv.rt.hooks.register("before_reply", no_vault_codes, name="no-vault-codes")
        body = {
            "model": "talker",
            "messages": [{"role": "user", "content": "the code?"}],
            "stream": True,
        }
        async with srv.ana.stream("POST", "/v1/chat/completions", json=body) as response:
            received = (await response.aread()).decode()
    assert "4417" not in received and "vault code is" not in received
    assert "Sure" not in received
    assert "guardrail_tripped" in received and "no-vault-codes" in received


async def test_a_denied_reply_over_the_non_streaming_route_is_an_error_without_the_text() -> None:
    agent = Agent(name="talker", model=ScriptedModel([reply(f"Sure: {SECRET}")]))
    async with serving(agent) as srv:
        srv.rt.hooks.register("before_reply", no_vault_codes, name="no-vault-codes")
        answer = await srv.ana.post(
            "/v1/chat/completions",
            json={"model": "talker", "messages": [{"role": "user", "content": "the code?"}]},
        )
    assert answer.status_code == 403, answer.text
    assert error_of(answer)["code"] == "guardrail_tripped"
    assert "4417" not in answer.text and "no-vault-codes" in answer.text


async def test_an_input_guardrail_refuses_a_run_over_http_before_anything_is_stored() -> None:
    def no_vaults(ctx: InputGuardContext) -> Deny | None:
        return Deny("no vault talk") if "vault" in ctx.text else None

    model = ScriptedModel([reply("ok")])
    async with serving(Agent(name="talker", model=model)) as srv:
        srv.rt.hooks.register("before_input", no_vaults, name="no-vaults")
        refused = await srv.ana.post("/v1/runs", json={"agent": "talker", "input": "open vault"})
        runs = (await srv.ana.get("/v1/runs")).json()["data"]
    assert refused.status_code == 400 and error_of(refused)["code"] == "guardrail_tripped"
    assert runs == [] and model.requests == []
