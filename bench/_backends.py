"""`zest bench --phases backends`: prefill and decode tokens/s on each backend llama.cpp can
use here, and the hybrid pipeline's handoff, through a zest server of the phase's own.

The backends are what zest itself finds (`zest system-info`, ggml's device registry): the CPU
always; the gpu where the llama.cpp build has a GPU backend and a device it will use (a Vulkan
build on lavapipe, `GGML_VK_VISIBLE_DEVICES`, is one: a CPU in disguise, slower than the CPU
backend, so the figures there prove the path, not speed). With a gpu and an npu (emulated by
CPU threads where none exists: ZEST_EMULATE_DEVICES=npu=cpu:1), the hybrid route prefills on
the npu and decodes on the gpu, and its handoff is measured. The server runs
in this process's environment, so `PYTHONPATH=.venv/vulkan-site` measures the Vulkan build.

Each figure is the engine's own (usage.pipeline: prefill ms, decode tokens/s, handoff), read
off greedy non-streamed completions, the routes interleaved round by round with the order
alternating (these machines are shared: compare ratios, not absolute figures).
"""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

import httpx

from zest.bench._servers import free_port, zest_server
from zest.bench._spawn import serving, zest_command

__all__ = ["backends"]

PROMPT = "The harbour town woke slowly, and the boats came back with the tide. "
# Small, because a software GPU prefills a few tokens a second.
PROMPT_REPEATS = 4  # about 64 tokens
DECODE_TOKENS = 16
# The end-of-text tokens banned, so every answer is DECODE_TOKENS long.
_NO_END = {"0": -100, "2": -100}


def _usable_devices() -> dict[str, Any]:
    """`zest system-info --json` as a server in this environment would see it."""
    command = zest_command("system-info", "--json")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
    info: dict[str, Any] = json.loads(done.stdout)
    return info


def _routes(model: Path, threads: int, folder: Path, devices: list[str]) -> Path:
    path = folder / "backends-routes.yaml"
    options = f"n_threads: {threads}, parallel: 1, prefix_cache_tokens: 0"
    lines = [
        "version: 1",
        "models:",
        f"  bench: {{engine: llamacpp, source: {model}, context_length: 512, "
        f"options: {{{options}}}}}",
        "routes:",
    ]
    for device in devices:  # never a silent fall back to the CPU: each figure is its device's
        lines.append(
            f"  on-{device}: {{kind: completion, model: bench, device: {device}, "
            f"allow_cpu: {'true' if device == 'cpu' else 'false'}, on_failure: return_error, "
            f"max_tokens: {DECODE_TOKENS}}}"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def _placements(info: dict[str, Any]) -> list[str]:
    usable = {d["name"] for d in info["devices"] if d["usable"] and "llamacpp" in d["engines"]}
    gpu = ["gpu"] if "gpu" in usable else []
    return ["cpu", *gpu, *(["hybrid"] if gpu and "npu" in usable else [])]


def _measure(client: httpx.Client, base: str, route: str, round_number: int) -> dict[str, Any]:
    body = {
        "model": route,
        "prompt": f"[{route} {round_number}] {PROMPT * PROMPT_REPEATS}",  # fresh: no KV reuse
        "max_tokens": DECODE_TOKENS,
        "temperature": 0,
        "logit_bias": _NO_END,
    }
    reply = client.post(f"{base}/completions", json=body)
    reply.raise_for_status()
    answer = reply.json()
    pipeline = answer["usage"]["pipeline"]
    return {
        "device": answer["zest"]["device"],
        "prompt_tokens": answer["usage"]["prompt_tokens"],
        "prefill_tps": answer["usage"]["prompt_tokens"] / pipeline["prefill_ms"] * 1000,
        "decode_tps": pipeline["decode_tokens_per_s"],
        "handoff_ms": pipeline["handoff_ms"],
        "handoff_bytes": pipeline["handoff_bytes"],
    }


def _row(route: str, samples: list[dict[str, Any]], loaded: dict[str, Any]) -> dict[str, Any]:
    handoffs = [s["handoff_ms"] for s in samples if s["handoff_ms"] is not None]
    return {
        "route": route,
        "device": samples[0]["device"],
        "backend": loaded.get("backend"),
        "prompt_tokens": samples[0]["prompt_tokens"],
        "prefill_tps_p50": statistics.median(s["prefill_tps"] for s in samples),
        "decode_tps_p50": statistics.median(s["decode_tps"] or 0.0 for s in samples),
        "handoff_ms_p50": statistics.median(handoffs) if handoffs else None,
        "handoff_bytes": samples[0]["handoff_bytes"],
        # ggml's accounting of where the model and its KV cache went (what proves offload)
        "buffers": loaded.get("buffers", []),
    }


def backends(model: Path, threads: int, folder: Path, out: Path, rounds: int) -> dict[str, Any]:
    """Each backend present measured `rounds` times (after one untimed warm-up round)."""
    info = _usable_devices()
    placements = _placements(info)
    server = zest_server(_routes(model, threads, folder, placements), free_port())
    samples: dict[str, list[dict[str, Any]]] = {f"on-{p}": [] for p in placements}
    log = out / "backends-zest.log"
    with (
        serving(server.command, server.probe, log, name="zest serve"),
        httpx.Client(timeout=900) as client,
    ):
        for round_number in range(rounds + 1):
            order = list(samples) if round_number % 2 else list(samples)[::-1]
            for route in order:
                sample = _measure(client, server.base, route, round_number)
                if round_number:
                    samples[route].append(sample)
        loaded = client.get(f"{server.base}/loaded").json()["data"]
    by_device = {entry["device"]: entry for entry in loaded}
    return {
        "ggml_devices": info.get("ggml_devices", []),
        "decode_tokens": DECODE_TOKENS,
        "rounds": rounds,
        "rows": [
            _row(route, taken, by_device.get(taken[0]["device"], {}))
            for route, taken in samples.items()
        ],
    }
