"""A curation pass is traced: one ``curation_pass`` span, the pass's run its child."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from curation.curation_support import ANA, DUPLICATES, curator
from reverie import Runtime
from reverie.memory import NativeMemory


async def test_a_curation_pass_is_a_span_whose_child_is_the_pass_run() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with Runtime.open(":memory:", memory=NativeMemory(), tracer_provider=provider) as rt:
        await rt.memory.write(ANA, "MEMORY.md", DUPLICATES, expected_version=0)
        record = await rt.memory.curate(ANA, model=curator())
    spans = exporter.get_finished_spans()
    (pass_span,) = [s for s in spans if s.name == "curation_pass"]
    assert pass_span.attributes is not None and pass_span.context is not None
    assert pass_span.attributes["reverie.pass.id"] == record.pass_id
    assert pass_span.attributes["reverie.run.status"] == "completed"
    children = [
        s
        for s in spans
        if s.name.startswith("invoke_agent ")
        and s.parent is not None
        and s.parent.span_id == pass_span.context.span_id
    ]
    assert [(s.attributes or {}).get("reverie.run.id") for s in children] == [record.run_id]
    provider.shutdown()
