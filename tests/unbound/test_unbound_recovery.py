"""An unbound run keeps what it needs with its row (DESIGN §14): a new process resumes it with
its own limits, contract and model spec — never the next caller's — or ends it
``Failed(not_resumable)`` when what it needs existed only in the process that submitted it."""

from __future__ import annotations

import itertools
from typing import Any

from curation.recovery_support import spec_of, wait_for_requests
from reverie import Limits, Runtime, Scope, tool
from reverie.runtime import OutputContract
from reverie.testing import call
from reverie.testing.fake_openai import FakeHang, FakeOpenAIServer, FakeStep
from unbound.unbound_support import REPORT_SCHEMA

REPORT = OutputContract.json_schema("report", REPORT_SCHEMA)


def stubborn() -> Any:
    """A model that hangs on its first request, then answers with ever-different invalid
    reports (so only a budget can stop it, never no-progress detection)."""
    counter = itertools.count(1)

    def answer(body: dict[str, Any]) -> FakeStep:
        n = next(counter)
        if n == 1:
            return FakeHang(seconds=120.0)
        return call("structured_result", changed=f"attempt {n}", summary="not done")

    return answer


async def test_unbound_limits_are_stored_with_the_run_never_taken_from_the_next_caller(
    db_url: str, scope: Scope
) -> None:
    async with FakeOpenAIServer(stubborn()) as server:
        first = await Runtime.open(db_url)
        run_id = await first.unbound.submit(
            system_prompt="Report.",
            messages=["Start."],
            output_contract=REPORT,
            limits=Limits(max_model_calls=2),
            idempotency_key="report-1",
            scope=scope,
            model=spec_of(server),
        )
        await wait_for_requests(server, 1)
        await first.aclose()  # stopped mid-call: the run stays resumable

        async with Runtime.open(db_url) as second:
            again = await second.unbound.submit(
                system_prompt="Report, and take your time.",
                messages=["Start."],
                output_contract=OutputContract.json_object(),
                limits=Limits(max_model_calls=50),
                idempotency_key="report-1",
                scope=scope,
                model=spec_of(server),
            )
            result = await second.unbound.result(again)
    assert again == run_id
    assert result.status == "failed"
    assert result.exit.kind == "model_call_limit"  # type: ignore[union-attr]
    assert len(server.requests) <= 3  # the first process's 2-call budget, not the caller's 50
    # The first caller's prompt and contract too, not the second's.
    assert server.requests[-1]["messages"][0]["content"] == "Report."
    assert any(t["function"]["name"] == "structured_result" for t in server.requests[-1]["tools"])


async def test_an_unbound_run_with_tool_objects_is_not_resumable_in_another_process(
    db_url: str, scope: Scope
) -> None:
    @tool(effects=set())
    def step(n: int) -> str:
        """Take a step."""
        return f"step {n}"

    async with FakeOpenAIServer([FakeHang(seconds=120.0)]) as server:
        first = await Runtime.open(db_url)
        run_id = await first.unbound.submit(
            system_prompt="Work.",
            messages=["Start."],
            tools=[step],
            output_contract=REPORT,
            scope=scope,
            model=spec_of(server),
        )
        await wait_for_requests(server, 1)
        await first.aclose()
        async with Runtime.open(db_url) as second:
            (result,) = await second.recover()
            stored = await second.store.get_run(run_id)
    assert result.run_id == run_id and stored.status == "failed"
    assert result.exit.kind == "not_resumable"  # type: ignore[union-attr]
    assert "tools" in result.exit.safe_summary  # type: ignore[union-attr]
