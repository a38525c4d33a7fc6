"""`zest bench --phases backends`' pure parts: which placements it measures, the routes it
serves them with (checked by zest's own loader), and its report lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zest.bench._backends import _placements, _routes
from zest.bench._report import format_report
from zest.router import load_routes


def device(name: str, *, usable: bool = True) -> dict[str, Any]:
    return {"name": name, "usable": usable, "engines": ["llamacpp"]}


def test_the_cpu_alone_where_no_gpu_is_usable() -> None:
    info = {"devices": [device("cpu"), device("gpu", usable=False), device("npu")]}
    assert _placements(info) == ["cpu"]


def test_a_gpu_adds_its_route_and_with_an_npu_the_hybrid() -> None:
    assert _placements({"devices": [device("cpu"), device("gpu")]}) == ["cpu", "gpu"]
    with_npu = {"devices": [device("cpu"), device("gpu"), device("npu")]}
    assert _placements(with_npu) == ["cpu", "gpu", "hybrid"]


def test_the_routes_load_and_never_fall_back_to_the_cpu(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    loaded = load_routes(_routes(model, 2, tmp_path, ["cpu", "gpu", "hybrid"]))
    routes = loaded.config.routes
    assert set(routes) == {"on-cpu", "on-gpu", "on-hybrid"}
    assert [routes[name].device for name in ("on-cpu", "on-gpu", "on-hybrid")] == [
        "cpu",
        "gpu",
        "hybrid",
    ]
    assert not routes["on-gpu"].allow_cpu
    assert not routes["on-hybrid"].allow_cpu


def test_the_report_gives_each_backend_its_rates_ratio_handoff_and_buffers() -> None:
    row = {
        "prompt_tokens": 68,
        "handoff_ms_p50": None,
        "handoff_bytes": None,
        "buffers": [{"buffer": "CPU", "kind": "KV", "mib": 1.0}],
    }
    report = {
        "backends": {
            "decode_tokens": 16,
            "rows": [
                {**row, "route": "on-cpu", "device": "cpu", "prefill_tps_p50": 300.0,
                 "decode_tps_p50": 40.0},
                {**row, "route": "on-hybrid", "device": "npu(emulated)->gpu(software)",
                 "prefill_tps_p50": 90.0, "decode_tps_p50": 4.0, "handoff_ms_p50": 4.8,
                 "handoff_bytes": 1591332,
                 "buffers": [{"buffer": "Vulkan0", "kind": "KV", "mib": 1.0}]},
            ],
        }
    }  # fmt: skip
    assert format_report(report).splitlines() == [
        "backend cpu (68-token prompt, 16 tokens): prefill 300.0 tok/s, decode 40.0 tok/s; "
        "buffers KV@CPU",
        "backend npu(emulated)->gpu(software) (68-token prompt, 16 tokens): prefill 90.0 tok/s, "
        "decode 4.0 tok/s (0.10x the cpu's), handoff 4.8 ms 1591332 B; buffers KV@Vulkan0",
    ]
