"""A person sees exactly what their token's scope may see (DESIGN §16, §20): another tenant's
run, thread, gate or memory is 404 in the console as in the API, by guessed URL too, and no
list shows it."""

from __future__ import annotations

from serve.console_support import (
    ANA_TOKEN,
    EVE,
    EVE_TOKEN,
    blocked_run,
    console_serving,
    csrf,
    login,
    mailer,
)


async def test_another_tenants_run_thread_and_gate_are_404_by_guessed_url() -> None:
    async with console_serving(mailer()) as srv:
        eves = await blocked_run(srv.api_eve)
        run_id, thread_id, ref = eves["run_id"], eves["thread_id"], eves["ref"]
        await login(srv.ana, ANA_TOKEN)
        token = await csrf(srv.ana)
        reads = {
            "run": await srv.ana.get(f"/console/runs/{run_id}"),
            "live": await srv.ana.get(f"/console/runs/{run_id}/live"),
            "thread": await srv.ana.get(f"/console/threads/{thread_id}"),
        }
        changes = {
            "approve": await srv.ana.post(f"/console/gates/{ref}/approve", data={"csrf": token}),
            "deny": await srv.ana.post(f"/console/gates/{ref}/deny", data={"csrf": token}),
            "cancel": await srv.ana.post(f"/console/runs/{run_id}/cancel", data={"csrf": token}),
            "steer": await srv.ana.post(
                f"/console/runs/{run_id}/steer", data={"csrf": token, "text": "x"}
            ),
            "resume": await srv.ana.post(f"/console/runs/{run_id}/resume", data={"csrf": token}),
            "continue": await srv.ana.post(
                f"/console/threads/{thread_id}",
                data={"csrf": token, "agent": "mailer", "text": "hi", "policy": "interrupt"},
            ),
        }
        missing = await srv.ana.get("/console/runs/run_that_does_not_exist")
        lists = [
            await srv.ana.get(path)
            for path in ("/console/runs", "/console/gates", "/console/threads")
        ]
        filtered = await srv.ana.get(f"/console/runs?thread={thread_id}")
        eves_run = (await srv.api_eve.get(f"/v1/runs/{run_id}")).json()
        eves_gates = (await srv.api_eve.get("/v1/gates")).json()["data"]
    for name, response in {**reads, **changes}.items():
        assert response.status_code == 404, (name, response.status_code)
        assert EVE.tenant not in response.text, (name, response.text)
    # The same page as for an id that does not exist.
    assert missing.status_code == 404
    for page in lists:
        assert page.status_code == 200
        assert run_id not in page.text and ref not in page.text and thread_id not in page.text
    # Filtering by the other tenant's thread (the id is echoed in the form) lists no run.
    assert filtered.status_code == 200 and 'data-run="' not in filtered.text
    assert run_id not in filtered.text
    assert eves_run["status"] == "blocked"  # nothing ana did reached it
    assert [g["status"] for g in eves_gates] == ["pending"]


async def test_another_tenants_memory_never_shows_in_the_console() -> None:
    async with console_serving(mailer()) as srv:
        await srv.rt.memory.write(EVE, "MEMORY.md", "eve's secret plan: zebra", expected_version=0)
        await login(srv.ana, ANA_TOKEN)
        await login(srv.eve, EVE_TOKEN)
        anas = await srv.ana.get("/console/memory")
        anas_search = await srv.ana.get("/console/memory", params={"q": "zebra"})
        eves = await srv.eve.get("/console/memory", params={"q": "zebra"})
    assert anas.status_code == anas_search.status_code == eves.status_code == 200
    assert "zebra" not in anas.text
    assert "zebra" not in anas_search.text.replace('value="zebra"', "").replace("“zebra”", "")
    assert "eve&#39;s secret plan: zebra" in eves.text
