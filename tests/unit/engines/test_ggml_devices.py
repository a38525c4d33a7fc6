"""ggml's devices as zest labels them, the buffers llama.cpp accounts, the room a device
reports, and the backend the install script picks (pure parts of the Vulkan backend)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from zest.engines._base import BufferUse
from zest.engines._ggml_devices import GgmlDevice, GgmlReport, device_kind, offload_device
from zest.engines._llama_log import parse_buffer_line
from zest.engines._llamacpp import check_fits, ggml_device_of
from zest.errors import EngineError
from zest.router import Device

REPO = Path(__file__).resolve().parents[3]
MIB = 1024 * 1024
LAVAPIPE = GgmlDevice("Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)", "gpu", 2048 * MIB, 2048 * MIB)
RADEON = GgmlDevice("Vulkan1", "AMD Radeon 780M (RADV PHOENIX)", "igpu", 7 * 1024 * MIB, 8192 * MIB)
CPU = GgmlDevice("CPU", "AMD EPYC", "cpu", 0, 0)


@pytest.mark.parametrize(
    ("ggml_type", "description", "kind"),
    [
        ("gpu", "llvmpipe (LLVM 15.0.6, 256 bits)", "software"),
        ("gpu", "lavapipe", "software"),
        ("gpu", "SwiftShader Device (Subzero)", "software"),
        ("gpu", "NVIDIA H200", "gpu"),
        ("igpu", "AMD Radeon 780M (RADV PHOENIX)", "gpu"),
        ("cpu", "AMD EPYC", "cpu"),
        ("accel", "BLAS", "accel"),
    ],
)
def test_a_device_whose_driver_computes_on_the_cpu_is_software(
    ggml_type: str, description: str, kind: str
) -> None:
    assert device_kind(ggml_type, description) == kind


def test_a_real_gpu_is_offloaded_to_before_a_software_one() -> None:
    assert offload_device([CPU, LAVAPIPE, RADEON]) is RADEON
    assert offload_device([CPU, LAVAPIPE]) is LAVAPIPE
    assert offload_device([CPU]) is None


def test_the_report_names_a_backend_built_in_without_a_device() -> None:
    report = GgmlReport((CPU,), (("CPU", 1), ("Vulkan", 0)))
    assert report.idle_backends == ["Vulkan"]
    assert report.summary() == "CPU: AMD EPYC; Vulkan: built in, no usable device"
    seen = GgmlReport((CPU, LAVAPIPE), (("CPU", 1), ("Vulkan", 1)))
    assert seen.summary() == (
        "CPU: AMD EPYC, Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits), 2048 MiB "
        "(software: a CPU in disguise)"
    )


BUFFER_LINES = [
    ("load_tensors:      Vulkan0 model buffer size =    72.55 MiB", "Vulkan0", "model", 72.55),
    ("load_tensors:   CPU_Mapped model buffer size =    25.90 MiB", "CPU_Mapped", "model", 25.9),
    ("llama_kv_cache:    Vulkan0 KV buffer size =    11.25 MiB", "Vulkan0", "KV", 11.25),
    ("llama_context: Vulkan_Host  output buffer size =  0.19 MiB", "Vulkan_Host", "output", 0.19),
    ("sched_reserve:    Vulkan0 compute buffer size =    66.50 MiB", "Vulkan0", "compute", 66.5),
]


@pytest.mark.parametrize(("line", "buffer", "kind", "mib"), BUFFER_LINES)
def test_ggml_buffer_lines_are_read(line: str, buffer: str, kind: str, mib: float) -> None:
    assert parse_buffer_line(line) == BufferUse(buffer, kind, mib)


def test_other_lines_are_no_buffers() -> None:
    assert parse_buffer_line("load_tensors: offloaded 31/31 layers to GPU") is None


def gpu(memory_free: int | None, **extra: object) -> Device:
    return Device(
        "gpu",
        frozenset({"llamacpp"}),
        "ggml devices (llama.cpp)",
        extra={"ggml_device": "Vulkan0"},
        memory_free=memory_free,
        memory_total=memory_free,
        **extra,  # type: ignore[arg-type]
    )


def test_only_a_ggml_gpu_is_offloaded_to() -> None:
    assert ggml_device_of(gpu(None)) == "Vulkan0"
    assert ggml_device_of(gpu(None, software=True)) == "Vulkan0"
    emulated = Device("gpu", frozenset({"llamacpp"}), "emulated", emulated=True, threads=1)
    assert ggml_device_of(emulated) is None
    assert ggml_device_of(Device("cpu", frozenset({"llamacpp"}), "/proc/cpuinfo")) is None


def test_a_load_the_device_has_no_room_for_is_refused_with_the_figures() -> None:
    check_fits("smollm2", gpu(200_000_000), 100_000_000, 50_000_000)
    check_fits("smollm2", gpu(None), 10**12, None)  # nothing reported: nothing to judge
    with pytest.raises(EngineError) as refused:
        check_fits("smollm2", gpu(120_000_000, software=True), 100_000_000, 50_000_000)
    assert str(refused.value) == (
        "model 'smollm2' needs about 150 MB on gpu(software) (Vulkan0) for its weights and KV "
        "cache, and the device reports 120 MB free: lower context_length or parallel, or "
        "route the model to another device"
    )


def backend(tmp_path: Path, summary: str | None, **env: str) -> str:
    """What scripts/llama-backend.sh picks, with `summary` as vulkaninfo --summary's output
    (None: no vulkaninfo installed)."""
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    if summary is not None:
        fake = tools / "vulkaninfo"
        fake.write_text(f"#!/bin/sh\ncat <<'END'\n{summary}\nEND\n")
        fake.chmod(0o755)
    path = f"{tools}:/usr/bin:/bin" if summary is not None else str(tools) + ":/nonexistent"
    bash = "/bin/bash"
    done = subprocess.run(
        [bash, str(REPO / "scripts" / "llama-backend.sh")],
        env={"PATH": path, **env, "HOME": os.environ.get("HOME", "/")},
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or done.stderr.strip()


LLVMPIPE_SUMMARY = "GPU0:\n\tdeviceType         = PHYSICAL_DEVICE_TYPE_CPU\n\tdeviceName = llvmpipe"
RADEON_SUMMARY = (
    LLVMPIPE_SUMMARY + "\nGPU1:\n\tdeviceType         = PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU"
)


def test_auto_builds_vulkan_only_for_a_real_gpu(tmp_path: Path) -> None:
    assert backend(tmp_path, LLVMPIPE_SUMMARY) == "cpu"  # lavapipe alone is no reason
    assert backend(tmp_path, RADEON_SUMMARY) == "vulkan"
    assert backend(tmp_path, RADEON_SUMMARY, ZEST_LLAMA_BACKEND="cpu") == "cpu"
    assert backend(tmp_path, LLVMPIPE_SUMMARY, ZEST_LLAMA_BACKEND="vulkan") == "vulkan"


def test_an_unknown_backend_is_refused_with_the_choices(tmp_path: Path) -> None:
    assert backend(tmp_path, None, ZEST_LLAMA_BACKEND="cuda") == (
        "ZEST_LLAMA_BACKEND=cuda: use cpu, vulkan or auto"
    )
