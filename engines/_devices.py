"""The device inventory: what this machine offers, how each device was found, who can use it.

Every probe is defensive: a missing file, a permission error or an absent tool means "not
found", never a crash. Emulated devices (ZEST_EMULATE_DEVICES) are CPU threads declared as an
NPU or GPU so the whole pipeline runs for real on machines without them; they are labelled
emulated wherever they appear.

llama.cpp's devices come from ggml's backend registry, not from guesses: what the build can
run on, with the memory each device reports. A software Vulkan device (Mesa's llvmpipe) is
the gpu of a gpu route, labelled software wherever it appears.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zest.engines._base import engine_kinds
from zest.engines._ggml_devices import GgmlReport, offload_device
from zest.errors import ConfigError
from zest.router import Device, LlamaCppModel, OnnxGenaiModel, kind_of

__all__ = ["Inventory", "Probe", "detect_inventory", "parse_emulation"]

GPU_PROVIDERS = (
    "CUDAExecutionProvider",
    "DmlExecutionProvider",
    "WebGpuExecutionProvider",
    "NvTensorRTRTXExecutionProvider",
    "MIGraphXExecutionProvider",
    "ROCMExecutionProvider",
    "TensorrtExecutionProvider",
)
NPU_PROVIDERS = ("VitisAIExecutionProvider", "QNNExecutionProvider")
ACCEL_DRIVERS = {"amdxdna": "AMD XDNA NPU", "intel_vpu": "Intel NPU"}
CPU_FLAGS = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "neon",
    "asimd",
)
log = logging.getLogger("zest.engines")
_warned: list[bool] = []  # the warning of a GPU backend without a device, given
_EMULATION = re.compile(r"^(npu|gpu)=cpu:(\d+)$")
# The kinds whose libraries the probes below ask (names from the router's declarations).
_LLAMACPP, _ONNX_GENAI = kind_of(LlamaCppModel), kind_of(OnnxGenaiModel)


@dataclass(frozen=True)
class Probe:
    """One look at the machine: where zest looked and what it saw."""

    source: str
    result: str


@dataclass(frozen=True)
class Inventory:
    devices: dict[str, Device]
    probes: tuple[Probe, ...]
    ggml: GgmlReport | None = None  # what llama.cpp's build runs on (None: not installed)

    def usable(self, engine: str) -> list[str]:
        return sorted(name for name, dev in self.devices.items() if engine in dev.engines)


def detect_inventory(emulate: str = "", root: Path = Path("/")) -> Inventory:
    """Probe the machine, then add the emulated devices declared in `emulate`."""
    found: dict[str, _Found] = {}
    probes = [probe(found, root) for probe in _PROBES]
    devices = {name: f.device() for name, f in found.items()}
    ggml = _ggml_report()
    for name, threads in parse_emulation(emulate).items():
        real = devices.get(name)
        if real is not None and real.engines:
            raise ConfigError(
                [
                    f"ZEST_EMULATE_DEVICES: a real {name} was found ({real.detected_by}): "
                    f"remove {name} from ZEST_EMULATE_DEVICES"
                ]
            )
        devices[name] = _emulated(name, threads)
    return Inventory(devices, tuple(probes), ggml)


def parse_emulation(spec: str) -> dict[str, int]:
    """'npu=cpu:1,gpu=cpu:1' -> {'npu': 1, 'gpu': 1} (CPU threads per emulated device)."""
    result: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        match = _EMULATION.match(item)
        if not match or int(match[2]) < 1:
            raise ConfigError(
                [
                    f"ZEST_EMULATE_DEVICES: invalid entry {item!r}: write DEVICE=cpu:THREADS with "
                    "DEVICE npu or gpu and THREADS >= 1, e.g. npu=cpu:1,gpu=cpu:1"
                ]
            )
        if match[1] in result:
            raise ConfigError([f"ZEST_EMULATE_DEVICES: {match[1]} is declared twice"])
        result[match[1]] = int(match[2])
    return result


def _emulated(name: str, threads: int) -> Device:
    plural = "s" if threads > 1 else ""
    return Device(
        name=name,
        engines=frozenset(kind.name for kind in engine_kinds() if kind.runs_emulated),
        detected_by="emulated (ZEST_EMULATE_DEVICES)",
        detail=f"emulated on {threads} CPU thread{plural}: not a real {name}",
        emulated=True,
        threads=threads,
    )


@dataclass
class _Found:
    name: str
    detected_by: list[str]
    details: list[str]
    engines: set[str]
    software: bool = False
    memory: tuple[int, int] | None = None  # free, total
    ggml_device: str | None = None  # the ggml device llama.cpp offloads to (Vulkan0)

    def device(self) -> Device:
        return Device(
            name=self.name,
            engines=frozenset(self.engines),
            detected_by=", ".join(self.detected_by),
            detail="; ".join(self.details),
            extra={"ggml_device": self.ggml_device} if self.ggml_device else {},
            software=self.software,
            memory_free=self.memory[0] if self.memory else None,
            memory_total=self.memory[1] if self.memory else None,
        )


def _note(
    found: dict[str, _Found], name: str, source: str, detail: str = "", engine: str | None = None
) -> None:
    entry = found.setdefault(name, _Found(name, [], [], set()))
    if source not in entry.detected_by:
        entry.detected_by.append(source)
    if detail and detail not in entry.details:
        entry.details.append(detail)
    if engine:
        entry.engines.add(engine)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _probe_cpu(found: dict[str, _Found], root: Path) -> Probe:
    info = _read(root / "proc/cpuinfo")
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.MULTILINE)
    flags_line = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", info, re.MULTILINE)
    flags = set(flags_line[1].split()) if flags_line else set()
    isa = [f for f in CPU_FLAGS if f in flags]
    detail = f"{model[1].strip() if model else 'CPU'}, {os.cpu_count()} cores, {' '.join(isa)}"
    engine = _LLAMACPP if importlib.util.find_spec("llama_cpp") else None
    _note(found, "cpu", "/proc/cpuinfo", detail.strip(", "), engine)
    return Probe("/proc/cpuinfo", detail)


def _probe_llama_cpp(found: dict[str, _Found], root: Path) -> Probe:
    if importlib.util.find_spec("llama_cpp") is None:
        return Probe("llama.cpp", "not installed")
    try:
        report = _ggml_report(strict=True)
    except Exception as exc:  # a broken build must not stop the gateway from starting
        return Probe("llama.cpp", f"error: {type(exc).__name__}: {exc}")
    if report is None:
        return Probe("llama.cpp", "not installed")
    gpu = offload_device(report.devices)
    if gpu is not None:
        _note(found, "gpu", "ggml devices (llama.cpp)", gpu.describe(), _LLAMACPP)
        entry = found["gpu"]
        entry.software = gpu.kind == "software"
        entry.memory, entry.ggml_device = (gpu.memory_free, gpu.memory_total), gpu.name
    elif report.idle_backends and not _warned:
        _warned.append(True)  # once per process: serve detects the inventory more than once
        log.warning(
            "llama.cpp is built with %s but found no usable device: llama.cpp models run on "
            "the CPU (a software Vulkan device such as llvmpipe is used only when "
            "GGML_VK_VISIBLE_DEVICES selects it)",
            " and ".join(report.idle_backends),
        )
    return Probe("llama.cpp", f"ggml devices: {report.summary()}")


def _ggml_report(*, strict: bool = False) -> GgmlReport | None:
    """ggml's devices in this process (None: llama-cpp-python is not installed, or, unless
    `strict`, its build cannot say)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return None
    try:
        import llama_cpp

        from zest.engines._llama_native import ggml_report

        return ggml_report(llama_cpp)
    except Exception:
        if strict:
            raise
        return None


def _probe_onnxruntime(found: dict[str, _Found], root: Path) -> Probe:
    if importlib.util.find_spec("onnxruntime") is None:
        return Probe("onnxruntime providers", "onnxruntime not installed")
    try:
        import onnxruntime

        providers = list(onnxruntime.get_available_providers())
    except Exception as exc:
        return Probe("onnxruntime providers", f"error: {type(exc).__name__}: {exc}")
    engine = _ONNX_GENAI if importlib.util.find_spec("onnxruntime_genai") else None
    for provider in providers:
        short = provider.removesuffix("ExecutionProvider")
        if provider in GPU_PROVIDERS:
            _note(found, "gpu", "onnxruntime providers", f"{short} provider", engine)
        elif provider in NPU_PROVIDERS:
            _note(found, "npu", "onnxruntime providers", f"{short} provider", engine)
        elif provider == "CPUExecutionProvider" and engine:
            _note(found, "cpu", "onnxruntime providers", "", engine)
    return Probe("onnxruntime providers", ", ".join(providers) or "none")


def _probe_accel(found: dict[str, _Found], root: Path) -> Probe:
    accel = root / "sys/class/accel"
    try:
        entries = sorted(accel.iterdir())
    except OSError:
        return Probe("/sys/class/accel", "absent")
    seen = []
    for entry in entries:
        try:
            driver = Path(os.readlink(entry / "device" / "driver")).name
        except OSError:
            driver = "unknown driver"
        seen.append(f"{entry.name}: {driver}")
        if driver in ACCEL_DRIVERS:
            _note(found, "npu", "/sys/class/accel", f"{ACCEL_DRIVERS[driver]} ({entry.name})")
    return Probe("/sys/class/accel", "; ".join(seen) or "empty")


_TOOLS = (
    ("nvidia-smi", ("-L",), "gpu"),
    ("amd-smi", ("list",), "gpu"),
    ("rocm-smi", ("--showproductname",), "gpu"),
    ("xrt-smi", ("examine",), "npu"),
)


def _probe_tools(found: dict[str, _Found], root: Path) -> Probe:
    seen = []
    for tool, args, device in _TOOLS:
        path = shutil.which(tool)
        if path is None:
            continue
        try:
            out = subprocess.run(
                [path, *args], capture_output=True, text=True, timeout=5, check=False
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            seen.append(f"{tool}: {type(exc).__name__}")
            continue
        first = out.splitlines()[0] if out else "no output"
        seen.append(f"{tool}: {first}")
        if out:
            _note(found, device, tool, first)
    return Probe("vendor tools", "; ".join(seen) or "none installed")


_PROBES: tuple[Callable[[dict[str, _Found], Path], Probe], ...] = (
    _probe_cpu,
    _probe_llama_cpp,
    _probe_onnxruntime,
    _probe_accel,
    _probe_tools,
)
