"""Per-route SLOs on the real model: a route whose TTFT target no request can meet breaches once
(one log line, one counted breach, however many requests miss), a generous one stays met, and
both show in /metrics, /v1/stats, the explain plan and `zest explain`."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import REPO, Server, run_zest, start_server, stop_server
from tests.e2e.prometheus import scrape, total

ROUTES = REPO / "tests" / "e2e" / "routes" / "slo.yaml"
QUESTION = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(ROUTES, tmp_path_factory.mktemp("slo") / "zest.log")
    yield running
    stop_server(running)


def chat(server: Server, task: str, *, stream: bool = False) -> None:
    body = {"model": task, "messages": QUESTION, "max_tokens": 8, "stream": stream}
    reply = httpx.post(f"{server.v1}/chat/completions", json=body, timeout=600)
    assert reply.status_code == 200, reply.text


def test_an_impossible_target_breaches_once_and_a_generous_one_stays_met(judged: Server) -> None:
    for stream in (False, True, False):
        chat(judged, "strict", stream=stream)
    chat(judged, "relaxed")
    samples = scrape(f"{judged.base_url}/metrics")

    assert total(samples, "zest_slo_ok", task="strict", objective="ttft_p95") == 0
    assert total(samples, "zest_slo_breaches_total", task="strict", objective="ttft_p95") == 1
    assert total(samples, "zest_slo_window_requests", task="strict") == 3
    assert total(samples, "zest_slo_ttft_p95_seconds", task="strict") > 0.001
    for objective in ("ttft_p95", "tokens_per_s"):
        assert total(samples, "zest_slo_ok", task="relaxed", objective=objective) == 1
        assert total(samples, "zest_slo_breaches_total", task="relaxed", objective=objective) == 0
    assert total(samples, "zest_slo_tokens_per_second", task="relaxed") > 0.01
    assert total(samples, "zest_decode_tokens_per_second_count", task="relaxed") == 1

    slo = httpx.get(f"{judged.v1}/stats", timeout=30).json()["slo"]
    assert set(slo) == {"strict", "relaxed", "defaulted"}
    strict = slo["strict"]
    assert (strict["ok"], strict["requests"], strict["window_s"]) == (False, 3, 300.0)
    ttft = strict["objectives"]["ttft_p95"]
    assert (ttft["target"], ttft["ok"], ttft["breaches"]) == (0.001, False, 1)
    assert ttft["value"] == strict["ttft_p95_s"] > 0.001
    assert slo["relaxed"]["ok"] is True
    assert slo["relaxed"]["objectives"]["tokens_per_s"]["ok"] is True
    assert slo["defaulted"] == {  # the file's slo; no request yet: met, nothing to judge
        "ok": True,
        "window_s": 60.0,
        "requests": 0,
        "ttft_p95_s": None,
        "tokens_per_s": None,
        "objectives": {"ttft_p95": {"target": 600.0, "value": None, "ok": True, "breaches": 0}},
    }

    breaches = [line for line in judged.log().splitlines() if "SLO breached" in line]
    assert len(breaches) == 1, breaches
    assert "WARNING" in breaches[0]
    assert "SLO breached: route strict: ttft_p95 " in breaches[0]
    assert "(target <= 0.001 s) over the last 5m (1 requests)" in breaches[0]


def test_the_plan_names_the_objectives(judged: Server) -> None:
    explained = httpx.get(f"{judged.v1}/routes/relaxed/explain", timeout=30).json()
    assert explained["slo"] == {
        "ttft_p95_s": 600.0,
        "min_tokens_per_s": 0.01,
        "window": 300.0,
        "window_text": "5m",
    }
    printed = run_zest("explain", "strict", "--routes", str(ROUTES))
    assert printed.returncode == 0, printed.stderr
    assert "slo: ttft p95 <= 0.001 s, over the last 5m" in printed.stdout.splitlines()
    printed = run_zest("explain", "defaulted", "--routes", str(ROUTES))
    assert "slo: ttft p95 <= 600 s, over the last 1m" in printed.stdout.splitlines()
