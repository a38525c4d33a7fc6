"""What a named client's limits and a route's response cache cost, in one run (issue 36).

    .venv/bin/python -m zest.bench.clients [--pairs 300] [--out clients.json]

One server, one loopback upstream that answers every chat at once with a canned reply (no
model: what is left is the gateway's own work, where limits and the cache cost something).
Two paths are sent in alternation, one pair after the other, so the machine's noise falls on
both alike:

- `baseline`: a route without a cache, called with a key of ZEST_API_KEYS (anonymous: no
  limits);
- `limited_miss`: the same upstream through a route with a cache, called by a named client with
  all four limits set (requests and tokens per minute, concurrent requests, tokens per day, in
  this process's memory): each request is determined (temperature 0) and new, so it misses,
  its answer is kept, its tokens reserved and settled;

then `hit`: the same determined request again and again, answered from the cache. The report
gives each path's p50 and p95 (client-side latency over loopback), the median of the paired
differences (miss minus baseline, each pair sent back to back: the machine's noise cancels
most), the hit's p50 (the issue's bounds: at most 0.2 ms over the baseline for a miss, 5 ms
for a hit), and the server's own CPU time per request on each path (every thread of the
process, from /proc/PID/task/*/schedstat, in nanoseconds: what the work costs, whatever else
the machine runs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from itertools import count
from pathlib import Path
from typing import Any

import httpx

from zest.bench._spawn import serving, zest_command
from zest.bench._workload import percentile
from zest.bench.dialects import _free_port, _start_upstream

ROUTES = """version: 1
models:
  upstream: {{engine: remote, base_url: "http://127.0.0.1:{port}/v1", model: canned, retries: 0}}
routes:
  plain: {{kind: chat, model: upstream, privacy: allow_remote, max_tokens: 16}}
  cached: {{kind: chat, model: upstream, privacy: allow_remote, max_tokens: 16,
            cache: {{ttl_s: 600, max_entries: 100000}}}}
clients:
  team:
    key_env: BENCH_TEAM_KEY
    tasks: [cached]
    limits: {{requests_per_minute: 10000000, tokens_per_minute: 10000000000, concurrent: 1000,
              tokens_per_day: 10000000000000}}
"""
PLAIN_KEY, TEAM_KEY = "sk-bench-plain", "sk-bench-team"
Call = Callable[[httpx.Client], None]


def _sender(base: str, key: str, task: str, fresh: bool) -> Call:
    numbers = count()
    headers = {"authorization": f"Bearer {key}"}

    def call(client: httpx.Client) -> None:
        text = f"Say hello, {next(numbers)}." if fresh else "Say hello."
        body = {"model": task, "messages": [{"role": "user", "content": text}],
                "max_tokens": 16, "temperature": 0}  # fmt: skip
        answer = client.post(f"{base}/v1/chat/completions", json=body, headers=headers)
        if answer.status_code != 200:
            raise RuntimeError(f"{task}: {answer.status_code} {answer.text}")
        if task == "cached" and answer.headers["x-zest-cache"] != ("miss" if fresh else "hit"):
            raise RuntimeError(f"{task}: x-zest-cache {answer.headers['x-zest-cache']}")

    return call


def _server_cpu_ns(pid: int) -> int:
    """The CPU time of every thread of the process so far (Linux schedstat, in ns)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return total


def _measure(
    client: httpx.Client, calls: dict[str, Call], rounds: int, pid: int
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Each path's latencies (ms), and its server CPU per request (ms), the paths taking
    turns one request at a time; CPU is read around each request."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    cpu: dict[str, int] = dict.fromkeys(calls, 0)
    for index in range(rounds + 20):
        names = list(calls)  # each starts a round in turn
        for name in names[index % len(names) :] + names[: index % len(names)]:
            used = _server_cpu_ns(pid)
            started = time.perf_counter()
            calls[name](client)
            if index >= 20:  # the first rounds warm every path up
                times[name].append((time.perf_counter() - started) * 1000)
                cpu[name] += _server_cpu_ns(pid) - used
    return times, {name: cpu[name] / 1e6 / rounds for name in calls}


def _report(
    times: dict[str, list[float]], cpu: dict[str, float], hits: list[float]
) -> dict[str, Any]:
    p50 = {name: percentile(sorted(values), 50) for name, values in times.items()}
    p95 = {name: percentile(sorted(values), 95) for name, values in times.items()}
    hit50, hit95 = percentile(sorted(hits), 50), percentile(sorted(hits), 95)
    paired = sorted(m - b for m, b in zip(times["limited_miss"], times["baseline"], strict=True))
    return {
        "requests_each": len(times["baseline"]),
        "p50_ms": {**{n: round(v, 3) for n, v in p50.items()}, "hit": round(hit50, 3)},
        "p95_ms": {**{n: round(v, 3) for n, v in p95.items()}, "hit": round(hit95, 3)},
        "miss_over_baseline_p50_ms": round(p50["limited_miss"] - p50["baseline"], 3),
        "miss_over_baseline_paired_median_ms": round(percentile(paired, 50), 3),
        "miss_to_baseline_p50_ratio": round(p50["limited_miss"] / p50["baseline"], 3),
        "hit_to_baseline_p50_ratio": round(hit50 / p50["baseline"], 3),
        "server_cpu_ms_per_request": {n: round(v, 3) for n, v in cpu.items()},
        "server_cpu_miss_over_baseline_ms": round(cpu["limited_miss"] - cpu["baseline"], 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zest.bench.clients", description=__doc__)
    parser.add_argument("--pairs", type=int, default=300, help="requests per path")
    parser.add_argument("--out", type=Path, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    upstream, port = _free_port(), _free_port()
    _start_upstream(upstream)
    with tempfile.TemporaryDirectory() as folder:
        routes = Path(folder) / "routes.yaml"
        routes.write_text(ROUTES.format(port=upstream))
        command = zest_command("serve", "--routes", str(routes), "--port", str(port))
        base = f"http://127.0.0.1:{port}"
        env = {**os.environ, "ZEST_LOG_LEVEL": "warning", "ZEST_API_KEYS": PLAIN_KEY}
        env["BENCH_TEAM_KEY"] = TEAM_KEY
        with (
            serving(command, f"{base}/api/v1/ready", Path(folder) / "zest.log", env=env) as zest,
            httpx.Client(timeout=60) as client,
        ):
            calls = {
                "baseline": _sender(base, PLAIN_KEY, "plain", fresh=True),
                "limited_miss": _sender(base, TEAM_KEY, "cached", fresh=True),
            }
            times, cpu = _measure(client, calls, args.pairs, zest.pid)
            hit = _sender(base, TEAM_KEY, "cached", fresh=False)
            client.post(  # kept once: every request after it is a hit
                f"{base}/v1/chat/completions",
                json={"model": "cached", "max_tokens": 16, "temperature": 0,
                      "messages": [{"role": "user", "content": "Say hello."}]},
                headers={"authorization": f"Bearer {TEAM_KEY}"},
            )  # fmt: skip
            hits = _measure(client, {"hit": hit}, args.pairs, zest.pid)[0]["hit"]
    report = _report(times, cpu, hits)
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
