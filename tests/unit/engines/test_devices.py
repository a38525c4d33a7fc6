"""The device inventory on odd machines (a fake root folder) and the emulation setting."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zest.engines import detect_inventory, parse_emulation
from zest.errors import ConfigError

CPUINFO = (
    "processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu avx avx2 fma avx512f amx_tile\n"
)


def root_with(
    tmp_path: Path, *, cpuinfo: str | None = CPUINFO, accel: dict[str, str] | None = None
) -> Path:
    if cpuinfo is not None:
        (tmp_path / "proc").mkdir()
        (tmp_path / "proc" / "cpuinfo").write_text(cpuinfo)
    for name, driver in (accel or {}).items():
        device = tmp_path / "sys" / "class" / "accel" / name / "device"
        device.mkdir(parents=True)
        (tmp_path / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        os.symlink(tmp_path / "drivers" / driver, device / "driver")
    return tmp_path


def test_the_cpu_is_always_there_with_its_isa(tmp_path: Path) -> None:
    inventory = detect_inventory(root=root_with(tmp_path))
    cpu = inventory.devices["cpu"]
    assert cpu.detail == f"Test CPU 9000, {os.cpu_count()} cores, avx avx2 fma avx512f amx_tile"
    assert cpu.detected_by == "/proc/cpuinfo, onnxruntime providers"
    assert cpu.engines == frozenset({"llamacpp", "onnx-genai"})
    assert not cpu.emulated


def test_an_empty_machine_does_not_crash(tmp_path: Path) -> None:
    inventory = detect_inventory(root=root_with(tmp_path, cpuinfo=None))
    assert inventory.devices["cpu"].detail.startswith("CPU, ")
    probes = {p.source: p.result for p in inventory.probes}
    assert probes["/sys/class/accel"] == "absent"


def test_an_npu_driver_under_sys_class_accel_is_found_but_not_usable_by_llama_cpp(
    tmp_path: Path,
) -> None:
    inventory = detect_inventory(root=root_with(tmp_path, accel={"accel0": "amdxdna"}))
    npu = inventory.devices["npu"]
    assert npu.detected_by == "/sys/class/accel"
    assert npu.detail == "AMD XDNA NPU (accel0)"
    assert npu.engines == frozenset()  # llama.cpp has no NPU backend
    assert {p.source: p.result for p in inventory.probes}["/sys/class/accel"] == "accel0: amdxdna"


def test_an_accel_entry_without_a_driver_link_is_reported_not_fatal(tmp_path: Path) -> None:
    root = root_with(tmp_path)
    (root / "sys" / "class" / "accel" / "accel0").mkdir(parents=True)
    inventory = detect_inventory(root=root)
    assert "npu" not in inventory.devices
    assert {p.source: p.result for p in inventory.probes}["/sys/class/accel"] == (
        "accel0: unknown driver"
    )


def test_emulated_devices_are_labelled_everywhere(tmp_path: Path) -> None:
    inventory = detect_inventory("npu=cpu:1, gpu=cpu:2", root=root_with(tmp_path))
    npu, gpu = inventory.devices["npu"], inventory.devices["gpu"]
    assert (npu.label, npu.threads, npu.emulated) == ("npu(emulated)", 1, True)
    assert gpu.detail == "emulated on 2 CPU threads: not a real gpu"
    assert inventory.usable("llamacpp") == ["cpu", "gpu", "npu"]


def test_emulation_takes_the_place_of_a_device_nothing_can_use(tmp_path: Path) -> None:
    root = root_with(tmp_path, accel={"accel0": "intel_vpu"})
    assert detect_inventory("npu=cpu:1", root=root).devices["npu"].emulated


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "npu=gpu:1",
            "ZEST_EMULATE_DEVICES: invalid entry 'npu=gpu:1': write DEVICE=cpu:THREADS "
            "with DEVICE npu or gpu and THREADS >= 1, e.g. npu=cpu:1,gpu=cpu:1",
        ),
        (
            "tpu=cpu:1",
            "ZEST_EMULATE_DEVICES: invalid entry 'tpu=cpu:1': write DEVICE=cpu:THREADS "
            "with DEVICE npu or gpu and THREADS >= 1, e.g. npu=cpu:1,gpu=cpu:1",
        ),
        (
            "npu=cpu:0",
            "ZEST_EMULATE_DEVICES: invalid entry 'npu=cpu:0': write DEVICE=cpu:THREADS "
            "with DEVICE npu or gpu and THREADS >= 1, e.g. npu=cpu:1,gpu=cpu:1",
        ),
        ("npu=cpu:1,npu=cpu:2", "ZEST_EMULATE_DEVICES: npu is declared twice"),
    ],
)
def test_bad_emulation_settings_say_how_to_write_them(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_emulation(spec)
    assert info.value.problems == [message]


def test_no_emulation_by_default() -> None:
    assert parse_emulation("") == {}
