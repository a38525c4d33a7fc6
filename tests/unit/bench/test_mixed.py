"""`zest bench --phases mixed`'s pure parts: fresh texts, the figures of a spell, the report."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from zest.bench._mixed import (
    Spell,
    Timed,
    document,
    snippet,
    spell_figures,
    tokens_in_window,
    work_in_window,
)
from zest.bench._mixed import _timed as _timed_request
from zest.bench._report import format_report, targets
from zest.bench._servers import routes_file
from zest.gateway.cli._bench_command import _bench_phases
from zest.router import load_routes, peak_priority


def test_every_summary_gets_a_document_no_cache_has_seen() -> None:
    first, second = document(1, "run-a"), document(2, "run-a")
    assert first.split("\n")[0] == "Report run-a-1"  # they differ from the title on
    assert second.split("\n")[0] == "Report run-a-2"
    assert first.split("\n\n")[1][:200] != second.split("\n\n")[1][:200]  # and in the body
    assert document(1, "run-b") != first  # another run's: a new title
    assert document(1, "run-a") == first  # the body is the serial's: servers read the same
    assert len(first.split()) * 1.3 > 50 * 28  # about 1,600 tokens (~1.3 a word)


def test_every_autocomplete_request_starts_with_a_text_of_its_own() -> None:
    assert snippet(1, "x").startswith("Meeting notes x-1:")
    assert snippet(1, "x") != snippet(2, "x") != snippet(1, "y")


def _timed(sent: float, *times: float) -> Timed:
    return Timed(sent, list(times))


def test_the_summaries_tokens_are_those_streamed_inside_the_window() -> None:
    requests = [_timed(0.0, 0.5, 1.0, 1.5, 9.9, 10.0), _timed(2.0, 3.0, 11.0)]
    assert tokens_in_window(requests, 1.0, 10.0) == 4  # 1.0, 1.5, 9.9 and 3.0


def test_a_task_s_work_spreads_each_prompt_over_its_prefill() -> None:
    """1,000 prompt tokens prefilled from 0 s to 4 s (the first token), 3 tokens after it:
    inside [2, 10) half the prompt and every token; a request wholly outside counts nothing."""
    summary = Timed(0.0, [4.0, 5.0, 11.0], prompt_tokens=1000)
    assert work_in_window([summary], 2.0, 10.0) == 500 + 2
    late = Timed(10.0, [12.0], prompt_tokens=40)
    assert work_in_window([summary, late], 0.0, 10.0) == 1000 + 2
    unknown = Timed(2.0, [3.0])  # no usage: its prompt counts nothing, its tokens do
    assert work_in_window([unknown], 0.0, 10.0) == 1


def test_a_spell_s_figures_pool_every_round() -> None:
    rounds = [
        Spell(
            [100.0, 120.0, 140.0], 3, summary_tokens=30, summaries=1, summary_prompt_tokens=[1600]
        ),
        Spell(
            [110.0, 900.0, 130.0],
            3,
            summary_tokens=42,
            summaries=2,
            summary_prompt_tokens=[1590, 1610],
        ),
    ]
    rounds[0].summary_work, rounds[1].autocomplete_work = 1200.0, 300.0
    rounds[0].last_tokens_ms, rounds[1].last_tokens_ms = [300.0, 310.0], [320.0]
    figures = spell_figures(rounds)
    assert (figures["last_token_p50_ms"], figures["last_token_p95_ms"]) == (310.0, 319.0)
    assert (figures["summary_work_tps"], figures["autocomplete_work_tps"]) == (200.0, 50.0)
    assert figures["requests"] == 6
    assert figures["ttft_p50_ms"] == 125.0
    assert figures["ttft_p95_ms"] == pytest.approx(710.0)  # interpolated: 140 + 0.75 * 760
    assert figures["summary_tps"] == 12.0  # 72 tokens in 6 s
    assert (figures["summaries"], figures["summary_prompt_tokens"]) == (3, 1600)
    idle = spell_figures([Spell([100.0], 1)])
    assert (idle["summary_tps"], idle["summary_prompt_tokens"]) == (0.0, None)
    assert idle["last_token_p95_ms"] is None  # no answer timed to its end


def _server(
    idle: tuple[float, float], loaded: tuple[float, float], tps: float
) -> dict[str, object]:
    return {
        "idle": {"ttft_p50_ms": idle[0], "ttft_p95_ms": idle[1], "summary_tps": 0.0},
        "loaded": {"ttft_p50_ms": loaded[0], "ttft_p95_ms": loaded[1], "summary_tps": tps},
        "p95_ratio": loaded[1] / idle[1],
    }


def test_the_mixed_phase_is_reported_as_a_table_with_its_targets() -> None:
    mixed = {
        "seconds": 45,
        "rounds": 1,
        "summaries": 3,
        "autocomplete_tokens": 16,
        "summary_tokens": 128,
        "servers": {
            "zest": _server((137.0, 191.0), (2977.0, 8002.0), 13.5),
            "llama-server": _server((115.0, 159.0), (3345.0, 8726.0), 17.0),
        },
    }
    lines = format_report({"mixed": mixed}).splitlines()
    assert lines[:1] == [
        "target mixed: autocomplete TTFT p95 loaded <= 2x alone: 41.90x NOT met",
    ]
    assert lines[1:] == [
        "mixed: autocomplete 1/s (16 tokens) for 45 s alone, then beside 3 looping summaries "
        "(128 tokens), 1 round(s):",
        "  server           TTFT p50/p95 alone     beside summaries  p95 loaded/alone  "
        "summaries tok/s  work tok/s (sum. + autoc.)",
        "  zest                   137 / 191 ms     2,977 / 8,002 ms             41.9x"
        "             13.5                           -",
        "  llama-server           115 / 159 ms     3,345 / 8,726 ms             54.9x"
        "             17.0                           -",
    ]
    worked = _server((137.0, 191.0), (2977.0, 8002.0), 13.5)
    worked["loaded"].update(summary_work_tps=95.04, autocomplete_work_tps=12.5)  # type: ignore[attr-defined]
    shown = format_report({"mixed": {**mixed, "servers": {"zest": worked}}}).splitlines()
    assert shown[-1].endswith("13.5                 95.0 + 12.5")
    only_zest = {**mixed, "servers": {"zest": _server((137.0, 191.0), (2977.0, 8002.0), 13.5)}}
    assert [name for name, *_ in targets({"mixed": only_zest})] == [
        "mixed: autocomplete TTFT p95 loaded <= 2x alone"
    ]


def _since_issue_35(server: dict[str, object], work: float, last: tuple[float, float]) -> None:
    """A server's figures as issue 35's mixed phase reports them: the whole answer's time, the
    spell with every slot held and the work done, besides the TTFTs."""
    idle, loaded = server["idle"], server["loaded"]
    idle.update(last_token_p50_ms=280.0, last_token_p95_ms=300.0)  # type: ignore[attr-defined]
    loaded.update(  # type: ignore[attr-defined]
        last_token_p50_ms=last[0], last_token_p95_ms=last[1], summary_work_tps=work,
        autocomplete_work_tps=10.0,
    )  # fmt: skip
    server["full"] = {"ttft_p50_ms": 300.0, "ttft_p95_ms": 400.0}
    server["last_token_p95_ratio"] = last[1] / 300.0
    server["full_p95_ratio"] = 400.0 / server["idle"]["ttft_p95_ms"]  # type: ignore[index]


def test_the_mixed_phase_reports_the_whole_answer_the_full_slots_and_the_work() -> None:
    zest = _server((137.0, 191.0), (250.0, 300.0), 13.5)
    peer = _server((115.0, 159.0), (3345.0, 8726.0), 17.0)
    _since_issue_35(zest, 390.0, (700.0, 810.0))
    _since_issue_35(peer, 290.0, (9000.0, 12000.0))
    mixed = {
        "seconds": 45,
        "rounds": 3,
        "summaries": 3,
        "slots": 8,
        "autocomplete_tokens": 16,
        "summary_tokens": 128,
        "servers": {"zest": zest, "llama-server": peer},
    }
    lines = format_report({"mixed": mixed}).splitlines()
    assert lines[:4] == [
        "target mixed: autocomplete TTFT p95 loaded <= 2x alone: 1.57x met",
        "target mixed: autocomplete last token p95 loaded <= 3x alone: 2.70x met",
        "target mixed: autocomplete TTFT p95 with every slot held <= 3x alone: 2.09x met",
        "target mixed: work tok/s (all tasks) >= 1.0x llama-server: 1.33x met",
    ]
    assert lines[-3:] == [
        "  server           last token p50/p95 alone     beside summaries  p95 loaded/alone  "
        "TTFT p50/p95, 8 summaries  p95 /alone",
        "  zest                         280 / 300 ms         700 / 810 ms              2.7x"
        "               300 / 400 ms        2.1x",
        "  llama-server                 280 / 300 ms    9,000 / 12,000 ms             40.0x"
        "               300 / 400 ms        2.5x",
    ]


def test_the_mixed_phase_takes_the_priorities_from_the_routes(tmp_path: Path) -> None:
    routes = load_routes(routes_file(Path("/models/m.gguf"), 2, tmp_path)).config.routes
    autocomplete, summarization = routes["autocomplete"], routes["summarization"]
    assert (autocomplete.kind, autocomplete.priority, autocomplete.model) == (
        "completion",
        50,
        "mixed",
    )
    assert (summarization.kind, summarization.priority, summarization.model) == ("chat", 0, "mixed")
    # The other phases' routes share no model with a higher priority: their steps are whole.
    assert (
        peak_priority(load_routes(routes_file(Path("/m.gguf"), 2, tmp_path)).config, "bench") == 0
    )


def test_the_mixed_phase_runs_when_named() -> None:
    assert "mixed" not in _bench_phases("default")  # minutes of its own, as sustained
    assert "mixed" in _bench_phases("all")
    assert _bench_phases("mixed") == ("mixed",)


def test_a_completion_stream_is_timed_by_its_text_events() -> None:
    # llama-server's and zest's completion chunks carry `text`; a chat's, `delta.content`;
    # the usage chunk (no choices) gives the prompt's tokens.
    frames = [
        {"choices": [{"index": 0, "text": " and"}]},
        {"choices": [{"index": 0, "text": ""}]},
        {"choices": [{"index": 0, "delta": {"content": " then"}}]},
        {"choices": [], "usage": {"prompt_tokens": 41, "completion_tokens": 2}},
    ]
    body = "".join(f"data: {json.dumps(frame)}\n\n" for frame in frames) + "data: [DONE]\n\n"

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    async def run() -> Timed:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            return await _timed_request(client, "http://peer/v1/completions", {})

    timed = asyncio.run(run())
    assert (len(timed.times), timed.prompt_tokens) == (2, 41)
    assert timed.sent <= timed.times[0] <= timed.times[1]


def test_a_request_the_server_never_answers_counts_until_the_client_gives_up() -> None:
    """A starved autocomplete is not dropped from the figures: its times run to when the
    client gave up, and the report says the p95 is then a lower bound."""

    def silent(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("no byte", request=request)

    async def run() -> Timed:
        async with httpx.AsyncClient(transport=httpx.MockTransport(silent)) as client:
            return await _timed_request(client, "http://peer/v1/completions", {})

    timed = asyncio.run(run())
    assert timed.gave_up is not None
    assert timed.ttft_ms == timed.last_token_ms == (timed.gave_up - timed.sent) * 1000
    server = _server((137.0, 191.0), (250.0, 300.0), 13.5)
    server["full"] = {"ttft_p50_ms": 9e5, "ttft_p95_ms": 9e5, "timeouts": 2}
    mixed = {
        "seconds": 45,
        "rounds": 1,
        "summaries": 3,
        "autocomplete_tokens": 16,
        "summary_tokens": 128,
        "servers": {"llama-server": server},
    }
    assert format_report({"mixed": mixed}).splitlines()[-1] == (
        "  llama-server, full: 2 autocomplete(s) got no byte for 900 s and were given up; "
        "their times count until then (the p95 is a lower bound)"
    )
