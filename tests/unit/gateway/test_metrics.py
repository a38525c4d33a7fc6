"""The metrics a request leaves behind, read back through prometheus_client's own parser.

As in test_sse, a scripted delta source stands in for the engine (the real one is exercised by
tests/e2e/test_metrics.py); what is checked here is what the gateway records and exposes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar.exceptions import HTTPException
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.gateway.generations import CPU, failing_after_one
from tests.unit.gateway.generations import generation as scripted
from zest import errors
from zest.engines import (
    Delta,
    EngineInfo,
    EngineSpec,
    Inventory,
    LoadedEngine,
    ModelDigest,
    StageStats,
)
from zest.errors import (
    BadRequestError,
    ContextLengthExceededError,
    DeviceUnavailableError,
    EngineError,
    GatewayTimeoutError,
    ModelFileMissingError,
    RequestError,
)
from zest.gateway.http._metrics import Metrics, RequestRecord, outcome_of
from zest.gateway.http._responses import collect_body, sse_events
from zest.gateway.serving._conditions import ServingConditions
from zest.gateway.serving._generation import Generation, start_generation
from zest.gateway.serving._requests import ChatMessage, ChatRequest
from zest.gateway.serving._routing import ConditionQuery
from zest.gateway.serving._runtime import Runtime
from zest.policies import Trimmed
from zest.router import Classify, Device, ModelResult, Placement, SimilarTo, load_routes

ROUTES = Path(__file__).resolve().parents[3] / "routes.yaml"
NPU = Device("npu", frozenset({"llamacpp"}), "emulated (ZEST_EMULATE_DEVICES)", emulated=True)
HYBRID_STATS = StageStats(
    "npu(emulated)", "gpu(emulated)", 120.0, handoff_ms=8.0, handoff_bytes=1000, decode_ms=300.0
)
CPU_PLACEMENT = Placement(CPU, CPU)
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(metrics: Metrics) -> Samples:
    """Every sample of a scrape, keyed by (name, labels)."""
    text = metrics.scrape().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(scraped: Samples, name: str, **labels: str) -> float:
    return scraped.get((name, frozenset(labels.items())), 0.0)


async def tokens(*deltas: Delta) -> AsyncIterator[Delta]:
    for delta in deltas:
        await asyncio.sleep(0.002)
        yield delta


def generation(
    rest: AsyncIterator[Delta], *, first: Delta | None = None, trimmed: Trimmed | None = None
) -> Generation:
    return scripted(rest, first=first or Delta("Hello", cached_tokens=1), trimmed=trimmed)


def started(metrics: Metrics, gen: Generation, task: str = "chat") -> RequestRecord:
    """A record that reached its first token, as _Walk leaves it."""
    record = metrics.begin(task)
    record.attempt("m", "cpu")
    gen.events = record
    record.first_token(gen)
    return record


def finished_body(gen: Generation) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        try:
            return await collect_body(gen, "chat", "chat")
        finally:
            await gen.aclose()

    return asyncio.run(run())


def stream(gen: Generation) -> list[bytes]:
    async def run() -> list[bytes]:
        return [event async for event in sse_events(gen, "chat", "chat", False)]

    return asyncio.run(run())


def test_a_finished_request_moves_every_request_counter() -> None:
    metrics = Metrics()
    rest = tokens(Delta(" wor"), Delta("ld"), Delta("", "stop", 3, stats=HYBRID_STATS))
    gen = generation(rest)
    started(metrics, gen)
    body = finished_body(gen)
    assert body["usage"]["completion_tokens"] == 3
    served = {"task": "chat", "model": "m", "device": "cpu"}
    scraped = samples(metrics)
    assert (
        value(
            scraped,
            "zest_requests_total",
            **served,
            outcome="ok",
            dialect="openai",
            client="anonymous",
        )
        == 1
    )
    assert value(scraped, "zest_time_to_first_token_seconds_count", **served) == 1
    assert value(scraped, "zest_inter_token_latency_seconds_count", **served) == 2
    assert value(scraped, "zest_prompt_tokens_total", **served, client="anonymous") == 3
    assert value(scraped, "zest_cached_prompt_tokens_total", **served) == 1
    assert value(scraped, "zest_completion_tokens_total", **served, client="anonymous") == 3
    stage = "zest_pipeline_stage_seconds_count"
    assert value(scraped, stage, stage="prefill", device="npu(emulated)") == 1
    assert value(scraped, stage, stage="handoff", device="npu(emulated)->gpu(emulated)") == 1
    assert value(scraped, stage, stage="decode", device="gpu(emulated)") == 1
    assert value(
        scraped, "zest_pipeline_stage_seconds_sum", stage="decode", device="gpu(emulated)"
    ) == (pytest.approx(0.3))


def test_the_last_finished_request_is_in_stats_with_lemonades_fields() -> None:
    metrics = Metrics()
    assert metrics.stats() == {
        **dict.fromkeys(
            [
                "time_to_first_token",
                "tokens_per_second",
                "input_tokens",
                "output_tokens",
                "decode_token_times",
                "prompt_tokens",
                "task",
                "model",
                "device",
            ]
        ),
        "slo": {},  # no runtime, no routes: nothing judged
    }
    gen = generation(tokens(Delta(" a"), Delta(" b", "length", 3, stats=HYBRID_STATS)))
    started(metrics, gen)
    finished_body(gen)
    stats = metrics.stats()
    assert stats["time_to_first_token"] >= 0
    assert stats["tokens_per_second"] > 0  # no decode figure from the engine: the deltas' pace
    assert (stats["input_tokens"], stats["prompt_tokens"], stats["output_tokens"]) == (2, 3, 3)
    assert len(stats["decode_token_times"]) == 2
    assert all(t > 0 for t in stats["decode_token_times"])
    assert (stats["task"], stats["model"], stats["device"]) == ("chat", "m", "cpu")


def test_the_decode_rate_is_the_engines_when_it_reports_one() -> None:
    metrics = Metrics()
    stats = StageStats("cpu", "cpu", 10.0, decode_ms=500.0, decode_tokens=4)
    gen = generation(tokens(Delta(" a"), Delta(" b", "stop", 5, stats=stats)))
    started(metrics, gen)
    finished_body(gen)
    assert metrics.stats()["tokens_per_second"] == 8.0


def test_a_failure_before_the_first_token_counts_with_its_code_and_attempt() -> None:
    metrics = Metrics()
    record = metrics.begin("chat")
    record.attempt("m", "npu(emulated)")
    record.fell_back("device error")
    record.failed(DeviceUnavailableError("npu is not available", removed=()))
    record.failed(BadRequestError("ignored: a record ends once"))
    scraped = samples(metrics)
    assert (
        value(
            scraped,
            "zest_requests_total",
            task="chat",
            model="m",
            device="npu(emulated)",
            outcome="device_unavailable",
            dialect="openai",
            client="anonymous",
        )
        == 1
    )
    assert value(scraped, "zest_fallbacks_total", task="chat", reason="device_error") == 1
    assert not any(name.startswith("zest_time_to_first_token") for name, _ in scraped)
    assert metrics.stats()["output_tokens"] is None


def test_a_request_that_falls_back_then_succeeds_counts_the_fallback_and_the_trim() -> None:
    metrics = Metrics()
    trimmed = Trimmed(strategy="turns", tokens_before=50, trimmed_tokens=30, messages_dropped=2)
    gen = generation(tokens(Delta("", "stop", 1)), trimmed=trimmed)
    record = metrics.begin("chat")
    record.fell_back("load error")
    gen.events = record
    record.first_token(gen)
    finished_body(gen)
    scraped = samples(metrics)
    assert value(scraped, "zest_fallbacks_total", task="chat", reason="load_error") == 1
    assert value(scraped, "zest_trimmed_tokens_total", task="chat", strategy="turns") == 30
    assert (
        value(
            scraped,
            "zest_requests_total",
            task="chat",
            model="m",
            device="cpu",
            outcome="ok",
            dialect="openai",
            client="anonymous",
        )
        == 1
    )


def test_a_stream_that_fails_after_it_began_is_a_stream_error() -> None:
    metrics = Metrics()
    gen = generation(failing_after_one())
    started(metrics, gen)
    events = stream(gen)
    assert json.loads(events[-1].removeprefix(b"data: "))["error"]["type"] == "engine_error"
    scraped = samples(metrics)
    served = {"task": "chat", "model": "m", "device": "cpu"}
    ended = {"outcome": "stream_error", "dialect": "openai", "client": "anonymous"}
    assert value(scraped, "zest_requests_total", **served, **ended) == 1
    assert value(scraped, "zest_time_to_first_token_seconds_count", **served) == 1
    assert value(scraped, "zest_inter_token_latency_seconds_count", **served) == 1
    assert value(scraped, "zest_completion_tokens_total", **served, client="anonymous") == 0


def test_a_stream_closed_before_its_end_is_a_client_disconnect() -> None:
    metrics = Metrics()
    gen = generation(tokens(Delta(" a"), Delta(" b"), Delta("", "stop", 3)))
    started(metrics, gen)

    async def read_two_then_leave() -> None:
        events = sse_events(gen, "chat", "chat", False)
        await anext(events)
        await anext(events)
        await events.aclose()  # type: ignore[attr-defined]

    asyncio.run(read_two_then_leave())
    scraped = samples(metrics)
    assert (
        value(
            scraped,
            "zest_requests_total",
            task="chat",
            model="m",
            device="cpu",
            outcome="client_disconnected",
            dialect="openai",
            client="anonymous",
        )
        == 1
    )


@pytest.mark.parametrize(
    ("error", "after_first_token", "outcome"),
    [
        (BadRequestError("x"), False, "bad_request"),
        (ContextLengthExceededError("x"), False, "context_length_exceeded"),
        (GatewayTimeoutError("x", code="total_timeout"), True, "total_timeout"),
        (EngineError("x"), False, "engine_error"),
        (EngineError("x"), True, "stream_error"),
        (asyncio.CancelledError(), True, "client_disconnected"),
        (RuntimeError("x"), False, "internal_error"),
        (HTTPException(status_code=413), False, "http_413"),
        (RuntimeError("x"), True, "stream_error"),
    ],
)
def test_outcomes_are_error_codes_or_classes(
    error: BaseException, after_first_token: bool, outcome: str
) -> None:
    assert outcome_of(error, after_first_token=after_first_token) == outcome


def test_outcomes_are_declared_not_derived_from_class_names() -> None:
    class RenamedBadRequestError(BadRequestError):
        pass

    assert outcome_of(RenamedBadRequestError("x")) == "bad_request"
    assert outcome_of(errors.ClientDisconnectedError("gone")) == "client_disconnected"


def test_every_request_error_class_declares_a_snake_case_outcome() -> None:
    classes = [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, RequestError)
    ]
    assert len(classes) > 10
    for cls in classes:
        assert cls.outcome.replace("_", "").isalpha(), cls
        assert cls.outcome.islower(), cls


def runtime(devices: dict[str, Device]) -> Runtime:
    return Runtime(load_routes(ROUTES), Inventory(devices, ()))


def test_task_labels_are_bounded_to_the_routes() -> None:
    metrics = Metrics(runtime({"cpu": CPU}))
    assert metrics.task_label("chat") == "chat"
    assert metrics.task_label("anything a client sends") == "unknown"


def test_devices_and_loaded_models_are_read_at_scrape_time() -> None:
    metrics = Metrics(runtime({"cpu": CPU, "npu": NPU}))
    scraped = samples(metrics)
    assert value(scraped, "zest_loaded_models") == 0
    assert (
        value(
            scraped,
            "zest_device_info",
            device="cpu",
            kind="cpu",
            emulated="false",
            detected_by="/proc/cpuinfo",
        )
        == 1
    )
    assert (
        value(
            scraped,
            "zest_device_info",
            device="npu(emulated)",
            kind="npu",
            emulated="true",
            detected_by="emulated (ZEST_EMULATE_DEVICES)",
        )
        == 1
    )


def test_a_route_s_slo_is_judged_from_its_requests_in_metrics_and_stats(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    routes = tmp_path / "routes.yaml"
    slo = "    slo: {ttft_p95_s: 0.000001, min_tokens_per_s: 0.001, window: 1m}\n"
    text = ROUTES.read_text().replace("    description: General assistant chat.\n", slo)
    routes.write_text(text)
    metrics = Metrics(Runtime(load_routes(routes), Inventory({"cpu": CPU}, ())))
    scraped = samples(metrics)  # before any request: both objectives met, nothing breached
    assert value(scraped, "zest_slo_ok", task="chat", objective="ttft_p95") == 1
    assert value(scraped, "zest_slo_window_requests", task="chat") == 0
    assert ("zest_slo_ttft_p95_seconds", frozenset({("route", "chat")})) not in scraped
    stats = StageStats("cpu", "cpu", 10.0, decode_ms=500.0, decode_tokens=4)
    for _ in range(3):
        gen = generation(tokens(Delta(" a"), Delta(" b", "stop", 5, stats=stats)))
        started(metrics, gen)
        finished_body(gen)
    scraped = samples(metrics)
    served = {"task": "chat", "model": "m", "device": "cpu"}
    assert value(scraped, "zest_decode_tokens_per_second_count", **served) == 3
    assert value(scraped, "zest_decode_tokens_per_second_sum", **served) == 24.0
    assert value(scraped, "zest_slo_ok", task="chat", objective="ttft_p95") == 0
    assert value(scraped, "zest_slo_ok", task="chat", objective="tokens_per_s") == 1
    assert value(scraped, "zest_slo_breaches_total", task="chat", objective="ttft_p95") == 1
    assert value(scraped, "zest_slo_breaches_total", task="chat", objective="tokens_per_s") == 0
    assert value(scraped, "zest_slo_ttft_p95_seconds", task="chat") > 0
    assert value(scraped, "zest_slo_tokens_per_second", task="chat") == 8.0
    assert value(scraped, "zest_slo_window_requests", task="chat") == 3
    chat = metrics.stats()["slo"]["chat"]
    assert (chat["ok"], chat["requests"], chat["window_s"]) == (False, 3, 60.0)
    assert chat["objectives"]["ttft_p95"]["breaches"] == 1
    assert chat["objectives"]["tokens_per_s"] == {
        "target": 0.001,
        "value": 8.0,
        "ok": True,
        "breaches": 0,
    }
    assert set(metrics.stats()["slo"]) == {"chat"}  # the other routes have no slo
    breaches = [r for r in caplog.records if r.getMessage().startswith("SLO breached")]
    assert len(breaches) == 1  # three requests missed; one line
    assert breaches[0].levelname == "WARNING"
    assert breaches[0].getMessage().startswith("SLO breached: route chat: ttft_p95 ")


def test_two_apps_in_one_process_keep_their_own_counts() -> None:
    first, second = Metrics(), Metrics()
    first.begin("chat").failed(BadRequestError("x"))
    labels = {"task": "chat", "model": "none", "device": "none", "outcome": "bad_request"}
    labels |= {"dialect": "openai", "client": "anonymous"}
    assert value(samples(first), "zest_requests_total", **labels) == 1
    assert value(samples(second), "zest_requests_total", **labels) == 0


class _Queued:
    """Just enough of an engine for the pool's listing: its queue depth."""

    def __init__(self, pending: int) -> None:
        self._pending = pending

    def pending(self) -> int:
        return self._pending

    def own_queue(self) -> None:
        return None  # the runner holds its queue


class _QueuedRunner:
    """A runner with requests in it: the queue depth the metrics read."""

    def __init__(self, pending: int) -> None:
        self.pending = pending


def test_a_reloaded_model_beside_its_retired_engine_is_one_series() -> None:
    """While a reload's new engine serves and the retired one finishes, both are the same
    model on the same device: one series each, summed (duplicate series are invalid)."""
    served = runtime({"cpu": CPU})
    info = EngineInfo("llamacpp", "smollm2", "cpu", "llama.cpp", 4096, "m.gguf")
    for fingerprint, pending, retired in (("old", 2, True), ("new", 1, False)):
        spec = EngineSpec("smollm2", served.routes.config.models["smollm2"], Path(), CPU_PLACEMENT)
        entry = LoadedEngine(spec, _Queued(pending), info, 0.0, 0.0, retired=retired)  # type: ignore[arg-type]
        entry.runner = _QueuedRunner(pending)  # type: ignore[assignment]
        served.pool._entries[("smollm2", fingerprint, "cpu")] = entry
    text = Metrics(served).scrape().decode()
    lines = [
        line
        for line in text.splitlines()
        if line.startswith(("zest_model_loaded{", "zest_queue_depth{"))
    ]
    assert lines == [
        'zest_queue_depth{device="cpu",model="smollm2"} 3.0',
        'zest_model_loaded{device="cpu",engine="llamacpp",model="smollm2"} 2.0',
    ]


def test_model_info_has_one_series_per_model_and_digest() -> None:
    """The same file on two placements is one copy; a reload's new file beside the retired
    engine of the old one shows both digests until the old one is gone."""
    served = runtime({"cpu": CPU})
    info = EngineInfo("llamacpp", "smollm2", "cpu", "llama.cpp", 4096, "m.gguf")
    old, new = ModelDigest("a" * 64, pinned=False), ModelDigest("b" * 64, pinned=True)
    for key, digest in (("cpu", old), ("npu", old), ("new", new)):
        spec = EngineSpec("smollm2", served.routes.config.models["smollm2"], Path(), CPU_PLACEMENT)
        entry = LoadedEngine(spec, _Queued(0), info, 0.0, 0.0, digest=digest)  # type: ignore[arg-type]
        served.pool._entries[("smollm2", key, "cpu")] = entry
    text = Metrics(served).scrape().decode()
    assert [line for line in text.splitlines() if line.startswith("zest_model_info{")] == [
        f'zest_model_info{{engine="llamacpp",model="smollm2",sha256="{"a" * 64}",'
        'sha256_pinned="false"} 1.0',
        f'zest_model_info{{engine="llamacpp",model="smollm2",sha256="{"b" * 64}",'
        'sha256_pinned="true"} 1.0',
    ]


# A chat task with rules over a model whose file is missing: the request is routed, then its
# attempt fails at once (no model loads in a unit test), and the decision is counted anyway.
RULED = """\
version: 1
models:
  m: {engine: llamacpp, source: missing.gguf}
  e: {engine: llamacpp, source: missing-embed.gguf, options: {embedding: true}}
routes:
  chat:
    kind: chat
    model: m
    phrases: {code: ["a stack trace"]}
    rules:
      - {id: code, when: {keywords_any: ["def "]}, to: coder}
  coder: {kind: chat, model: m}
  embed: {kind: embedding, model: e}
"""


def ruled_runtime(tmp_path: Path) -> Runtime:
    (tmp_path / "routes.yaml").write_text(RULED)
    return Runtime(load_routes(tmp_path / "routes.yaml"), Inventory({"cpu": CPU}, ()))


def test_each_request_of_a_task_with_rules_counts_the_rule_that_chose_its_route(
    tmp_path: Path,
) -> None:
    served = ruled_runtime(tmp_path)
    metrics = Metrics(served)

    async def ask(task: str, text: str) -> None:
        record = metrics.begin()
        body = ChatRequest(model=task, messages=[ChatMessage(role="user", content=text)])
        try:
            await start_generation(
                served, task, kind="chat", body=body, request_id="r", events=record,
                messages=body.messages,
            )  # fmt: skip
        except ModelFileMissingError as exc:  # as the app records a failure
            record.failed(exc)
        else:
            raise AssertionError("the model file is missing: the request cannot be served")

    async def scenario() -> None:
        await ask("chat", "def f(): pass")
        await ask("chat", "DEF g(): pass")  # ASCII letters fold: the same rule
        await ask("chat", "Hello")
        await ask("coder", "def h(): pass")  # a task without rules makes no decision
        await served.close()

    asyncio.run(scenario())
    scraped = samples(metrics)
    assert value(scraped, "zest_route_decisions_total", task="chat", rule="code") == 2
    assert value(scraped, "zest_route_decisions_total", task="chat", rule="default") == 1
    assert not any(
        name == "zest_route_decisions_total" and ("task", "coder") in labels
        for name, labels in scraped
    )
    failed = {"model": "m", "device": "cpu", "outcome": "model_not_available"}
    failed |= {"dialect": "openai", "client": "anonymous"}
    assert value(scraped, "zest_requests_total", task="chat", **failed) == 3


def test_model_backed_conditions_are_timed_and_their_cache_hits_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served, other = ruled_runtime(tmp_path), ruled_runtime(tmp_path)
    metrics = Metrics(served)
    Metrics(other)  # another app's runtime: its evaluations are not this one's
    similar = SimilarTo(via="embed", label="code", min_score=0.5)
    classify = Classify(via="coder", labels=("a", "b"), prompt="a or b?", label="a")

    async def scored(*_: Any) -> ModelResult:
        await asyncio.sleep(0.003)
        return ModelResult(score=0.9, label="a")

    monkeypatch.setattr(served.oracle, "_timed", scored)
    monkeypatch.setattr(other.oracle, "_timed", scored)
    chat = served.routes.config.routes["chat"]

    async def scenario() -> None:
        for oracle, routes, condition, text in (
            (served.oracle, served.routes, similar, "x"),
            (served.oracle, served.routes, similar, "x"),  # the same text: from the cache
            (served.oracle, served.routes, similar, "y"),
            (served.oracle, served.routes, classify, "x"),
            (other.oracle, other.routes, classify, "x"),
        ):
            models = ServingConditions(served, start_generation)
            await oracle.resolve(ConditionQuery(models, routes, chat, condition, text))

    asyncio.run(scenario())
    scraped = samples(metrics)
    seconds = "zest_routing_condition_seconds"
    assert value(scraped, f"{seconds}_count", kind="similar_to") == 2
    assert value(scraped, f"{seconds}_sum", kind="similar_to") >= 0.006
    assert value(scraped, f"{seconds}_count", kind="classify") == 1
    hits = "zest_routing_condition_cache_hits_total"
    assert value(scraped, hits, kind="similar_to") == 1
    assert value(scraped, hits, kind="classify") == 0


def test_a_failed_model_backed_condition_is_timed_and_tried_again(tmp_path: Path) -> None:
    """Its embedding route cannot load (no file): the condition errs (on_error decides), is
    timed, and is not cached, so the next request tries again."""
    served = ruled_runtime(tmp_path)
    metrics = Metrics(served)
    similar = SimilarTo(via="embed", label="code", min_score=0.5)
    chat = served.routes.config.routes["chat"]

    async def scenario() -> list[ModelResult]:
        models = ServingConditions(served, start_generation)
        query = ConditionQuery(models, served.routes, chat, similar, "x")
        found = [await served.oracle.resolve(query)]
        found.append(await served.oracle.resolve(query))
        await served.close()
        return found

    found = asyncio.run(scenario())
    assert [(r.error or "").startswith("model file not found") for r in found] == [True, True]
    scraped = samples(metrics)
    assert value(scraped, "zest_routing_condition_seconds_count", kind="similar_to") == 2
    assert value(scraped, "zest_routing_condition_cache_hits_total", kind="similar_to") == 0
