"""zest bench's pure parts: the summary's arithmetic and the routes file it serves."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from zest.bench._ceiling import Ceiling
from zest.bench._phases import _drift, _per_minute
from zest.bench._report import format_report, targets
from zest.bench._routing import (
    MESSAGE,
    METADATA,
    PHRASES,
    deterministic_rules,
)
from zest.bench._routing import _routes_file as _routing_routes
from zest.bench._servers import find_llama_server, peers
from zest.bench._servers import routes_file as _routes_file
from zest.bench._workload import PREFILL as _PREFILL
from zest.bench._workload import Level, Sample, percentile
from zest.bench._workload import question as _question
from zest.bench._workload import stream as _stream
from zest.bench._workload import summary as _summary
from zest.errors import CommandError
from zest.gateway.cli._bench_command import _bench_phases
from zest.router import Decision, LlamaCppModel, RouteInput, decide, load_routes


def test_aggregate_is_every_rounds_tokens_over_every_rounds_time() -> None:
    # Two rounds of two streams, 64 tokens each, each round 2 s: 256 tokens in 4 s.
    samples = [Sample(100.0, 64, 40.0) for _ in range(4)]
    level = _summary("zest", 2, samples, 4.0)
    assert level.aggregate_tps == 64.0
    assert level.decode_tps_p50 == 40.0


def test_every_request_gets_a_prompt_no_cache_has_seen() -> None:
    first, second = _question(), _question()
    assert first != second
    assert first[:10] != second[:10]  # they differ from the first token on


def test_the_levels_run_zest_as_it_ships_and_the_prefix_measure_with_a_sized_cache(
    tmp_path: Path,
) -> None:
    routes = load_routes(_routes_file(Path("/models/m.gguf"), 2, tmp_path)).config
    plain, cached = routes.models["bench"], routes.models["cached"]
    assert isinstance(plain, LlamaCppModel)
    assert isinstance(cached, LlamaCppModel)
    assert plain.options.prefix_cache_tokens is None  # the default: one context of prefixes
    assert cached.options.prefix_cache_tokens == 4096
    assert (routes.routes["chat"].model, routes.routes["cached"].model) == ("bench", "cached")
    plain_summary, lookup = routes.routes["summarize"], routes.routes["summarize-lookup"]
    assert plain_summary.speculative is None
    assert lookup.speculative is not None
    assert lookup.speculative.method == "prompt_lookup"
    assert (plain_summary.model, lookup.model) == ("bench", "bench")  # only speculation differs
    long = routes.models["long"]
    assert isinstance(long, LlamaCppModel)
    assert long.context_length == 8192  # room for the prefill phase's 4,096-token prompt


def test_the_gateway_overhead_is_ttft_minus_the_engines_own_prefill() -> None:
    header = "prefill=cpu 212.5ms; decode=cpu"
    match = _PREFILL.search(header)
    assert match is not None
    assert float(match.group(1)) == 212.5
    samples = [Sample(220.0, 64, 80.0, 212.5), Sample(230.0, 64, 80.0, 221.0)]
    assert _summary("zest", 1, samples, 2.0).overhead_p50_ms == 8.25
    assert _summary("llama_cpp.server", 1, [Sample(220.0, 64, 80.0)], 1.0).overhead_p50_ms is None


def test_a_streamed_answer_is_read_event_by_event() -> None:
    # The gateway's own framing (several events in one read, a usage chunk without choices,
    # [DONE]) read by the bench's client: three tokens, timed from the first.
    frames = [
        {"choices": [{"delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"delta": {"content": "Hel"}}]},
        {"choices": [{"delta": {"content": "lo"}}]},
        {"choices": [{"delta": {"content": "!"}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"completion_tokens": 3}},
    ]
    body = "".join(f"data: {json.dumps(frame)}\n\n" for frame in frames) + "data: [DONE]\n\n"

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["accept"] == "text/event-stream"
        headers = {"content-type": "text/event-stream", "x-zest-pipeline": "prefill=cpu 9.5ms"}
        return httpx.Response(200, headers=headers, content=body.encode())

    async def run() -> Sample:
        transport = httpx.MockTransport(answer)
        async with httpx.AsyncClient(transport=transport) as client:
            return await _stream(client, "http://zest/v1/chat/completions", {})

    sample = asyncio.run(run())
    assert (sample.tokens, sample.engine_prefill_ms) == (3, 9.5)


def test_percentiles_interpolate_between_samples() -> None:
    ttfts = [float(n) for n in range(1, 21)]  # 1 .. 20 ms
    assert percentile(ttfts, 50) == 10.5  # the median
    assert percentile(ttfts, 95) == pytest.approx(19.05)
    assert percentile([7.0], 95) == 7.0
    level = _summary("zest", 20, [Sample(t, 8, 40.0) for t in ttfts], 1.0)
    assert (level.ttft_p50_ms, level.ttft_p95_ms) == (10.5, pytest.approx(19.05))


def test_the_ceiling_reads_step_times_as_tokens_per_second() -> None:
    ceiling = Ceiling({1: 10.0, 4: 25.0}, {64: 320.0, 512: 400.0})
    assert ceiling.decode_tps(1) == 100.0
    assert ceiling.decode_tps(4) == 160.0
    assert ceiling.ttft_ms(64) == 200.0  # 64 tokens at 320 tok/s
    # 4 prompts of 64 tokens prefill as one of 256 (nearest measured: 320 tok/s): 0.8 s, then
    # 63 steps of 25 ms: 1.575 s; 256 tokens in 2.375 s.
    assert ceiling.aggregate_tps(4, 64, 64) == pytest.approx(256 / 2.375)


def _level(server: str, streams: int, *figures: float) -> dict[str, object]:
    """A level as bench.json holds it: TTFT p50, p95, decode tok/s, aggregate tok/s."""
    return vars(Level(server, streams, *figures))


def test_the_targets_are_ratios_to_llama_server_and_raw_llama_cpp() -> None:
    report = {
        "levels": [
            _level("zest", 1, 90.0, 100.0, 98.0, 60.0),
            _level("llama-server", 1, 100.0, 110.0, 99.0, 61.0),
            _level("zest", 4, 400.0, 800.0, 30.0, 130.0),
            _level("llama-server", 4, 500.0, 850.0, 30.0, 100.0),
        ],
        "raw_llama_cpp": {"ttft_p50_ms": 80.0, "decode_tps_p50": 100.0},
        "speculation": {
            "prompt_tokens": 1000,
            "decode_tps_p50": 80.0,
            "lookup_decode_tps_p50": 88.0,
            "ratio": 1.1,
            "acceptance": 0.5,
        },
    }
    found = {name: (round(ratio, 3), met) for name, ratio, _, met in targets(report)}
    assert found == {
        "1 stream: TTFT p50 <= 1.0x llama-server": (0.9, True),
        "1 stream: decode >= 0.97x raw llama-cpp-python": (0.98, True),
        "4 streams: aggregate >= 1.25x llama-server": (1.3, True),
        "4 streams: TTFT p95 <= 0.9x llama-server": (0.941, False),
        "summarization: prompt lookup decode >= 1.5x": (1.1, False),
    }
    text = format_report(report)
    assert "4 streams: TTFT p95 <= 0.9x llama-server: 0.94x NOT met" in text
    assert "raw llama-cpp-python: TTFT p50 80.0 ms" in text


def test_a_sustained_run_is_read_minute_by_minute_with_its_drift() -> None:
    start = 1000.0
    done = [(start + 30, Sample(100.0, 60, 50.0)), (start + 90, Sample(300.0, 30, 40.0))]
    rows = _per_minute(done, start, 2)
    assert [(r["requests"], r["tokens_per_s"], r["ttft_p50_ms"]) for r in rows] == [
        (1, 1.0, 100.0),
        (1, 0.5, 300.0),
    ]
    assert _drift(rows) == pytest.approx(-0.5 / 0.75)  # 0.5 tok/s less a minute, mean 0.75
    assert _drift([{"tokens_per_s": 5.0}]) == 0.0


def test_phases_are_chosen_by_name() -> None:
    # The long phases (minutes each) run only when named, or with `all`.
    assert not {"mixed", "sustained", "quality"} & set(_bench_phases("default"))
    assert {"mixed", "sustained", "quality"} <= set(_bench_phases("all"))
    assert _bench_phases("cold, prefill") == ("cold", "prefill")
    with pytest.raises(CommandError, match="unknown phase warp: use some of cold"):
        _bench_phases("cold,warp")


def test_llama_server_is_a_peer_where_its_binary_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZEST_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_llama_server() is None
    assert [p.name for p in peers(Path("m.gguf"), 2, None, 9000)] == ["llama_cpp.server"]
    build = tmp_path / "tools" / "llama-server-0.3.36-abc" / "llama-server"
    build.parent.mkdir(parents=True)
    build.write_text("")
    assert find_llama_server() == build
    found = peers(Path("m.gguf"), 2, build, 9000)
    assert [(p.name, p.base) for p in found] == [
        ("llama-server", "http://127.0.0.1:9000/v1"),
        ("llama_cpp.server", "http://127.0.0.1:9001/v1"),
    ]
    server = found[0].command
    # the same slots and per-sequence context as zest's bench routes, flash attention on
    assert server[server.index("--parallel") + 1] == "8"
    assert server[server.index("--ctx-size") + 1] == str(8 * 4096)
    assert server[server.index("--flash-attn") + 1] == "on"


def test_the_routing_phase_runs_in_process_and_by_default() -> None:
    assert "routing" in _bench_phases("default")
    assert _bench_phases("routing") == ("routing",)


def test_the_routing_phase_s_rules_are_every_deterministic_kind_and_none_matches() -> None:
    """The slowest decision a table of that size makes: every rule evaluated, the default."""
    rules = deterministic_rules(100)
    decision = decide("chat", rules, RouteInput(MESSAGE, METADATA))
    assert isinstance(decision, Decision)
    assert decision.default_used
    assert len(decision.trace) >= 100  # at least one leaf of each rule evaluated
    leaves = {entry.condition.partition(":")[0] for entry in decision.trace}
    assert leaves == {
        "metadata",
        "keywords_any",
        "keywords_all",
        "regex",
        "min_chars",
        "max_chars",
        "has_tools",
        "has_images",
    }


def test_the_routing_phase_s_routes_route_by_a_classifier_and_by_similarity(
    tmp_path: Path,
) -> None:
    with_embedding = load_routes(
        _routing_routes(Path("/m/bench.gguf"), 2, tmp_path, Path("/m/minilm.gguf"))
    ).config
    similar = with_embedding.routes["similar"].rules[0].when.similar_to
    assert similar is not None
    assert (similar.via, similar.label, similar.timeout_s) == ("embed", "code", 120)
    assert with_embedding.routes["similar"].phrases["code"][0] == PHRASES[0]
    classify = with_embedding.routes["classified"].rules[0].when.classify
    assert classify is not None
    assert (classify.via, classify.labels) == ("classifier", ("code", "other"))
    without = load_routes(_routing_routes(Path("/m/bench.gguf"), 2, tmp_path, "no model")).config
    assert set(without.routes) == {"classifier", "classified"}


def test_the_routing_figures_are_reported_with_the_target() -> None:
    routing = {
        "message_chars": 679,
        "deterministic": [
            {"rules": 1, "p50_ms": 0.0081, "p99_ms": 0.02},
            {"rules": 100, "p50_ms": 0.41, "p99_ms": 0.9},
        ],
        "classify": {
            "rounds": 6,
            "cold_p50_ms": 812.04,
            "cold_p95_ms": 901.0,
            "cached_p50_ms": 0.094,
            "cached_p95_ms": 0.12,
        },
        "similar_to_skipped": "no embedding model (gone)",
    }
    assert format_report({"routing": routing}).splitlines() == [
        "target routing: 100 rules, decision p50 <= 0.2 ms: 0.41 ms NOT met",
        "routing decision (679-character message, no rule matching: every rule evaluated): "
        "1 rule p50 0.008 ms, p99 0.020 ms; 100 rules p50 0.410 ms, p99 0.900 ms",
        "routing classify decision (6 each): cold p50 812.0 ms (p95 901.0), cached p50 "
        "0.094 ms (p95 0.120)",
        "routing similar_to: not measured: no embedding model (gone)",
    ]
    assert targets({"routing": routing})[0][3] is False
