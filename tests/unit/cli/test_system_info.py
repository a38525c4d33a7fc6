"""`zest system-info`: the inventory serve would detect, llama.cpp's devices from ggml."""

from __future__ import annotations

import json

import pytest

from zest.gateway.cli import main
from zest.gateway.cli._system_info import format_system_info

SOFTWARE_GPU = {
    "devices": [
        {"name": "gpu", "label": "gpu(software)", "engines": ["llamacpp"],
         "memory_total": 2048 * 1024 * 1024, "detected_by": "ggml devices (llama.cpp)",
         "detail": "Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits), 2048 MiB (software: a CPU in "
                   "disguise)"},
    ],
    "ggml_devices": [
        {"name": "Vulkan0", "kind": "software", "memory_free": 2048 * 1024 * 1024,
         "memory_total": 2048 * 1024 * 1024, "description": "llvmpipe (LLVM 15.0.6, 256 bits)"},
    ],
    "probes": [{"source": "llama.cpp", "result": "ggml devices: Vulkan0: llvmpipe"}],
}  # fmt: skip


def test_the_json_lists_devices_ggml_devices_and_probes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZEST_EMULATE_DEVICES", "npu=cpu:1")
    assert main(["system-info", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert {"cpu", "npu(emulated)"} <= {d["label"] for d in shown["devices"]}
    assert "CPU" in [g["name"] for g in shown["ggml_devices"]]  # llama.cpp's own
    assert [p["source"] for p in shown["probes"]][:2] == ["/proc/cpuinfo", "llama.cpp"]


def test_a_software_device_is_shown_as_such(capsys: pytest.CaptureFixture[str]) -> None:
    format_system_info(SOFTWARE_GPU)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:3] == ["gpu(software)", "llamacpp", "2048"]
    assert lines[4].split()[:4] == ["Vulkan0", "software", "2048", "MiB/2048"]
