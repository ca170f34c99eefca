"""Memory of a real ``reverie serve`` under sustained load (DESIGN §20; issue 37).

    python benchmarks/soak_serve.py [--waves 10] [--turns 220] [--stream-every 5]
        [--model fake-openai|scripted] [--store URL] [--json]

Starts ``reverie serve`` as a child process on 127.0.0.1 (a fresh ``REVERIE_HOME`` with its
default SQLite store, two tokens of two tenants, one agent with the ``add`` tool), then sends
``--waves`` waves of ``--turns`` concurrent chat completions through real HTTP; every
``--stream-every``-th one is streamed and the turns alternate between the two tokens. Each turn
calls the tool once, then replies; a turn that does not answer the scripted reply fails the
benchmark. After each wave (every answer received) it prints the server's resident memory
(``VmRSS`` of ``/proc/<pid>/status``) and at the end the growth from the middle wave to the last
(for 10 waves: wave 5 to wave 10). Target: under 10% (the server's memory is flat after warm-up).

The model: ``fake-openai`` (default) points the agent at a :class:`FakeOpenAIServer` running in
this process, so the server goes through the real OpenAI adapter and SDK; ``scripted`` uses a
``scripted:FILE.json`` model inside the server. No network beyond loopback; Linux only
(``/proc``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from reverie.testing.fake_openai import FakeOpenAIServer, FakeReply, FakeToolCall

REPLY = "The sum is 5."
TOKENS = {"TOKEN_T1": "tok-soak-tenant1-4c1d", "TOKEN_T2": "tok-soak-tenant2-9e7a"}
"""Two bearer tokens (environment variable -> value), each of its own tenant."""
SCRIPT = [{"call": "add", "arguments": {"a": 2, "b": 3}}, {"reply": REPLY}]
TARGET_GROWTH = 0.10


def fake_step(body: dict[str, Any]) -> FakeReply:
    """The fake provider's answer: call ``add`` once, then reply."""
    if body["messages"][-1]["role"] == "tool":
        return FakeReply(text=REPLY)
    return FakeReply(tool_calls=(FakeToolCall("add", {"a": 2, "b": 3}),))


def write_home(home: Path, model: str, store: str | None) -> None:
    """``reverie.toml`` for the soak: one agent, two tokens, the store."""
    home.mkdir(parents=True, exist_ok=True)
    if model.startswith("scripted:"):
        script = home / "script.json"
        script.write_text(json.dumps(SCRIPT), encoding="utf-8")
        model = f"scripted:{script}"
    store_table = f"[store]\nurl = {json.dumps(store)}\n" if store else ""
    endpoint = ""
    if model.startswith("fake:"):
        url = model.split("#", 1)[1]
        endpoint = f'[models.fake]\nbase_url = "{url}"\n'
        model = "fake:fake-model"
    (home / "reverie.toml").write_text(
        f"""{store_table}{endpoint}
[agents.adder]
model = {json.dumps(model)}
instructions = "You add numbers with the add tool."
tools = ["reverie.cli.demo_tools:add"]

[auth.tokens]
t1 = {{ token_env = "TOKEN_T1", tenant = "tenant-1", user = "ana" }}
t2 = {{ token_env = "TOKEN_T2", tenant = "tenant-2", user = "bob" }}
""",
        encoding="utf-8",
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_bytes(pid: int) -> int:
    """The resident set size of process ``pid`` (``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


@dataclass
class Server:
    """A ``reverie serve`` child process and its URL."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def rss(self) -> int:
        return rss_bytes(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(home: Path, *, env: dict[str, str] | None = None) -> Server:
    """Start ``reverie serve`` on a free loopback port and wait until it answers."""
    port = free_port()
    log = home / "serve.log"
    child_env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    child_env.update(REVERIE_HOME=str(home), **TOKENS, **(env or {}))
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "reverie", "serve", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=child_env,
        )
    server = Server(process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + 120  # start-up on a loaded machine; a hang guard only
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"reverie serve exited at start:\n{log.read_text()}")
        try:
            httpx.get(f"{server.url}/v1/models", timeout=2)
            return server
        except httpx.TransportError:
            time.sleep(0.05)
    server.stop()
    raise RuntimeError("reverie serve did not start listening")


async def one_turn(client: httpx.AsyncClient, token: str, *, stream: bool) -> None:
    """One chat completion; raises unless it answered :data:`REPLY`."""
    body = {
        "model": "adder",
        "messages": [{"role": "user", "content": "What is 2 + 3?"}],
        "stream": stream,
    }
    headers = {"authorization": f"Bearer {token}"}
    if not stream:
        response = await client.post("/v1/chat/completions", json=body, headers=headers)
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
        text = response.json()["choices"][0]["message"]["content"]
    else:
        pieces: list[str] = []
        async with client.stream(
            "POST", "/v1/chat/completions", json=body, headers=headers
        ) as response:
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {await response.aread()!r}")
            done = False
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[len("data: ") :]
                if data == "[DONE]":
                    done = True
                    continue
                chunk = json.loads(data)
                if "error" in chunk:
                    raise RuntimeError(f"stream error: {chunk['error']}")
                pieces.extend(c["delta"].get("content") or "" for c in chunk["choices"])
            if not done:
                raise RuntimeError("stream ended without [DONE]")
        text = "".join(pieces)
    if text != REPLY:
        raise RuntimeError(f"unexpected answer {text!r}")


async def wave(client: httpx.AsyncClient, turns: int, stream_every: int) -> None:
    """``turns`` concurrent turns; every ``stream_every``-th streamed, tokens alternating."""
    tokens = list(TOKENS.values())
    await asyncio.gather(
        *(
            one_turn(client, tokens[i % 2], stream=stream_every > 0 and i % stream_every == 0)
            for i in range(turns)
        )
    )


async def soak(
    server: Server, waves: int, turns: int, stream_every: int
) -> tuple[list[int], list[float]]:
    """Run the waves: the server's RSS after each one, and each one's wall time."""
    # Idle connections are dropped well before the server's keep-alive timeout (uvicorn: 5 s),
    # so a request never races the server closing the connection it reuses.
    limits = httpx.Limits(
        max_connections=turns, max_keepalive_connections=turns, keepalive_expiry=1.0
    )
    rss: list[int] = []
    seconds: list[float] = []
    async with httpx.AsyncClient(base_url=server.url, timeout=300, limits=limits) as client:
        for _ in range(waves):
            began = time.perf_counter()
            await wave(client, turns, stream_every)
            seconds.append(time.perf_counter() - began)
            rss.append(server.rss)
    return rss, seconds


def growth(rss: list[int]) -> tuple[int, float]:
    """The wave the growth is measured from (1-based: the middle one) and the relative growth
    from it to the last wave."""
    middle = max(1, len(rss) // 2)
    return middle, rss[-1] / rss[middle - 1] - 1


def report(rss: list[int], start_rss: int, turns: int, seconds: list[float]) -> float:
    mib = 1024 * 1024
    print(f"{'wave':>4} {'RSS MiB':>9} {'delta MiB':>10} {'KiB/turn':>9} {'wall s':>7}")
    print(f"{'start':>4} {start_rss / mib:>9.1f}")
    previous = start_rss
    for i, (value, wall) in enumerate(zip(rss, seconds, strict=True), start=1):
        delta = value - previous
        print(
            f"{i:>4} {value / mib:>9.1f} {delta / mib:>+10.1f} "
            f"{delta / 1024 / turns:>+9.1f} {wall:>7.1f}"
        )
        previous = value
    middle, grew = growth(rss)
    verdict = "ok" if grew < TARGET_GROWTH else f"over the {TARGET_GROWTH:.0%} target"
    print(f"growth from wave {middle} to wave {len(rss)}: {grew:+.1%} ({verdict})")
    return grew


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waves", type=int, default=10)
    parser.add_argument("--turns", type=int, default=220, help="concurrent turns per wave")
    parser.add_argument("--stream-every", type=int, default=5, help="0: none streamed")
    parser.add_argument("--model", choices=["fake-openai", "scripted"], default="fake-openai")
    parser.add_argument("--store", default=None, help="the server's store (default: SQLite)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = parser.parse_args()
    if args.waves < 2 or args.turns < 1:
        parser.error("--waves must be at least 2 and --turns at least 1")

    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer(fake_step) as fake:
        home = Path(tmp) / "home"
        model = "scripted:" if args.model == "scripted" else f"fake:#{fake.base_url}"
        write_home(home, model, args.store)
        server = start_server(home)
        try:
            start_rss = server.rss
            if not args.json:
                print(
                    f"reverie serve, {args.model} model, {args.waves} waves x {args.turns} "
                    f"concurrent turns (1 in {args.stream_every} streamed), 2 tenants"
                )
            rss, seconds = asyncio.run(soak(server, args.waves, args.turns, args.stream_every))
        except BaseException:
            server.stop()
            print(f"reverie serve's log:\n{server.log.read_text()[-3000:]}", file=sys.stderr)
            raise
        finally:
            server.stop()
        if server.process.returncode != 0:
            sys.exit(f"reverie serve exited {server.process.returncode}:\n{server.log.read_text()}")
    if args.json:
        middle, grew = growth(rss)
        figures = {"start_rss": start_rss, "rss": rss, "from_wave": middle, "growth": grew}
        print(json.dumps(figures))
    else:
        report(rss, start_rss, args.turns, seconds)


if __name__ == "__main__":
    main()
