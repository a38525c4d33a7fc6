"""`zest bench`: zest against llama.cpp's llama-server, the packaged llama_cpp.server and raw
llama-cpp-python in one run, beside the hardware ceiling; an interactive task beside a batch
task, zest and llama-server side by side (mixed, bench/_mixed.py); structured outputs against
llama-server (quality, bench/_quality.py); and zest's own phases (cold start, prefill, decode,
latency, prefix reuse, speculation, a sustained load, routing decisions, the worst schema beside
a neighbour (grammar, bench/_grammar_cost.py), and each backend llama.cpp finds here:
bench/_backends.py).

Every server is started here on loopback with the same model file and threads; levels are
interleaved server by server, and the ceiling is measured in the same run: shared machines
drift, so figures are read as ratios within one run.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zest.bench import _phases
from zest.bench._backends import backends
from zest.bench._compare import PROMPT_TOKENS, ceiling, compare_servers
from zest.bench._grammar_cost import grammar_cost
from zest.bench._mixed import MixedServer, mixed
from zest.bench._quality import quality
from zest.bench._report import format_report, plot
from zest.bench._routing import routing
from zest.bench._servers import (
    find_llama_server,
    free_port,
    llama_server,
    peers,
    routes_file,
    zest_server,
)
from zest.bench._spawn import serving

__all__ = ["DEFAULT_PHASES", "PHASES", "BenchOptions", "format_report", "run_bench"]

PHASES = (
    "cold",
    "routing",
    "backends",
    "servers",
    "mixed",
    "prefix",
    "speculation",
    "prefill",
    "decode",
    "latency",
    "sustained",
    "grammar",
    "quality",
)
# The phases that need no zest server of the bench's (backends starts one of its own).
IN_PROCESS = ("cold", "routing", "backends")
LONG = ("mixed", "sustained", "quality")  # minutes each: run when named (or `all`)
DEFAULT_PHASES = tuple(phase for phase in PHASES if phase not in LONG)


@dataclass(frozen=True)
class BenchOptions:
    model: Path
    threads: int
    out: Path
    phases: tuple[str, ...] = DEFAULT_PHASES
    levels: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    rounds: int = 2
    max_tokens: int = 64
    port: int | None = None  # zest's (None: a free one)
    peer_port: int | None = None  # the first peer's; the next one +1
    llama_server: Path | None = None  # the binary (None: the cache's build, else PATH)
    prefill_sizes: list[int] = field(default_factory=lambda: [128, 1024, 4096])
    minutes: float = 2.0  # the sustained phase's length
    streams: int = 4  # the sustained phase's clients
    seconds: int = 45  # each spell of the mixed phase (idle, then loaded)


def run_bench(options: BenchOptions) -> dict[str, Any]:
    """Run the selected phases; the report is also written to OUT/bench.json and plotted."""
    out, phases = options.out, options.phases
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"phases": list(phases), **_setup(options)}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "cold" in phases:  # first, on a quiet machine: nothing else is loaded yet
            report["cold"] = _phases.cold_start(options.model, options.threads, folder, 3)
        if "routing" in phases:  # in this process, its models unloaded before the server's
            report["routing"] = routing(options.model, options.threads, folder, options.rounds)
        if "backends" in phases:  # its own server: the backends this build finds here
            report["backends"] = backends(
                options.model, options.threads, folder, out, options.rounds
            )
        if set(phases) <= set(IN_PROCESS):
            return _written(report, out)
        if {"prefill", "decode"} & set(phases) and "servers" not in phases:
            report["ceiling"] = _ceiling_report(options)
        routes = routes_file(options.model, options.threads, folder)
        zest = zest_server(routes, options.port or free_port())
        with serving(zest.command, zest.probe, out / zest.log, name="zest serve") as process:
            if "servers" in phases:
                report.update(_servers(options, zest))
            if "mixed" in phases:
                report["mixed"] = _mixed(options, zest)
            if "quality" in phases:
                report["quality"] = _quality(options, zest)
            if "grammar" in phases:
                report["grammar"] = grammar_cost(zest, options.rounds)
            report.update(_zest_phases(options, zest, process.pid))
    return _written(report, out)


def _written(report: dict[str, Any], out: Path) -> dict[str, Any]:
    (out / "bench.json").write_text(json.dumps(report, indent=2))
    plot(report, out / "bench.png")
    return report


def _setup(options: BenchOptions) -> dict[str, Any]:
    return {
        "threads": options.threads,
        "max_tokens": options.max_tokens,
        "rounds": options.rounds,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "model": str(options.model),
    }


def _ceiling_report(options: BenchOptions) -> dict[str, Any]:
    """The ceiling, measured in process; the servers phase measures it between its warm-up and
    its levels (the servers idle), next to raw llama-cpp-python."""
    sizes = sorted({PROMPT_TOKENS, *options.prefill_sizes[:2]})
    measured = ceiling(options.model, options.threads, options.levels, sizes)
    return {
        "decode_step_ms": measured.decode_step_ms,
        "prefill_tps": measured.prefill_tps,
        "aggregate_tps": {
            k: measured.aggregate_tps(k, PROMPT_TOKENS, options.max_tokens)
            for k in measured.decode_step_ms
        },
        "ttft_ms": measured.ttft_ms(PROMPT_TOKENS),
        "prompt_tokens": PROMPT_TOKENS,
    }


def _llama_server_binary(options: BenchOptions, instead: str) -> Path | None:
    binary = find_llama_server(options.llama_server)
    if binary is None:
        print(
            "llama-server not found: `make llama-server` builds it from the vendored sources "
            f"(or pass --llama-server PATH); {instead}",
            file=sys.stderr,
        )
    return binary


def _servers(options: BenchOptions, zest: Any) -> dict[str, Any]:
    binary = _llama_server_binary(options, "comparing with llama_cpp.server only")
    others = peers(options.model, options.threads, binary, options.peer_port)
    return compare_servers(
        zest,
        others,
        model=options.model,
        threads=options.threads,
        out=options.out,
        levels=options.levels,
        rounds=options.rounds,
        max_tokens=options.max_tokens,
        ceiling_report=lambda: _ceiling_report(options),
    )


def _mixed(options: BenchOptions, zest: Any) -> dict[str, Any]:
    """The mixed phase: zest (priorities from its routes) and llama-server, started here."""
    servers = [MixedServer("zest", zest.base, "autocomplete", "summarization")]
    binary = _llama_server_binary(options, "the mixed phase measures zest alone")
    with ExitStack() as stack:
        if binary is not None:
            peer = llama_server(
                binary, options.model, options.threads, options.peer_port or free_port()
            )
            stack.enter_context(
                serving(peer.command, peer.probe, options.out / peer.log, name=peer.name)
            )
            servers.append(MixedServer(peer.name, peer.base, peer.model, peer.model))
        return mixed(servers, seconds=options.seconds, rounds=options.rounds)


def _quality(options: BenchOptions, zest: Any) -> dict[str, Any]:
    """The quality phase: zest and llama-server (started here), the same requests to each."""
    binary = _llama_server_binary(options, "the quality phase measures zest alone")
    with ExitStack() as stack:
        servers = [zest]
        if binary is not None:
            peer = llama_server(
                binary, options.model, options.threads, options.peer_port or free_port()
            )
            stack.enter_context(
                serving(peer.command, peer.probe, options.out / peer.log, name=peer.name)
            )
            servers.append(peer)
        return quality(servers, seeds=max(options.rounds, 1))


def _zest_phases(options: BenchOptions, zest: Any, pid: int) -> dict[str, Any]:
    phases, rounds = options.phases, options.rounds
    found: dict[str, Any] = {}
    if "prefix" in phases:
        found["prefix_cache"] = _phases.prefix(zest, rounds)
    if "speculation" in phases:
        found["speculation"] = _phases.speculation(zest, rounds)
    if "prefill" in phases:
        found["prefill"] = _phases.prefill(zest, options.prefill_sizes, rounds)
    if "decode" in phases:
        found["decode"] = _phases.decode(zest, rounds)
    if "latency" in phases:
        found["latency"] = _phases.latency(zest, rounds)
    if "sustained" in phases:
        found["sustained"] = _phases.sustained(zest, pid, options.streams, options.minutes)
    return found
