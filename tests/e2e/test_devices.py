"""Devices end to end: the real server, with and without emulated NPU/GPU, on the real model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import REPO, Server, start_server, stop_server, stream_chat
from tests.e2e.prometheus import scrape, total

ROUTES = REPO / "examples" / "routes" / "devices.yaml"
LONG_TEXT = " ".join(
    f"On day {n} the team shipped feature {n} to the customers." for n in range(40)
)


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """No NPU, no GPU: this machine as it is (two routes pinned to missing devices without a
    cpu fallback: never ready)."""
    running = start_server(
        ROUTES,
        tmp_path_factory.mktemp("bare") / "zest.log",
        {"ZEST_EMULATE_DEVICES": ""},
        until="warm",
    )
    yield running
    stop_server(running)


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        ROUTES,
        tmp_path_factory.mktemp("emulated") / "zest.log",
        {"ZEST_EMULATE_DEVICES": "npu=cpu:1,gpu=cpu:1"},
    )
    yield running
    stop_server(running)


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.v1}{path}", json=body, timeout=600)


def test_a_pinned_npu_without_fallback_fails_cleanly_without_an_npu(bare: Server) -> None:
    reply = post(bare, "/completions", {"model": "autocomplete", "prompt": "def f(x):"})
    assert reply.status_code == 503
    error = reply.json()["error"]
    assert error["code"] == "device_unavailable"
    assert error["message"].startswith(
        "route 'autocomplete' needs device 'npu', which is not usable here (found: cpu), and "
        "the fallback to cpu is forbidden by routes.autocomplete.allow_cpu: false: "
    )


def test_readiness_names_the_routes_no_device_here_can_serve(bare: Server) -> None:
    """A load balancer must not send this server traffic it can only refuse."""
    answer = httpx.get(f"{bare.v1}/ready", timeout=10)
    ready = answer.json()
    assert (answer.status_code, ready["status"]) == (503, "unservable")
    assert ready["ready"] is False
    unservable = ready["unservable_routes"]
    assert sorted(unservable) == ["autocomplete", "summarization"]
    assert unservable["autocomplete"].startswith(
        "route 'autocomplete' needs device 'npu', which is not usable here (found: cpu)"
    )


@pytest.mark.parametrize("fixture", ["bare", "emulated"])
def test_head_readiness_answers_the_status_get_answers(
    request: pytest.FixtureRequest, fixture: str
) -> None:
    """Load balancers probe with HEAD: an unservable route must not look ready to them."""
    server: Server = request.getfixturevalue(fixture)
    got = httpx.get(f"{server.v1}/ready", timeout=10)
    headed = httpx.head(f"{server.v1}/ready", timeout=10)
    assert (headed.status_code, headed.content) == (got.status_code, b"")
    assert got.status_code == (503 if fixture == "bare" else 200)


def test_a_pinned_npu_with_fallback_runs_on_cpu_and_says_so(bare: Server) -> None:
    reply = post(bare, "/completions", {"model": "notes", "prompt": "Today", "max_tokens": 4})
    assert reply.status_code == 200
    assert "device=cpu;" in reply.headers["x-zest-route"]
    assert reply.headers["x-zest-plan"] == (
        "fallback to cpu: npu: npu is not available (found: cpu); allow_cpu is true"
    )
    # The pinned npu, left out, is named as docs/devices.md shows it.
    assert reply.headers["x-zest-fallbacks"] == (
        "smollm2 on npu: device unavailable: npu is not available (found: cpu)"
    )
    # The pinned npu, left out, is named as docs/devices.md shows it.
    assert reply.headers["x-zest-fallbacks"] == (
        "smollm2 on npu: device unavailable: npu is not available (found: cpu)"
    )


def test_the_pinned_npu_route_runs_on_an_emulated_npu(emulated: Server) -> None:
    reply = post(
        emulated, "/completions", {"model": "autocomplete", "prompt": "def f(x):", "max_tokens": 6}
    )
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-zest-route"] == (
        "task=autocomplete; model=smollm2; device=npu(emulated); engine=llamacpp"
    )
    assert reply.json()["zest"]["device"] == "npu(emulated)"


def test_a_hybrid_route_runs_the_split_pipeline(emulated: Server) -> None:
    reply = post(
        emulated, "/tasks/summarization", {"input": LONG_TEXT, "max_tokens": 8, "temperature": 0}
    )
    assert reply.status_code == 200, reply.text
    assert "device=npu(emulated)->gpu(emulated);" in reply.headers["x-zest-route"]
    pipeline = reply.json()["usage"]["pipeline"]
    assert pipeline["prefill_device"] == "npu(emulated)"
    assert pipeline["decode_device"] == "gpu(emulated)"
    assert pipeline["handoff_bytes"] > 0
    assert pipeline["prefill_ms"] > 0
    header = reply.headers["x-zest-pipeline"]
    assert header.startswith("prefill=npu(emulated) ")
    assert f"{pipeline['handoff_bytes']}B; decode=gpu(emulated) " in header


def test_hybrid_streams_with_the_openai_client(emulated: Server) -> None:
    client = openai.OpenAI(base_url=emulated.v1, api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": LONG_TEXT}]
    chunks, text = stream_chat(client, "summarization", messages, 8, temperature=0)
    assert text
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.model_extra is not None
    assert chunks[-1].usage.model_extra["pipeline"]["decode_device"] == "gpu(emulated)"


def test_auto_splits_long_prompts_and_keeps_short_ones_on_one_device(emulated: Server) -> None:
    short = post(
        emulated,
        "/chat/completions",
        {"model": "chat", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]},
    )
    long = post(
        emulated,
        "/chat/completions",
        {"model": "chat", "max_tokens": 2, "messages": [{"role": "user", "content": LONG_TEXT}]},
    )
    assert "device=gpu(emulated);" in short.headers["x-zest-route"]
    assert "device=npu(emulated)->gpu(emulated);" in long.headers["x-zest-route"]
    assert short.headers["x-zest-plan"].startswith("auto: prompt of ")
    assert "prefill on npu, decode on gpu" in long.headers["x-zest-plan"]


def test_system_info_reports_devices_and_how_they_were_found(emulated: Server) -> None:
    info = httpx.get(f"{emulated.v1}/system-info", timeout=30).json()
    devices = {d["name"]: d for d in info["devices"]}
    assert set(devices) == {"cpu", "npu", "gpu"}
    assert devices["cpu"]["emulated"] is False
    assert devices["cpu"]["detected_by"].startswith("/proc/cpuinfo")
    assert devices["cpu"]["engines"] == ["llamacpp", "onnx-genai"]
    for name in ("npu", "gpu"):
        assert devices[name] == {
            "name": name,
            "label": f"{name}(emulated)",
            "emulated": True,
            "software": False,
            "detected_by": "emulated (ZEST_EMULATE_DEVICES)",
            "detail": f"emulated on 1 CPU thread: not a real {name}",
            "engines": ["llamacpp"],
            "usable": True,
            "threads": 1,
            "memory_total": None,
            "memory_free": None,
        }
    sources = [p["source"] for p in info["probes"]]
    assert sources == [
        "/proc/cpuinfo",
        "llama.cpp",
        "onnxruntime providers",
        "/sys/class/accel",
        "vendor tools",
    ]
    assert {entry["device"] for entry in info["loaded"]} >= {"npu(emulated)"}


def test_explain_shows_the_plan_without_running_it(emulated: Server, bare: Server) -> None:
    explained = httpx.get(
        f"{emulated.v1}/routes/chat/explain", params={"prompt_tokens": 300}, timeout=30
    ).json()
    assert [a["device"] for a in explained["attempts"]] == ["npu(emulated)->gpu(emulated)", "cpu"]
    assert explained["attempts"][0]["emulated"] is True
    refused = httpx.get(f"{bare.v1}/routes/autocomplete/explain", timeout=30).json()
    assert refused["attempts"] == []
    assert refused["removed"] == ["npu: npu is not available (found: cpu)"]
    assert refused["error"]["code"] == "device_unavailable"
    counted = httpx.post(
        f"{emulated.v1}/routes/chat/explain", json={"input": LONG_TEXT}, timeout=30
    ).json()
    assert counted["prompt_tokens"] > 256
    assert counted["attempts"][0]["device"] == "npu(emulated)->gpu(emulated)"


def test_metrics_label_emulated_devices_and_time_the_hybrid_stages(emulated: Server) -> None:
    before = scrape(f"{emulated.base_url}/metrics")
    reply = post(
        emulated, "/tasks/summarization", {"input": LONG_TEXT, "max_tokens": 4, "temperature": 0}
    )
    assert reply.status_code == 200, reply.text
    after = scrape(f"{emulated.base_url}/metrics")
    for name in ("npu", "gpu"):
        assert total(after, "zest_device_info", device=f"{name}(emulated)", emulated="true") == 1
    assert total(after, "zest_device_info", device="cpu", kind="cpu", emulated="false") == 1

    def moved(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    split = "npu(emulated)->gpu(emulated)"
    assert moved("zest_requests_total", task="summarization", device=split, outcome="ok") == 1
    stage = "zest_pipeline_stage_seconds_count"
    assert moved(stage, stage="prefill", device="npu(emulated)") == 1
    assert moved(stage, stage="handoff", device=split) == 1
    assert moved(stage, stage="decode", device="gpu(emulated)") == 1
