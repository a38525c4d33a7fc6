"""Traces (docs/teams.md): with the standard OTEL_EXPORTER_OTLP_ENDPOINT set, each generation
request is a trace sent over OTLP (the `otel` extra installs OpenTelemetry; without the
variable nothing is imported and nothing changes).

A trace observes a request's events as its metrics record does (the request path knows
nothing of it), and is written when the request ends, each span with the times it had: the
request (a SERVER span named as OpenTelemetry's GenAI conventions name an inference,
`{operation} {task}`, with their attributes: operation, provider, model asked and served,
token usage, finish reasons), the routing decision, one span per attempt (a fallback attempt
ends with an error status and the reason it moved on), and inside the attempt that answered:
the queue wait, prefill and decode (their split is the engine's own prefill figure) or, for a
remote model, the upstream call, or the cache when the answer was a kept one. A `traceparent`
header sent with the request is the trace's parent.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zest.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from zest.gateway.serving import Generation

__all__ = ["RequestTrace", "Tracing"]

INSTALL = "pip install 'zest-gateway[otel]'"
_OPERATION = {"chat": "chat", "completion": "text_completion", "embedding": "embeddings"}


class Tracing:
    """Where the traces go: an OpenTelemetry tracer (one per app)."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Tracing | None:
        """The OTLP exporter OpenTelemetry's own variables configure, when
        OTEL_EXPORTER_OTLP_ENDPOINT (or its traces twin) is set; else None (nothing loaded)."""
        environ = os.environ if environ is None else environ
        if not (
            environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        ):
            return None
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            raise ConfigError(
                [
                    "OTEL_EXPORTER_OTLP_ENDPOINT is set, but OpenTelemetry is not installed: "
                    f"{INSTALL}, or unset the variable to serve without traces"
                ]
            ) from None
        service = environ.get("OTEL_SERVICE_NAME") or "zest"
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return cls(provider.get_tracer("zest"))

    def follow(self, headers: Mapping[str, str] | None = None) -> RequestTrace:
        """A trace of one request; `headers`: its HTTP headers (a traceparent is its parent)."""
        from opentelemetry import propagate

        parent = propagate.extract(dict(headers)) if headers is not None else None
        return RequestTrace(self.tracer, parent)


def _now() -> int:
    return time.time_ns()


@dataclass
class _Attempt:
    model: str
    device: str
    started: int
    ended: int | None = None
    failure: str | None = None


@dataclass
class RequestTrace:
    """One request's moments, as its record is told them; its spans are written at its end."""

    tracer: Tracer
    parent: Any = None
    arrived: int = field(default_factory=_now)
    routed_at: int | None = None
    rule: str | None = None
    attempts: list[_Attempt] = field(default_factory=list)
    first_at: int | None = None
    gen: Generation | None = None
    written: bool = False

    def routed(self, rule: str) -> None:
        self.routed_at, self.rule = _now(), rule

    def attempt(self, model: str, device: str) -> None:
        self.attempts.append(_Attempt(model, device, _now()))

    def fell_back(self, kind: str) -> None:
        if self.attempts:
            self.attempts[-1].ended, self.attempts[-1].failure = _now(), kind

    def first_token(self, gen: Generation) -> None:
        self.first_at, self.gen = _now(), gen

    def end(self, facts: Mapping[str, Any]) -> None:
        """Write the trace: `facts` are the record's (task, client, dialect, outcome, tokens,
        finish reason)."""
        if self.written:
            return
        self.written = True
        ended = _now()
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        task = str(facts.get("task") or "unknown")
        gen = self.gen
        kind = gen.plan.route.kind if gen is not None else "chat"
        operation = _OPERATION.get(kind, "chat")
        root = self.tracer.start_span(
            f"{operation} {task}",
            context=self.parent,
            kind=SpanKind.SERVER,
            start_time=self.arrived,
            attributes=_request_attributes(operation, task, facts, gen),
        )
        if facts.get("outcome") != "ok":
            root.set_status(Status(StatusCode.ERROR, str(facts.get("outcome"))))
            root.set_attribute("error.type", str(facts.get("outcome")))
        inside = trace.set_span_in_context(root)
        first_attempt = self.attempts[0].started if self.attempts else ended
        self._span("routing decision", inside, self.arrived, self.routed_at or first_attempt, {
            "zest.task": task, "zest.rule": self.rule or "none",
        })  # fmt: skip
        for number, attempt in enumerate(self.attempts):
            self._attempt_spans(inside, number, attempt, ended)
        root.end(end_time=ended)

    def _attempt_spans(self, inside: Any, number: int, attempt: _Attempt, ended: int) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        span = self.tracer.start_span(
            f"attempt {attempt.model} on {attempt.device}",
            context=inside,
            kind=SpanKind.INTERNAL,
            start_time=attempt.started,
            attributes={
                "zest.attempt": number,
                "gen_ai.request.model": attempt.model,
                "zest.device": attempt.device,
            },
        )
        if attempt.failure is not None:  # a fallback attempt: it failed and moved on
            span.set_status(Status(StatusCode.ERROR, attempt.failure))
            span.set_attribute("zest.fallback.reason", attempt.failure)
            span.end(end_time=attempt.ended or ended)
            return
        within = trace.set_span_in_context(span)
        gen, first = self.gen, self.first_at
        if gen is not None and first is not None:
            self._stage_spans(within, gen, attempt.started, first, ended)
        span.end(end_time=ended)

    def _stage_spans(
        self, within: Any, gen: Generation, started: int, first: int, ended: int
    ) -> None:
        if gen.cache == "hit":
            self._span("cache", within, started, ended, {"zest.cache": "hit"})
            return
        if gen.info.engine == "remote":
            self._span("upstream call", within, started, ended, {"server.address": gen.info.source})
            return
        stats = gen.first.stats or gen.final_stats
        prefill_ns = int((stats.prefill_ms if stats else 0.0) * 1e6)
        prefill_from = max(started, first - prefill_ns)
        device = stats.prefill_device if stats else gen.info.device
        self._span("queue wait", within, started, prefill_from, {})
        self._span("prefill", within, prefill_from, first, {"zest.device": device})
        decode_device = stats.decode_device if stats else gen.info.device
        self._span("decode", within, first, ended, {"zest.device": decode_device})

    def _span(
        self, name: str, context: Any, start: int, end: int, attributes: dict[str, Any]
    ) -> None:
        span = self.tracer.start_span(
            name, context=context, start_time=start, attributes=attributes
        )
        span.end(end_time=max(start, end))


def _request_attributes(
    operation: str, task: str, facts: Mapping[str, Any], gen: Generation | None
) -> dict[str, Any]:
    """The GenAI conventions' attributes of the request (and zest's own, zest.*)."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": "zest",
        "gen_ai.request.model": task,
        "zest.client": str(facts.get("client", "anonymous")),
        "zest.dialect": str(facts.get("dialect", "openai")),
        "zest.outcome": str(facts.get("outcome")),
    }
    if gen is not None:
        attributes["gen_ai.response.model"] = gen.info.model
        attributes["gen_ai.request.max_tokens"] = gen.budget.max_tokens
        attributes["gen_ai.usage.input_tokens"] = gen.prompt_tokens
        attributes["zest.device"] = gen.info.device
        attributes["zest.route"] = gen.plan.task
        if gen.cache is not None:
            attributes["zest.cache"] = gen.cache
    if facts.get("completion_tokens") is not None:
        attributes["gen_ai.usage.output_tokens"] = int(facts["completion_tokens"])
    if facts.get("finish_reason"):
        attributes["gen_ai.response.finish_reasons"] = [str(facts["finish_reason"])]
    return attributes
