"""Prometheus metrics (GET /metrics) and the last request's figures (GET /v1/stats).

Each app has its own registry (not prometheus_client's global one), so that several apps in one
process do not collide. A `RequestRecord` follows one generation request from its arrival to
its end and is the only writer of request metrics: it publishes everything once, when the
request ends, with bounded labels (task names are checked against routes.yaml; never a request
id or user text). Gauges that describe the runtime (queues, loaded models, devices) are read at
scrape time by `RuntimeCollector`; each route's SLO window (`_slo`) is judged then by
`SloCollector`. The runtime's routing oracle tells `Metrics` of each model-backed condition
(similar_to, classify) it evaluates, labelled by kind only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from litestar.exceptions import HTTPException
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from zest.engines import Delta, EngineInfo, ModelDigest, StageStats
from zest.errors import ClientDisconnectedError, RequestError
from zest.gateway.http._slo import Change, RouteState, SloTracker
from zest.gateway.http._timeline import Timeline
from zest.gateway.http._tracing import RequestTrace, Tracing
from zest.gateway.http._usage import UsageLedger
from zest.gateway.serving import Generation, RequestEvents, Runtime
from zest.router import Slo

__all__ = [
    "CONTENT_TYPE",
    "Metrics",
    "RequestRecord",
    "SloCollector",
    "loaded_engines",
    "outcome_of",
]

# The format generate_latest writes (prometheus_client's CONTENT_TYPE_LATEST has moved on to
# 1.0.0); Litestar appends "; charset=utf-8" to text types itself.
CONTENT_TYPE = "text/plain; version=0.0.4"
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Decode rates in tokens/s: an slo's min_tokens_per_s on a bound is judged exactly by the alerts.
RATE_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0, 200.0, 500.0, 1000.0)
STAGE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# An embedding of one text takes milliseconds, a classifier's label up to its timeout_s.
CONDITION_BUCKETS = (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MAX_TOKEN_TIMES = 1024  # /stats' decode_token_times keeps the first this many gaps
UNKNOWN = "unknown"  # a task name routes.yaml does not know (or a body without one)
NONE = "none"  # no attempt was made (the request failed before its plan ran)

log = logging.getLogger("zest.gateway")


def loaded_engines(runtime: Runtime) -> list[tuple[EngineInfo, int]]:
    """Each loaded engine with its queue depth: the one place that knows how the runtime holds
    its engines."""
    return [(entry.info, entry.runner.pending) for entry in runtime.pool.loaded()]


def loaded_digests(runtime: Runtime) -> list[tuple[EngineInfo, ModelDigest]]:
    """Each loaded local engine with its files' SHA-256 (a remote one has no files)."""
    return [(e.info, e.digest) for e in runtime.pool.loaded() if e.digest is not None]


def outcome_of(error: BaseException, *, after_first_token: bool = False) -> str:
    """A request's outcome label for the error that ended it: the error's own label (its code,
    else its class's declared outcome), http_STATUS for Litestar's own (a body over the size
    limit: http_413); a foreign exception, or an error without a code after the first token,
    is an internal_error before the first token and a stream_error after it."""
    if isinstance(error, asyncio.CancelledError):
        return ClientDisconnectedError.outcome
    if isinstance(error, HTTPException):
        return f"http_{error.status_code}"
    if isinstance(error, RequestError):
        if error.code is None and after_first_token:
            return "stream_error"
        return error.outcome_label
    return "stream_error" if after_first_token else "internal_error"


class Metrics:
    """The registry of one app and the figures of its last finished request."""

    def __init__(self, runtime: Runtime | None = None) -> None:
        self.runtime = runtime
        self.registry = CollectorRegistry()
        self.last: LastRequest | None = None
        self.timeline = Timeline()
        self.slo = SloTracker(report=_log_slo_change)
        self.usage = UsageLedger()  # by client, task and model (GET /v1/usage)
        self.tracing: Tracing | None = None  # OpenTelemetry, when configured (http/_tracing.py)
        self._define()
        if runtime is not None:
            self.registry.register(RuntimeCollector(runtime))
            self.registry.register(SloCollector(self))
            runtime.oracle.observers.append(self.observe_condition)

    def _define(self) -> None:
        served = ("task", "model", "device")
        self.requests = self._counter(
            "zest_requests",
            "Generation requests by how they ended, the API dialect they were sent in, and "
            "the client that sent them (anonymous: no named client; admin: the admin key).",
            (*served, "outcome", "dialect", "client"),
        )
        self.ttft = Histogram(
            "zest_time_to_first_token_seconds",
            "From the request's arrival to its first token.",
            served,
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.itl = Histogram(
            "zest_inter_token_latency_seconds",
            "Gaps between the pieces of text a generation produced after its first.",
            served,
            buckets=ITL_BUCKETS,
            registry=self.registry,
        )
        self.decode_rate = Histogram(
            "zest_decode_tokens_per_second",
            "Each finished generation's decode rate: tokens after the first per second.",
            served,
            buckets=RATE_BUCKETS,
            registry=self.registry,
        )
        self.prompt_tokens = self._counter(
            "zest_prompt_tokens",
            "Prompt tokens of requests that reached a first token, by client.",
            (*served, "client"),
        )
        self.cached_prompt_tokens = self._counter(
            "zest_cached_prompt_tokens", "Prompt tokens reused from the prefix cache.", served
        )
        self.completion_tokens = self._counter(
            "zest_completion_tokens",
            "Completion tokens of finished generations, by client.",
            (*served, "client"),
        )
        self.cache_requests = self._counter(
            "zest_cache_requests",
            "Requests of routes with a response cache whose answer is determined: hit (served "
            "from the cache, no engine) or miss.",
            ("task", "result"),
        )
        self.fallbacks = self._counter(
            "zest_fallbacks", "Attempts that failed and moved a request on.", ("task", "reason")
        )
        self.trimmed_tokens = self._counter(
            "zest_trimmed_tokens", "Prompt tokens trimmed to fit a budget.", ("task", "strategy")
        )
        self.speculative_tokens = self._counter(
            "zest_speculative_tokens",
            "Tokens drafted by speculative decoding, and those the model accepted.",
            ("task", "result"),
        )
        self.stage_seconds = Histogram(
            "zest_pipeline_stage_seconds",
            "Time of each pipeline stage (prefill, handoff, decode) per device.",
            ("stage", "device"),
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self._define_routing()

    def _define_routing(self) -> None:
        self.route_decisions = self._counter(
            "zest_route_decisions",
            "Requests of tasks with rules, by the rule that chose their route (default: none).",
            ("task", "rule"),
        )
        self.condition_seconds = Histogram(
            "zest_routing_condition_seconds",
            "Model-backed routing conditions evaluated (not from the cache): their time.",
            ("kind",),
            buckets=CONDITION_BUCKETS,
            registry=self.registry,
        )
        self.condition_cache_hits = self._counter(
            "zest_routing_condition_cache_hits",
            "Model-backed routing conditions answered from the cache.",
            ("kind",),
        )

    def _counter(self, name: str, doc: str, labels: tuple[str, ...]) -> Counter:
        return Counter(name, doc, labels, registry=self.registry)

    def begin(
        self,
        task: str | None = None,
        dialect: str = "openai",
        headers: Mapping[str, str] | None = None,
    ) -> RequestRecord:
        """A record for a request arriving now; `task` when the path already names it, and
        the dialect its endpoint speaks; traced when tracing is on (`headers`: the request's,
        whose traceparent is the trace's parent)."""
        record = RequestRecord(self, dialect)
        if self.tracing is not None:
            record.trace = self.tracing.follow(headers)
        self.sample_queue()
        if task is not None:
            record.task_named(task)
        return record

    def task_label(self, name: str) -> str:
        """`name` when routes.yaml knows it (a task, or an exposed model), else "unknown"."""
        if self.runtime is None:
            return name
        config = self.runtime.routes.config
        known = name in config.routes or config.exposes(name)
        return name if known else UNKNOWN

    def observe_condition(self, kind: str, seconds: float, cached: bool) -> None:
        """A similar_to or classify evaluated by the routing oracle (its observer)."""
        if cached:
            self.condition_cache_hits.labels(kind).inc()
        else:
            self.condition_seconds.labels(kind).observe(seconds)

    def sample_queue(self) -> None:
        """The requests queued or running in every loaded engine, for the live charts."""
        if self.runtime is not None:
            self.timeline.queue_depth(sum(pending for _, pending in loaded_engines(self.runtime)))

    def scrape(self) -> bytes:
        return generate_latest(self.registry)

    def stats(self) -> dict[str, Any]:
        """Lemonade's /stats fields (and zest's task, model, device): all null before any;
        with each route's SLO state under `slo`."""
        fields = dict.fromkeys(LastRequest.FIELDS) if self.last is None else self.last.as_stats()
        slo = {s.route: s.as_stats(self.slo.breaches(s.route)) for s in self.slo_states()}
        return {**fields, "slo": slo}

    def _slos(self) -> dict[str, Slo]:
        """The objectives of every task that has some, as routes.yaml says now."""
        if self.runtime is None:
            return {}
        config = self.runtime.routes.config
        slos = {task: config.slo_of(task) for task in config.routes}
        return {task: slo for task, slo in slos.items() if slo is not None}

    def slo_states(self) -> list[RouteState]:
        """Every route with an slo, its window judged now."""
        return self.slo.judge_all(self._slos())

    def observe_slo(self, task: str, ttft: float, tokens_per_s: float | None) -> None:
        """A request of `task` reached its first token: into its route's window, if judged."""
        slo = self._slos().get(task)
        if slo is not None:
            self.slo.observe(task, slo, ttft, tokens_per_s)


def _log_slo_change(change: Change) -> None:
    """One line per change: a breach's WARNING, however many requests miss while it lasts."""
    log.log(logging.WARNING if change.breached else logging.INFO, "%s", change.describe())


@dataclass(frozen=True)
class LastRequest:
    """The figures of one finished request, as GET /v1/stats shows them."""

    FIELDS = (
        "time_to_first_token",
        "tokens_per_second",
        "input_tokens",
        "output_tokens",
        "decode_token_times",
        "prompt_tokens",
        "task",
        "model",
        "device",
    )

    task: str
    model: str
    device: str
    time_to_first_token: float
    tokens_per_second: float | None
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    decode_token_times: tuple[float, ...]

    def as_stats(self) -> dict[str, Any]:
        return {
            "time_to_first_token": round(self.time_to_first_token, 6),
            "tokens_per_second": None
            if self.tokens_per_second is None
            else round(self.tokens_per_second, 2),
            # Lemonade: input_tokens are the tokens processed, prompt_tokens include cached ones.
            "input_tokens": self.prompt_tokens - self.cached_tokens,
            "output_tokens": self.output_tokens,
            "decode_token_times": [round(t, 6) for t in self.decode_token_times],
            "prompt_tokens": self.prompt_tokens,
            "task": self.task,
            "model": self.model,
            "device": self.device,
        }


class RequestRecord(RequestEvents):
    """Observes one request from its arrival to its end; publishes to `metrics` once, when it
    ends.

    Without metrics (a generation started outside the app) it only keeps the figures. A plain
    class, not a dataclass: Litestar would resolve a dataclass's annotations (Generation).
    """

    def __init__(self, metrics: Metrics | None = None, dialect: str = "openai") -> None:
        self.metrics = metrics
        self.dialect = dialect  # a label: the request path never knows it
        self.client = "anonymous"  # who sent it: a label, as the dialect (never a key)
        self.trace: RequestTrace | None = None  # its trace, when tracing is on
        self.finish_reason: str | None = None
        self.arrived = time.perf_counter()
        self.task: str | None = None
        self.rule: str | None = None  # the rule that chose the route (tasks with rules)
        self.model, self.device = NONE, NONE
        self.outcome: str | None = None
        self.fallback_reasons: list[str] = []
        self.gen: Generation | None = None
        self.ttft: float | None = None
        self.token_gaps: list[float] = []
        self.completion_tokens: int | None = None
        self._first_at = self._last_text_at = self._last_at = 0.0

    def task_named(self, name: str) -> None:
        """Label the record with the requested task, unless it already has one (the path's)."""
        if self.task is None:
            self.task = self.metrics.task_label(name) if self.metrics else name

    def routed(self, task: str, rule: str) -> None:
        """The task's rules chose `rule`: counted when the request ends, however it ends."""
        self.task_named(task)
        self.rule = rule
        if self.trace is not None:
            self.trace.routed(rule)

    def attempt(self, model: str, device: str) -> None:
        """The attempt being tried: an error that ends the request is labelled with it."""
        self.model, self.device = model, device
        if self.trace is not None:
            self.trace.attempt(model, device)

    def fell_back(self, kind: str) -> None:
        """An attempt failed with `kind` (policies.FailureKind) and the request moved on."""
        self.fallback_reasons.append(kind.replace(" ", "_"))
        if self.trace is not None:
            self.trace.fell_back(kind)

    def first_token(self, gen: Generation) -> None:
        self._first_at = self._last_text_at = self._last_at = time.perf_counter()
        self.ttft = self._first_at - self.arrived
        self.gen = gen
        self.model, self.device = gen.info.model, gen.info.device
        if self.trace is not None:
            self.trace.first_token(gen)

    def delta(self, delta: Delta) -> None:
        """A delta handed to the client; the final one ends the request as ok."""
        now = time.perf_counter()
        if self.gen is not None and delta is not self.gen.first:
            self._last_at = now
            if delta.text:
                self.token_gaps.append(now - self._last_text_at)
                self._last_text_at = now
        if delta.finish_reason is not None:
            self.completion_tokens = delta.completion_tokens
            self.finish_reason = delta.finish_reason
            self.finish("ok")

    def failed(self, error: BaseException) -> None:
        self.finish(outcome_of(error, after_first_token=self.gen is not None))

    def closed(self) -> None:
        """The response is closed: a request that has not ended yet lost its client."""
        self.finish("client_disconnected")

    def finish(self, outcome: str) -> None:
        if self.outcome is not None:
            return
        self.outcome = outcome
        if self.metrics is not None:
            self._publish(self.metrics)
        if self.trace is not None:
            self.trace.end(
                {
                    "task": self.task,
                    "client": self.client,
                    "dialect": self.dialect,
                    "outcome": outcome,
                    "completion_tokens": self.completion_tokens,
                    "finish_reason": self.finish_reason,
                }
            )

    def _publish(self, metrics: Metrics) -> None:
        task = self.task or UNKNOWN
        labels = (task, self.model, self.device, self.outcome, self.dialect, self.client)
        metrics.requests.labels(*labels).inc()
        if self.rule is not None:
            metrics.route_decisions.labels(task, self.rule).inc()
        for reason in self.fallback_reasons:
            metrics.fallbacks.labels(task, reason).inc()
        if self.gen is not None and self.ttft is not None:
            self._publish_generation(metrics, task, self.gen, self.ttft)
        gen = self.gen
        prompt = gen.prompt_tokens if gen is not None else 0
        metrics.usage.count(self.client, task, self.model, prompt, self.completion_tokens or 0)

    def _publish_generation(
        self, metrics: Metrics, task: str, gen: Generation, ttft: float
    ) -> None:
        served = (task, self.model, self.device)
        metrics.ttft.labels(*served).observe(ttft)
        itl = metrics.itl.labels(*served)
        for gap in self.token_gaps:
            itl.observe(gap)
        metrics.prompt_tokens.labels(*served, self.client).inc(gen.prompt_tokens)
        if gen.cache is not None:
            metrics.cache_requests.labels(task, gen.cache).inc()
        metrics.cached_prompt_tokens.labels(*served).inc(gen.first.cached_tokens)
        if gen.trimmed is not None:
            metrics.trimmed_tokens.labels(task, gen.trimmed.strategy).inc(
                gen.trimmed.trimmed_tokens
            )
        stats = gen.final_stats or gen.first.stats
        if stats is not None:
            _observe_stages(metrics, stats)
            if stats.drafted_tokens:
                metrics.speculative_tokens.labels(task, "drafted").inc(stats.drafted_tokens)
                metrics.speculative_tokens.labels(task, "accepted").inc(stats.accepted_tokens)
        rate = None
        if self.completion_tokens is not None:
            metrics.completion_tokens.labels(*served, self.client).inc(self.completion_tokens)
            metrics.last = self._last_request(task, gen, ttft, self.completion_tokens)
            rate = metrics.last.tokens_per_second
            metrics.timeline.finished(ttft, rate)
            if rate is not None:
                metrics.decode_rate.labels(*served).observe(rate)
        if gen.cache != "hit":  # the route's objectives judge its model, not its cache
            metrics.observe_slo(task, ttft, rate)
        metrics.sample_queue()

    def _last_request(self, task: str, gen: Generation, ttft: float, tokens: int) -> LastRequest:
        return LastRequest(
            task=task,
            model=self.model,
            device=self.device,
            time_to_first_token=ttft,
            tokens_per_second=self._decode_rate(gen.final_stats, tokens),
            prompt_tokens=gen.prompt_tokens,
            cached_tokens=gen.first.cached_tokens,
            output_tokens=tokens,
            decode_token_times=tuple(self.token_gaps[:MAX_TOKEN_TIMES]),
        )

    def _decode_rate(self, stats: StageStats | None, tokens: int) -> float | None:
        """Tokens after the first per second: the engine's own figure when it reports one,
        else the pace at which the deltas arrived here."""
        if stats is not None and stats.decode_ms > 0 and stats.decode_tokens > 0:
            return stats.decode_tokens / (stats.decode_ms / 1000)
        seconds = self._last_at - self._first_at
        return (tokens - 1) / seconds if tokens > 1 and seconds > 0 else None


def _observe_stages(metrics: Metrics, stats: StageStats) -> None:
    stage = metrics.stage_seconds
    stage.labels("prefill", stats.prefill_device).observe(stats.prefill_ms / 1000)
    if stats.handoff_ms is not None:
        handoff = f"{stats.prefill_device}->{stats.decode_device}"
        stage.labels("handoff", handoff).observe(stats.handoff_ms / 1000)
    if stats.decode_ms > 0:
        stage.labels("decode", stats.decode_device).observe(stats.decode_ms / 1000)


class RuntimeCollector(Collector):
    """Gauges read from the runtime at scrape time: queues, loaded models, devices."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterable[Metric]:
        loaded = loaded_engines(self.runtime)
        queue = GaugeMetricFamily(
            "zest_queue_depth",
            "Jobs submitted to a loaded engine and not finished.",
            labels=("model", "device"),
        )
        models = GaugeMetricFamily(
            "zest_model_loaded",
            "Engines loaded for a model on a device: 1, or 2 while a reload's retired engine "
            "finishes its requests.",
            labels=("model", "engine", "device"),
        )
        # Summed per label set: a reload's new engine and the retired one finishing its requests
        # are one model on one device (two series of the same labels would be invalid).
        depths: dict[tuple[str, str], int] = {}
        engines: dict[tuple[str, str, str], int] = {}
        for info, pending in loaded:
            where = (info.model, info.device)
            depths[where] = depths.get(where, 0) + pending
            what = (info.model, info.engine, info.device)
            engines[what] = engines.get(what, 0) + 1
        for where, depth in depths.items():
            queue.add_metric(where, depth)
        for what, count in engines.items():
            models.add_metric(what, count)
        yield queue
        yield models
        yield GaugeMetricFamily(
            "zest_loaded_models", "Models loaded (one per model and placement).", value=len(loaded)
        )
        yield self._model_info()
        yield self._devices()
        yield from self._ggml_devices()

    def _model_info(self) -> GaugeMetricFamily:
        """1 per loaded local model and the SHA-256 of its files: replicas serving the same
        model show the same digest (a fleet's copies compare with one query)."""
        family = GaugeMetricFamily(
            "zest_model_info",
            "1 for each loaded local model, labelled with its files' SHA-256 and whether "
            "routes.yaml pins it (then it was verified before loading).",
            labels=("model", "engine", "sha256", "sha256_pinned"),
        )
        seen = set()  # one series per label set: the same model on two devices is one copy
        for info, digest in loaded_digests(self.runtime):
            labels = (info.model, info.engine, digest.sha256, "true" if digest.pinned else "false")
            if labels not in seen:
                seen.add(labels)
                family.add_metric(labels, 1)
        return family

    def _devices(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "zest_device_info",
            "1 for each device of the inventory; emulated devices say so.",
            labels=("device", "kind", "emulated", "detected_by"),
        )
        for name, device in sorted(self.runtime.inventory.devices.items()):
            emulated = "true" if device.emulated else "false"
            family.add_metric((device.label, name, emulated, device.detected_by), 1)
        return family

    def _ggml_devices(self) -> Iterable[GaugeMetricFamily]:
        """What llama.cpp's build runs on, as ggml's registry reported it at start."""
        info = GaugeMetricFamily(
            "zest_ggml_device_info",
            "1 for each device of llama.cpp's build (ggml's registry); kind is cpu, gpu, "
            "software (a driver that computes on the CPU, such as llvmpipe) or accel.",
            labels=("ggml_device", "description", "kind"),
        )
        memory = GaugeMetricFamily(
            "zest_ggml_device_memory_bytes",
            "Memory each device of llama.cpp's build reported at start (free, total).",
            labels=("ggml_device", "state"),
        )
        report = self.runtime.inventory.ggml
        for device in report.devices if report else ():
            info.add_metric((device.name, device.description, device.kind), 1)
            memory.add_metric((device.name, "free"), device.memory_free)
            memory.add_metric((device.name, "total"), device.memory_total)
        yield from (info, memory)


class SloCollector(Collector):
    """Each route's SLO state, judged at scrape time (a window also changes as it ages)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        by_objective = ("task", "objective")  # `task`, as every other metric names a route
        ok = GaugeMetricFamily(
            "zest_slo_ok", "1 while the route's window meets the objective.", labels=by_objective
        )
        breaches = CounterMetricFamily(
            "zest_slo_breaches",
            "Times the route's window went from meeting the objective to missing it.",
            labels=by_objective,
        )
        figures = {
            "ttft_p95_s": _route_gauge("ttft_p95_seconds", "The window's p95 time to first token."),
            "tokens_per_s": _route_gauge("tokens_per_second", "The window's median decode rate."),
            "requests": _route_gauge("window_requests", "Requests in the window."),
        }
        for state in self.metrics.slo_states():
            counted = self.metrics.slo.breaches(state.route)
            for judgement in state.judgements:
                labels = (state.route, judgement.objective)
                ok.add_metric(labels, 1 if judgement.ok else 0)
                breaches.add_metric(labels, counted.get(judgement.objective, 0))
            for field, family in figures.items():
                value = getattr(state, field)
                if value is not None:
                    family.add_metric((state.route,), value)
        yield from (ok, breaches, *figures.values())


def _route_gauge(name: str, doc: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"zest_slo_{name}", f"{doc} (routes with an slo)", labels=("task",))
