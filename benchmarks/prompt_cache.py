"""Provider prompt-cache hits on a long thread (issue 34; DESIGN §20: >= 90% of input cached).

    python benchmarks/prompt_cache.py [--turns 50]

A thread of ``turns`` runs of one agent (a ~2,000-token system prompt, a lookup tool and the
memory tools, native memory with a standing document): each turn looks something up and then
answers, and every fifth turn also writes a fact to MEMORY.md. It runs against the fake OpenAI
server (automatic prefix caching) and the fake Anthropic server (``cache_control``
breakpoints), which simulate the providers' caches (``reverie.testing.prompt_cache``) and log
the usage each answer reported: the provider's bill. For each provider it prints

    <provider>: cached share X.XX (cached input tokens / all input tokens), cost per turn $…

priced at list prices (gpt-5 for OpenAI: $1.25 in, $0.125 cached, $10 out per million tokens;
claude-sonnet-4-5 for Anthropic: $3 in, $0.30 cache read, $3.75 cache write, $15 out). The
figures use only the fakes' logs, so the same script measures older code (docs/benchmarks.md
has both). Target: cached share >= 0.90 on both, and the thread at most a third of the cost of
the code before prompt caching.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from reverie import Agent, Runtime, Scope, tool
from reverie.memory import NativeMemory
from reverie.models.anthropic import AnthropicModel
from reverie.models.openai import OpenAIChatModel
from reverie.testing import FakeAnthropicServer, FakeOpenAIServer, call, reply

SCOPE = Scope(tenant="bench", user="bench")
INSTRUCTIONS = (
    "You are the support assistant of a hardware shop. Answer briefly and precisely, cite the "
    "order or product you looked up, never invent stock levels, and ask before promising a "
    "delivery date. "
) * 40
"""About 8,000 characters: a realistic system prompt (~2,000 tokens)."""
PRICES: Mapping[str, Mapping[str, float]] = {
    "openai": {"input": 1.25, "cached": 0.125, "write": 1.25, "output": 10.0},
    "anthropic": {"input": 3.0, "cached": 0.30, "write": 3.75, "output": 15.0},
}


@tool(effects=set())
def lookup(key: str) -> str:
    """Look up an order or a product by its key."""
    return f"record {key}: " + ", ".join(f"field{i}=value{i}" for i in range(40))


def script(turn: list[int]) -> Callable[[Mapping[str, Any]], Any]:
    """The model: look up, then (every fifth turn) write a memory fact, then answer.

    ``turn`` holds the turn's number and how many calls it has made so far.
    """

    def answer(body: Mapping[str, Any]) -> Any:
        n, step = turn
        turn[1] += 1
        if step == 0:
            return call("lookup", key=f"order-{n}")
        if step == 1 and n % 5 == 0:
            return call("memory_write", target="MEMORY.md", content=f"- fact {n}", append=True)
        return reply(f"Order {n} is packed and ships tomorrow; I checked the record. " * 4)

    return answer


async def thread(provider: str, turns: int) -> list[dict[str, Any]]:
    turn = [0, 0]
    server: FakeOpenAIServer | FakeAnthropicServer
    if provider == "openai":
        server = FakeOpenAIServer(script(turn), models=("gpt-5",))
    else:
        server = FakeAnthropicServer(script(turn), models=("claude-sonnet-4-5",))
    async with server as srv, Runtime.open(":memory:", memory=NativeMemory()) as rt:
        await rt.memory.write(SCOPE, "MEMORY.md", "- prefers email\n", expected_version=0)
        if isinstance(srv, FakeOpenAIServer):
            model: Any = OpenAIChatModel("gpt-5", base_url=srv.base_url, api_key="k")
        else:
            model = AnthropicModel("claude-sonnet-4-5", base_url=srv.base_url, api_key="k")
        agent = Agent(name="support", model=model, instructions=INSTRUCTIONS, tools=[lookup])
        thread_id: str | None = None
        for n in range(1, turns + 1):
            turn[:] = [n, 0]
            r = await rt.run(
                agent, f"Where is my order order-{n}?", scope=SCOPE, thread_id=thread_id
            )
            assert r.status == "completed", r.exit
            thread_id = r.thread_id
        return list(srv.usages)


def figures(provider: str, usages: list[dict[str, Any]], turns: int) -> dict[str, float]:
    rates = PRICES[provider]
    read = write = plain = output = 0
    for u in usages:
        output += u.get("output_tokens", u.get("completion_tokens", 0))
        if provider == "openai":
            cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            read += cached
            plain += u["prompt_tokens"] - cached
        else:
            read += u.get("cache_read_input_tokens", 0)
            write += u.get("cache_creation_input_tokens", 0)
            plain += u["input_tokens"]
    total = read + write + plain
    usd = (
        plain * rates["input"]
        + read * rates["cached"]
        + write * rates["write"]
        + output * rates["output"]
    ) / 1e6
    return {"share": read / total if total else 0.0, "per_turn": usd / turns, "input": total}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    for provider in ("openai", "anthropic"):
        usages = await thread(provider, args.turns)
        f = figures(provider, usages, args.turns)
        print(
            f"{provider}: cached share {f['share']:.2f}, cost per turn ${f['per_turn']:.5f}, "
            f"{len(usages)} model calls, {int(f['input'])} input tokens"
        )


if __name__ == "__main__":
    asyncio.run(main())
