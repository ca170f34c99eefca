"""``--log-level``/``--log-format`` and OTLP export from ``OTEL_*`` (docs/observability.md)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from typer.testing import Result

from cli.cli_support import EXAMPLE_SCRIPT, run_reverie


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_run_log_format_json_writes_one_json_object_per_log_line_to_stderr(
    cli: Callable[..., Result],
) -> None:
    result = cli(
        "run",
        "--log-level",
        "info",
        "--log-format",
        "json",
        "--model",
        f"scripted:{EXAMPLE_SCRIPT}",
        "hi",
    )
    assert result.exit_code == 0, result.output
    records = json_lines(result.stderr)
    lifecycle = [r for r in records if r["logger"] == "reverie.runtime"]
    assert [r["level"] for r in lifecycle] == ["info", "info"]
    assert " started (agent " in str(lifecycle[0]["message"])
    assert " finished: completed (model calls 2," in str(lifecycle[1]["message"])
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert result.stdout.strip() == "Hello! I asked the add tool: 2 + 3 = 5."


def test_run_logs_nothing_below_warning_unless_a_log_level_is_given(
    cli: Callable[..., Result],
) -> None:
    quiet = cli("run", "--log-format", "json", "--model", f"scripted:{EXAMPLE_SCRIPT}", "hi")
    assert quiet.exit_code == 0, quiet.output
    assert json_lines(quiet.stderr) == []
    loud = cli("run", "--log-level", "debug", "--model", f"scripted:{EXAMPLE_SCRIPT}", "hi")
    assert loud.exit_code == 0, loud.output
    assert " DEBUG reverie.runtime: run " in loud.stderr
    assert " INFO reverie.runtime: run " in loud.stderr


@pytest.mark.parametrize("command", ["serve", "worker", "run", "chat"])
def test_every_command_that_advances_runs_takes_log_level_and_log_format(
    cli: Callable[..., Result], command: str
) -> None:
    result = cli(command, "--help")
    assert result.exit_code == 0
    assert "--log-level" in result.stdout and "--log-format" in result.stdout


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: keeps each export request's body."""

    bodies: list[bytes]

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.path == "/v1/traces":
            type(self).bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the test output clean


@pytest.fixture
def collector() -> Iterator[tuple[str, list[bytes]]]:
    bodies: list[bytes] = []
    handler = type("Collector", (_Collector,), {"bodies": bodies})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    server.shutdown()
    server.server_close()


def exported(bodies: list[bytes]) -> tuple[set[str], list[tuple[str, dict[str, str]]]]:
    """The service names and the spans (name, string attributes) of OTLP export requests."""
    services: set[str] = set()
    spans: list[tuple[str, dict[str, str]]] = []
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for rs in request.resource_spans:
            services |= {
                a.value.string_value for a in rs.resource.attributes if a.key == "service.name"
            }
            for ss in rs.scope_spans:
                for span in ss.spans:
                    attrs = {a.key: a.value.string_value for a in span.attributes}
                    spans.append((span.name, attrs))
    return services, spans


def test_otel_environment_variables_export_the_run_spans_to_an_otlp_collector(
    tmp_path: Path, collector: tuple[str, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, bodies = collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "reverie-test")
    result = run_reverie(tmp_path, "run", "--model", f"scripted:{EXAMPLE_SCRIPT}", "hi")
    assert result.returncode == 0, result.stderr
    services, spans = exported(bodies)
    assert services == {"reverie-test"}
    assert sorted(name for name, _ in spans) == [
        "chat scripted:scripted_hello.json",
        "chat scripted:scripted_hello.json",
        "execute_tool add",
        "invoke_agent assistant",
    ]
    assert not any("gen_ai.input.messages" in attrs for _, attrs in spans)


def test_telemetry_trace_content_in_the_config_puts_message_content_on_exported_spans(
    tmp_path: Path, collector: tuple[str, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, bodies = collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{endpoint}/v1/traces")
    (tmp_path / "reverie.toml").write_text("[telemetry]\ntrace_content = true\n", encoding="utf-8")
    result = run_reverie(tmp_path, "run", "--model", f"scripted:{EXAMPLE_SCRIPT}", "hi there")
    assert result.returncode == 0, result.stderr
    _, spans = exported(bodies)
    chats = [attrs for name, attrs in spans if name.startswith("chat ")]
    assert chats and all("hi there" in attrs["gen_ai.input.messages"] for attrs in chats)
    (tool_attrs,) = [attrs for name, attrs in spans if name == "execute_tool add"]
    assert json.loads(tool_attrs["gen_ai.tool.call.arguments"]) == {"a": 2, "b": 3}


def test_reverie_serve_exports_its_runs_spans_over_otlp_and_logs_json_lines(
    tmp_path: Path, collector: tuple[str, list[bytes]]
) -> None:
    endpoint, bodies = collector
    token = "tok-otel-serve-9d2a"
    (tmp_path / "reverie.toml").write_text(
        "[agents.assistant]\n"
        f"model = {json.dumps('scripted:' + str(EXAMPLE_SCRIPT))}\n"
        'tools = ["reverie.cli.demo_tools:add"]\n'
        "[auth.tokens]\n"
        'ana = { token_env = "API_TOKEN_ANA", tenant = "acme", user = "ana" }\n',
        encoding="utf-8",
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(
        REVERIE_HOME=str(tmp_path),
        USER="tester",
        API_TOKEN_ANA=token,
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reverie.cli.app",
            "serve",
            "--port",
            str(port),
            "--log-format",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.communicate()
            try:
                httpx.get(f"{url}/v1/models", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "reverie serve did not start listening"
                time.sleep(0.05)
        answer = httpx.post(
            f"{url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {token}"},
            json={"model": "assistant", "messages": [{"role": "user", "content": "2+3?"}]},
            timeout=20,
        )
    finally:
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
    assert answer.status_code == 200, answer.text
    assert process.returncode == 0, stderr
    _, spans = exported(bodies)  # flushed when the server stopped
    names = [name for name, _ in spans]
    # An HTTP chat turn is an unbound turn: its segment span is named for that, not per turn.
    assert "invoke_agent unbound" in names and "execute_tool add" in names
    lifecycle = [r for r in json_lines(stderr) if r["logger"] == "reverie.runtime"]
    assert any(" finished: completed " in str(r["message"]) for r in lifecycle)
    assert token not in stderr
