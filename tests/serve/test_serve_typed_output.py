"""A typed agent over HTTP (docs/output.md): ``GET /v1/runs/{id}`` carries the output as JSON."""

from __future__ import annotations

from pydantic import BaseModel

from reverie import Agent
from reverie.loop.finish import STRUCTURED_RESULT_TOOL
from reverie.testing import ScriptedModel, call
from serve.serve_support import run_events, serving


class Verdict(BaseModel):
    verdict: str
    score: int


async def test_a_typed_run_started_over_http_shows_its_output_as_json() -> None:
    model = ScriptedModel([call(STRUCTURED_RESULT_TOOL, verdict="approve", score=4)])
    agent = Agent(name="judge", model=model, output_type=Verdict)
    async with serving(agent) as srv:
        started = await srv.ana.post("/v1/runs", json={"agent": "judge", "input": "Judge."})
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        await run_events(srv.ana, run_id)
        run = (await srv.ana.get(f"/v1/runs/{run_id}")).json()
        listed = (await srv.ana.get("/v1/runs")).json()

    assert run["status"] == "completed" and run["exit"]["kind"] == "structured"
    assert run["output"] == {"verdict": "approve", "score": 4}
    assert listed["data"][0]["output"] == run["output"]
