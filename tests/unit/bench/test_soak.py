"""bench/soak.py's pure parts: how a request's ending is judged, the per-minute figures, the
summary's verdict, the request mix and the routes file it serves (no model, no server)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from zest.bench._soak.clients import body_of, plan_request, served_model
from zest.bench._soak.outcomes import (
    Drop,
    Ending,
    Fault,
    Outcome,
    Request,
    classify,
    faults_between,
)
from zest.bench._soak.servers import routes_text
from zest.bench._soak.tally import (
    Minute,
    Reload,
    by_minute,
    format_minute,
    growth_pct,
    minute_of,
    percentile,
    rss_at,
    summarize,
    tally_minute,
)
from zest.router import parse_routes

LOCAL = Request(route="chat", remote=False, endpoint="chat", client="httpx", stream=True)
REMOTE = replace(LOCAL, route="remote", remote=True)
BROKE = "upstream http://127.0.0.1:1/v1: the stream broke: RemoteProtocolError: peer closed"


def outcome(request: Request = LOCAL, ending: Ending = Ending.DONE, **fields: object) -> Outcome:
    values: dict[str, object] = {"started": 1.0, "ended": 2.0, "status": 200, **fields}
    return Outcome(request=request, ending=ending, **values)  # type: ignore[arg-type]


# --- classification ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ending", "kind"),
    [
        (Ending.DROPPED, "disconnected"),
        (Ending.TIMEOUT, "hang"),
        (Ending.UNREACHABLE, "unreachable"),
        (Ending.BROKEN, "broken_stream"),
        (Ending.EOF, "silent_cut"),
        (Ending.HARNESS_ERROR, "harness_error"),
    ],
)
def test_endings_that_say_it_all(ending: Ending, kind: str) -> None:
    verdict = classify(outcome(ending=ending))
    assert verdict.kind == kind
    assert verdict.failed is (kind != "disconnected")


def test_a_disconnect_we_caused_is_no_failure_whatever_the_status() -> None:
    verdict = classify(outcome(ending=Ending.DROPPED, status=None, faults=(Fault.CUT,)))
    assert (verdict.kind, verdict.failed) == ("disconnected", False)


def test_a_finished_stream_or_answer_is_ok() -> None:
    assert classify(outcome()).kind == "ok"
    assert classify(outcome(ending=Ending.BODY)).kind == "ok"


def test_an_answer_without_choices_is_a_bad_answer() -> None:
    verdict = classify(outcome(ending=Ending.BODY, error="malformed"))
    assert (verdict.kind, verdict.failed) == ("bad_answer", True)


def test_a_cut_upstream_stream_may_end_with_the_documented_error_event() -> None:
    cut = outcome(REMOTE, Ending.ERROR_EVENT, error="engine_error", message=BROKE)
    assert classify(replace(cut, faults=(Fault.NONE, Fault.CUT))).kind == "documented:engine_error"
    # Without a cut in force, or on a local route, the same event is unexpected.
    assert classify(replace(cut, faults=(Fault.SLOW,))).kind == "unexpected_error_event"
    local = replace(cut, request=LOCAL, faults=(Fault.CUT,))
    assert classify(local).failed


def test_a_mid_stream_failure_of_another_cause_is_not_excused_by_the_cut() -> None:
    generic = outcome(
        REMOTE,
        Ending.ERROR_EVENT,
        error="engine_error",
        message="generation failed mid-stream: see the server log",
        faults=(Fault.CUT,),
    )
    assert classify(generic).kind == "unexpected_error_event"


def test_a_whole_answer_cut_upstream_may_be_the_documented_500() -> None:
    whole = replace(REMOTE, stream=False)
    cut = outcome(whole, Ending.BODY, status=500, error="engine_error", message=BROKE)
    assert classify(replace(cut, faults=(Fault.CUT,))).kind == "documented:engine_error"
    assert classify(cut).kind == "fallback_not_taken"


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (429, "overloaded", "fallback_not_taken"),
        (504, "first_token_timeout", "fallback_not_taken"),
        (503, "upstream_unreachable", "fallback_not_taken"),
        (500, "internal_error", "undocumented_5xx"),
        (502, None, "undocumented_5xx"),
    ],
)
def test_an_upstream_fault_on_a_route_with_a_local_fallback_must_be_served(
    status: int, error: str | None, kind: str
) -> None:
    failed = outcome(REMOTE, Ending.BODY, status=status, error=error, faults=(Fault.HANG,))
    assert classify(failed).kind == kind
    assert classify(failed).failed


def test_a_full_admission_queue_is_documented() -> None:
    message = "the model is at capacity (4 running, 64 waiting): retry in 1 s (Retry-After)"
    refused = outcome(ending=Ending.BODY, status=429, error="overloaded", message=message)
    assert classify(refused).kind == "documented:overloaded"
    assert classify(replace(refused, request=REMOTE)).kind == "documented:overloaded"


def test_errors_of_a_local_route_are_unexpected() -> None:
    assert classify(outcome(ending=Ending.BODY, status=400, error="bad_request")).kind == (
        "unexpected_error"
    )
    assert classify(outcome(ending=Ending.BODY, status=503, error="device_unavailable")).kind == (
        "unexpected_error"
    )
    assert classify(outcome(ending=Ending.BODY, status=500, error="boom")).kind == (
        "undocumented_5xx"
    )


def test_faults_between_covers_every_phase_the_request_overlapped() -> None:
    history = [(0.0, Fault.NONE), (10.0, Fault.RATE_LIMITED), (20.0, Fault.REFUSED)]
    assert faults_between(history, 1.0, 2.0) == (Fault.NONE,)
    assert faults_between(history, 9.0, 10.0) == (Fault.NONE, Fault.RATE_LIMITED)
    assert faults_between(history, 5.0, 25.0) == (Fault.NONE, Fault.RATE_LIMITED, Fault.REFUSED)
    assert faults_between(history, 30.0, 31.0) == (Fault.REFUSED,)
    assert faults_between([], 1.0, 2.0) == ()


# --- per-minute figures ---------------------------------------------------------------------


def test_minutes_are_one_based_and_the_drain_counts_in_the_last() -> None:
    assert [minute_of(s, 3) for s in (0.0, 59.9, 60.0, 179.0, 200.0)] == [1, 1, 2, 3, 3]
    table = by_minute([outcome(ended=30.0), outcome(ended=150.0)], 3)
    assert [len(table[m]) for m in (1, 2, 3)] == [1, 0, 1]


def test_percentiles_interpolate_and_handle_few_samples() -> None:
    assert percentile([], 50) is None
    assert percentile([7.0], 95) == 7.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5


def test_rss_is_the_last_sample_at_or_before_the_moment() -> None:
    samples = [(1.0, 100), (59.0, 110), (61.0, 120)]
    assert rss_at(samples, 60.0) == 110
    assert rss_at(samples, 0.5) is None
    assert growth_pct(100_000, 105_000) == pytest.approx(5.0)
    assert growth_pct(None, 1) is None


def test_a_minute_counts_requests_by_how_they_ended() -> None:
    outcomes = [
        outcome(ttft_s=0.1),
        outcome(ttft_s=0.3),
        outcome(ending=Ending.DROPPED, ttft_s=0.01),  # no TTFT from a disconnect
        outcome(ending=Ending.EOF, ttft_s=5.0),  # nor from a failure
        outcome(ending=Ending.EOF),
        outcome(ending=Ending.TIMEOUT),
        outcome(
            REMOTE, Ending.ERROR_EVENT, error="engine_error", message=BROKE, faults=(Fault.CUT,)
        ),
    ]
    minute = tally_minute(2, outcomes, rss_kb=105 * 1024, baseline_kb=100 * 1024, reloads=3)
    assert (minute.minute, minute.requests, minute.ok, minute.disconnected) == (2, 7, 2, 1)
    assert minute.documented == {"engine_error": 1}
    assert minute.failures == {"hang": 1, "silent_cut": 2}
    assert minute.ttft_p50_ms == pytest.approx(200.0)
    assert minute.ttft_p95_ms == pytest.approx(290.0)
    assert minute.rss_mb == 105.0
    assert minute.rss_growth_pct == pytest.approx(5.0)
    assert (minute.reloads, minute.faults) == (3, [])


def test_the_first_minute_has_no_growth_and_an_empty_minute_has_no_ttft() -> None:
    minute = tally_minute(1, [], rss_kb=2048, baseline_kb=2048, faults=["429", "429", "503"])
    assert (minute.requests, minute.ttft_p50_ms, minute.rss_growth_pct) == (0, None, None)
    assert minute.faults == ["429", "503"]


def test_the_minute_line() -> None:
    minute = Minute(
        minute=2,
        requests=40,
        ok=33,
        disconnected=4,
        documented={"engine_error": 1},
        failures={"silent_cut": 2},
        ttft_p50_ms=412.4,
        ttft_p95_ms=1830.0,
        rss_mb=512.25,
        rss_growth_pct=1.234,
        reloads=3,
        faults=["429", "503"],
    )
    assert format_minute(minute) == (
        "minute 2: 40 requests (33 ok, 4 disconnected, 1 documented errors: engine_error 1); "
        "2 failures (silent_cut 2); RSS 512.2 MB (+1.2% since minute 1); "
        "TTFT p50 412 ms p95 1830 ms; reloads 3; faults 429,503"
    )
    assert format_minute(Minute(minute=1)) == (
        "minute 1: 0 requests (0 ok, 0 disconnected, 0 documented errors); 0 failures; RSS -; "
        "TTFT p50 - p95 -; reloads 0; faults -"
    )


# --- the verdict -----------------------------------------------------------------------------


def _summary(outcomes: list[Outcome], final_kb: int, **extra: object) -> dict[str, object]:
    minutes = [Minute(minute=1), Minute(minute=2)]
    return summarize(outcomes, minutes, [], baseline_kb=100_000, final_kb=final_kb, **extra)  # type: ignore[arg-type]


def test_a_clean_run_passes() -> None:
    early = replace(LOCAL, drop=Drop.BEFORE_FIRST_TOKEN, drop_after=0.1)
    late = replace(LOCAL, drop=Drop.MID_STREAM, drop_after=2)
    dropped = [
        outcome(early, Ending.DROPPED),
        outcome(early, Ending.DROPPED, ttft_s=0.05),  # the first token came before the drop
        outcome(late, Ending.DROPPED, ttft_s=0.2),
    ]
    report = _summary([outcome(), *dropped], 104_900)
    assert (report["passed"], report["reasons"], report["failures"]) == (True, [], {})
    assert report["disconnected"] == 3
    assert report["disconnects"] == {"after_a_token": 2, "before_first_token": 2, "mid_stream": 1}


def test_rss_growth_of_five_percent_fails() -> None:
    report = _summary([outcome()], 105_000)
    assert report["passed"] is False
    assert report["reasons"] == ["RSS grew 5.0% after the first minute (limit 5.0%)"]


def test_a_failed_request_or_check_or_reload_fails_and_is_listed() -> None:
    reload = Reload(at=20.0, trigger="sighup", revision=2, ok=False, took_s=20.0, detail="late")
    report = summarize(
        [outcome(), outcome(ending=Ending.EOF)],
        [Minute(minute=1)],
        [reload],
        baseline_kb=100_000,
        final_kb=200_000,  # one minute only: no growth is measured
        checks=["zest serve exited"],
    )
    assert report["reasons"] == [
        "1 request(s) failed: silent_cut",
        "zest serve exited",
        "reload 2 (sighup) did not come into force: late",
    ]
    failed = report["failed_requests"]
    assert isinstance(failed, list)
    assert [row["verdict"] for row in failed] == ["silent_cut"]
    assert report["rss"] == {
        "baseline_mb": pytest.approx(97.66, abs=0.01),
        "final_mb": pytest.approx(195.31, abs=0.01),
        "growth_pct": None,
        "limit_pct": 5.0,
    }


def test_the_upstream_faults_are_tallied_for_requests_through_it() -> None:
    report = _summary(
        [
            outcome(REMOTE, served_by="smollm2", faults=(Fault.REFUSED,)),
            outcome(REMOTE, served_by="upstream", faults=(Fault.NONE, Fault.REFUSED)),
            outcome(LOCAL, served_by="smollm2", faults=(Fault.REFUSED,)),
        ],
        100_000,
    )
    assert report["remote_by_fault"] == {"refused": {"ok": 2}, "none": {"ok": 1}}
    routes = report["routes"]
    assert isinstance(routes, dict)
    assert routes["remote"]["served_by"] == {"smollm2": 1, "upstream": 1}


# --- the request mix and the routes file ------------------------------------------------------


def test_the_request_mix_is_reproducible_and_drops_only_what_can_be_dropped() -> None:
    first = [plan_request(random.Random(7)) for _ in range(3)]
    assert first == [plan_request(random.Random(7)) for _ in range(3)]
    rng = random.Random(1)
    mix = [plan_request(rng) for _ in range(2000)]
    assert {r.route for r in mix} == {"chat", "complete", "remote"}
    assert {r.client for r in mix} == {"openai", "httpx"}
    assert all(r.stream for r in mix if r.drop is Drop.MID_STREAM)
    assert all(r.endpoint == "completions" for r in mix if r.route == "complete")
    assert all(r.remote == (r.route == "remote") for r in mix)
    drops = [r for r in mix if r.drop is not Drop.NONE]
    assert 0.1 < len(drops) / len(mix) < 0.25
    assert all(0.02 <= r.drop_after <= 0.3 for r in drops if r.drop is Drop.BEFORE_FIRST_TOKEN)


def test_bodies_are_fresh_and_of_the_endpoints_shape() -> None:
    rng = random.Random(3)
    chat = body_of(LOCAL, rng)
    again = body_of(LOCAL, rng)
    assert chat["messages"][0]["content"] != again["messages"][0]["content"]
    assert (chat["model"], chat["stream"]) == ("chat", True)
    completion = body_of(replace(LOCAL, route="complete", endpoint="completions"), rng)
    assert completion["prompt"].startswith("Question: [")
    assert "messages" not in completion


def test_the_served_model_is_read_from_the_route_header() -> None:
    header = "task=remote; model=smollm2; device=cpu; engine=llamacpp"
    assert served_model(header) == "smollm2"
    assert served_model(None) is None


@pytest.mark.parametrize("revision", range(6))
def test_every_revision_of_the_routes_file_is_valid(revision: int) -> None:
    text = routes_text("http://127.0.0.1:9/v1", revision)
    config = parse_routes(text, "soak-routes.yaml")
    assert config.routes["chat"].description == f"soak revision {revision}"
    assert config.routes["remote"].privacy == "allow_remote"
    assert config.models["upstream"].engine == "remote"
    assert ("extra" in config.routes) is (revision % 3 == 2)
    batch = config.models["smollm2"].options.n_threads_batch  # type: ignore[union-attr]
    assert batch == (1 if revision % 2 else None)
