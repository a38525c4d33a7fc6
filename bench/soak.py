"""Soak and fault harness: a real `zest serve` under concurrent load for a while, with clients
that disconnect, hot reloads, and an upstream that fails in each way in turn (docs/reliability.md).

    .venv/bin/python bench/soak.py --minutes M --streams N [--out DIR]

It starts llama_cpp.server (the real upstream) and `zest serve` on loopback with the bundled
SmolLM2 and a routes file of its own in a temporary folder: two local routes and `remote`, whose
first attempt is the upstream behind a fault-injecting proxy and whose fallback is local. N client
streams send streamed and whole chat/completions requests, through the official openai client
and raw httpx, for M minutes. One line per minute, a summary at the end, soak.json and the
servers' logs in DIR. Exit status 0: every request ended as documented and RSS grew less than 5%
after the first minute; 1: not so; 2: the harness could not run; 130: interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
from _soak.chaos import Reloader, cycle_faults, sample_rss
from _soak.clients import Caller, body_of, plan_request
from _soak.outcomes import Fault, Outcome, classify, faults_between
from _soak.proxy import FaultProxy, bind_loopback
from _soak.servers import (
    free_port,
    output_targets,
    port_open,
    read_rss_kb,
    routes_text,
    start_upstream,
    start_zest,
)
from _soak.tally import (
    Minute,
    Reload,
    by_minute,
    format_minute,
    rss_at,
    summarize,
    tally_minute,
)

from zest.bench._spawn import stop
from zest.errors import CommandError

_IDLE_S = 30.0  # after the last request, how long zest may take to settle (engines idle)


@dataclass
class Run:
    """What the soak collects, kept outside the event loop so that Ctrl-C still reports it."""

    minutes: int
    outcomes: list[Outcome] = field(default_factory=list)
    history: list[tuple[float, Fault]] = field(default_factory=list)
    rss: list[tuple[float, int]] = field(default_factory=list)
    reloads: list[Reload] = field(default_factory=list)
    reported: list[Minute] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    final_kb: int | None = None
    interrupted: bool = False
    output_lost: bool = False

    def check_output(self, pid: int, log: Path, when: str) -> None:
        """Record (once) that zest's stdout or stderr no longer go to its log file."""
        targets = output_targets(pid)
        if self.output_lost or targets is None or set(targets) == {str(log.resolve())}:
            return
        self.output_lost = True
        self.checks.append(
            f"{when}, zest's stdout and stderr point to {' and '.join(targets)} instead of its "
            f"log {log}: what it logs from then on is lost"
        )

    def report_minute(self, minute: int, moment: float) -> None:
        """Print (and keep) minute `minute`'s line, its RSS read at `moment`."""
        mine = by_minute(self.outcomes, self.minutes)[minute]
        reloads = sum(1 for r in self.reloads if min(int(r.at // 60) + 1, self.minutes) == minute)
        faults = faults_between(self.history, 60.0 * (minute - 1), moment)
        tallied = tally_minute(
            minute,
            mine,
            rss_kb=rss_at(self.rss, moment),
            baseline_kb=self.baseline_kb,
            reloads=reloads,
            faults=[str(f) for f in faults],
        )
        self.reported.append(tallied)
        print(format_minute(tallied), flush=True)

    @property
    def baseline_kb(self) -> int | None:
        return rss_at(self.rss, 60.0)


@dataclass(frozen=True)
class Servers:
    zest: subprocess.Popen[bytes]
    zest_log: Path
    zest_v1: str
    upstream_base: str
    proxy_sock: socket.socket  # bound, not listening yet: the proxy listens on it
    routes: Path
    text: Callable[[int], str]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="how long (default 3)")
    parser.add_argument("--streams", type=int, default=4, help="client streams (default 4)")
    parser.add_argument("--out", type=Path, default=Path("soak-out"), help="(default soak-out)")
    parser.add_argument("--phase-s", type=float, default=15.0, help="each fault's time (15)")
    parser.add_argument("--reload-s", type=float, default=20.0, help="between reloads (20)")
    parser.add_argument(
        "--request-timeout", type=float, default=120.0, help="past this a request hangs (120)"
    )
    parser.add_argument("--seed", type=int, default=0, help="of the request mix (default 0)")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.streams < 1 or args.phase_s <= 0 or args.reload_s <= 0:
        parser.error("--minutes, --phase-s and --reload-s must be > 0, --streams >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    run = Run(minutes=max(1, math.ceil(args.minutes)))
    signal.signal(signal.SIGTERM, _interrupt)  # stop as for Ctrl-C: every process we started
    started_at, load_before = time.time(), os.getloadavg()
    try:
        with tempfile.TemporaryDirectory(prefix="zest-soak-") as tmp, ExitStack() as stack:
            servers = _start(args, Path(tmp), stack, run)
            asyncio.run(soak(args, run, servers))
    except KeyboardInterrupt:
        run.interrupted = True
        print("soak: interrupted; the servers are stopped", file=sys.stderr)
    except CommandError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return 2
    run.checks += [
        f"port {port} still accepts connections" for port in run.ports if port_open(port)
    ]
    if run.interrupted:
        run.checks.append("interrupted before the end: a partial run proves nothing")
    settings = {
        **{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "started_at": started_at,
        "duration_s": time.time() - started_at,
        "interrupted": run.interrupted,
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "commit": _commit(),
        "notes": run.notes,
    }
    report = summarize(
        run.outcomes,
        run.reported,
        run.reloads,
        baseline_kb=run.baseline_kb,
        final_kb=run.final_kb,
        checks=run.checks,
        settings=settings,
    )
    report["rss_samples"] = [(round(at, 1), kb) for at, kb in run.rss]  # (s, kB), each second
    report["fault_log"] = [(round(at, 1), str(fault)) for at, fault in run.history]
    (args.out / "soak.json").write_text(json.dumps(report, indent=2, default=str))
    print(format_summary(report), flush=True)
    print(f"wrote {args.out / 'soak.json'} (logs: zest.log, llama_cpp_server.log)", flush=True)
    if run.interrupted:
        return 130
    return 0 if report["passed"] else 1


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _start(args: argparse.Namespace, folder: Path, stack: ExitStack, run: Run) -> Servers:
    """The upstream, then zest on a routes file of its own; each stopped when `stack` closes."""
    proxy_sock = bind_loopback()  # bound now: its port goes into the routes file
    stack.callback(proxy_sock.close)
    upstream_port, zest_port = free_port(), free_port()
    run.ports = [upstream_port, zest_port, int(proxy_sock.getsockname()[1])]
    print(f"soak: starting llama_cpp.server on port {upstream_port}", file=sys.stderr, flush=True)
    upstream = start_upstream(upstream_port, args.out / "llama_cpp_server.log")
    stack.callback(stop, upstream)
    text = functools.partial(routes_text, f"http://127.0.0.1:{run.ports[2]}/v1")
    routes = folder / "routes.yaml"
    routes.write_text(text(0))
    print(f"soak: starting zest serve on port {zest_port}", file=sys.stderr, flush=True)
    zest = start_zest(routes, zest_port, args.out / "zest.log")
    stack.callback(stop, zest)
    return Servers(
        zest=zest,
        zest_log=args.out / "zest.log",
        zest_v1=f"http://127.0.0.1:{zest_port}/v1",
        upstream_base=f"http://127.0.0.1:{upstream_port}",
        proxy_sock=proxy_sock,
        routes=routes,
        text=text,
    )


async def soak(args: argparse.Namespace, run: Run, servers: Servers) -> None:
    clock = time.monotonic()
    deadline = clock + args.minutes * 60
    proxy = FaultProxy(servers.upstream_base, servers.proxy_sock)
    await proxy.start()
    caller = Caller(servers.zest_v1, args.request_timeout, clock)
    stop_event = asyncio.Event()
    reloader = Reloader(
        routes=servers.routes,
        text=servers.text,
        process=servers.zest,
        v1=servers.zest_v1,
        clock=clock,
    )
    run.reloads = reloader.done
    background = [
        asyncio.create_task(cycle_faults(proxy, args.phase_s, run.history, clock, stop_event)),
        asyncio.create_task(sample_rss(servers.zest.pid, run.rss, clock, stop_event)),
        asyncio.create_task(reloader.run(args.reload_s, stop_event)),
        asyncio.create_task(_report_minutes(run, servers, clock, stop_event)),
    ]
    try:
        alive = functools.partial(_alive, servers.zest)
        streams = (
            _stream(run, caller, seed=args.seed, number=n, deadline=deadline, alive=alive)
            for n in range(args.streams)
        )
        await asyncio.gather(*streams)
        stop_event.set()
        await asyncio.gather(*background)
        run.check_output(servers.zest.pid, servers.zest_log, "at the end of the soak")
        run.report_minute(run.minutes, time.monotonic() - clock)
        run.checks += await _idle_checks(servers, proxy)
        run.notes += await _notes(servers)
        run.final_kb = read_rss_kb(servers.zest.pid)
    finally:
        stop_event.set()
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await caller.close()
        await proxy.stop()


def _alive(process: subprocess.Popen[bytes]) -> bool:
    return process.poll() is None


async def _stream(
    run: Run,
    caller: Caller,
    *,
    seed: int,
    number: int,
    deadline: float,
    alive: Callable[[], bool],
) -> None:
    """One client stream: request after request until the deadline (the last one finishes),
    or until zest is gone (its exit is reported by the checks at the end)."""
    rng = random.Random(f"{seed}-{number}")
    while time.monotonic() < deadline and alive():
        request = plan_request(rng)
        outcome = await caller.call(request, body_of(request, rng))
        outcome = replace(
            outcome, faults=faults_between(run.history, outcome.started, outcome.ended)
        )
        run.outcomes.append(outcome)
        verdict = classify(outcome)
        if verdict.failed:
            print(f"FAIL {verdict.kind}: {_describe(outcome)}", file=sys.stderr, flush=True)


def _describe(o: Outcome) -> str:
    r = o.request
    return (
        f"t={o.started:.1f}-{o.ended:.1f}s {r.client} {r.endpoint} model={r.route} "
        f"stream={r.stream} drop={r.drop} faults={','.join(o.faults) or '-'} -> {o.ending}"
        f" status={o.status} error={o.error} served_by={o.served_by} tokens={o.tokens}"
        f"{f' message={o.message!r}' if o.message else ''}"
    )


async def _report_minutes(
    run: Run, servers: Servers, clock: float, stop_event: asyncio.Event
) -> None:
    """Each minute's line as it ends (the last one after the drain, by `soak`)."""
    for minute in range(1, run.minutes):
        delay = clock + 60.0 * minute - time.monotonic()
        try:
            async with asyncio.timeout(max(delay, 0)):
                await stop_event.wait()
            return
        except TimeoutError:
            run.check_output(servers.zest.pid, servers.zest_log, f"at the end of minute {minute}")
            run.report_minute(minute, 60.0 * minute)


async def _idle_checks(servers: Servers, proxy: FaultProxy) -> list[str]:
    """After the last request: zest still up, every engine idle, nothing queued, every retired
    engine freed, and no request left open at the upstream (a disconnect not passed on)."""
    if servers.zest.poll() is not None:
        return [f"zest serve exited with status {servers.zest.returncode} during the soak"]
    problems = []
    async with httpx.AsyncClient(timeout=10) as http:
        deadline = time.monotonic() + _IDLE_S
        while True:
            loaded = (await http.get(f"{servers.zest_v1}/loaded")).json()["data"]
            left = [
                _engine(e) for e in loaded if e.get("busy") or e.get("queued") or e.get("retired")
            ]
            if not left:
                break
            if time.monotonic() > deadline:
                problems.append(
                    f"{_IDLE_S:g}s after the last request, GET /v1/loaded shows " + "; ".join(left)
                )
                break
            await asyncio.sleep(0.5)
        health = await http.get(f"{servers.zest_v1}/health")
        if health.status_code != 200:
            problems.append(f"GET /v1/health answered {health.status_code} after the soak")
    deadline = time.monotonic() + 15
    while proxy.in_flight and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    if proxy.in_flight:
        problems.append(
            f"{proxy.in_flight} request(s) still open at the upstream 15s after the last "
            "client request"
        )
    return problems


def _engine(entry: dict[str, Any]) -> str:
    return (
        f"{entry.get('model')} on {entry.get('device')}: busy={entry.get('busy')} "
        f"queued={entry.get('queued')} retired={entry.get('retired')}"
    )


async def _notes(servers: Servers) -> list[str]:
    """What is worth knowing and no failure: how many reloads zest made (with the watcher on,
    a SIGHUP or admin reload follows an edit that the watcher sees too), the last one it
    refused, and its own count of requests by outcome (GET /metrics)."""
    async with httpx.AsyncClient(timeout=10) as http:
        status = (await http.get(f"{servers.zest_v1}/routes")).json()
        metrics = (await http.get(f"{servers.zest_v1}/metrics")).text
    error = status.get("last_error")
    notes = [f"zest made {status.get('reloads')} reloads"]
    if error:
        notes.append(f"last refused reload ({error.get('trigger')}): {error.get('errors')}")
    notes.append(f"zest_requests_total by outcome: {requests_by_outcome(metrics)}")
    return notes


def requests_by_outcome(metrics: str) -> dict[str, int]:
    """zest_requests_total summed by its outcome label, from Prometheus text."""
    counts: dict[str, int] = {}
    for line in metrics.splitlines():
        if line.startswith("zest_requests_total{") and 'outcome="' in line:
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            counts[outcome] = counts.get(outcome, 0) + int(float(line.rsplit(" ", 1)[1]))
    return dict(sorted(counts.items()))


def format_summary(report: dict[str, Any]) -> str:
    s, rss = report["settings"], report["rss"]
    growth = f"{rss['growth_pct']:+.1f}%" if rss["growth_pct"] is not None else "n/a"

    def mb(value: float | None) -> str:
        return f"{value:.1f} MB" if value is not None else "-"

    def ms(value: float | None) -> str:
        return f"{value:.0f} ms" if value is not None else "-"

    lines = [
        f"summary: {report['requests']} requests in {s['duration_s'] / 60:.1f} min with "
        f"{s['streams']} streams: {report['ok']} ok, {report['disconnected']} disconnected "
        f"by the harness {report['disconnects']}, documented errors "
        f"{report['documented'] or 'none'}, failures {report['failures'] or 'none'}",
        f"TTFT p50 {ms(report['ttft_p50_ms'])} p95 {ms(report['ttft_p95_ms'])}; RSS "
        f"{mb(rss['baseline_mb'])} at the end of minute 1, {mb(rss['final_mb'])} at the end "
        f"({growth}, limit {rss['limit_pct']:g}%)",
        f"reloads: {report['reloads']['by_trigger'] or 'none'}",
    ]
    for route, figures in report["routes"].items():
        lines.append(f"route {route}: {figures['verdicts']}, served by {figures['served_by']}")
    for fault, verdicts in report["remote_by_fault"].items():
        lines.append(f"upstream fault {fault}: {verdicts}")
    lines += [f"note: {note}" for note in s.get("notes", [])]
    lines.append("PASS" if report["passed"] else "FAIL: " + "; ".join(report["reasons"]))
    return "\n".join(lines)


def _commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
