"""Benchmark: prompt-lookup speculation on routes.yaml's own `summarization` route, as it ships
(its system prompt, example and sampling), against the same route with
`speculative: {method: prompt_lookup}`: whether turning it on by default would pay.

    .venv/bin/python bench/lookup_on_default_route.py [--rounds 6] [--max-tokens 256]
                                                      [--out bench-out/lookup]

One zest serve on loopback serves both routes; the article is `zest bench`'s own
(~1,000 tokens); rounds alternate which route goes first, after one untimed round. Printed:
decode tokens/s p50 of each, their ratio and the share of drafted tokens accepted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import yaml

from zest.gateway.cli._bench_servers import free_port
from zest.gateway.cli._bench_workload import Sample, stream
from zest.gateway.cli._spawn import serving, zest_command

REPO = Path(__file__).resolve().parents[1]
ROUTES = ("summarization", "summarization-lookup")


def routes_file(folder: Path) -> Path:
    config = yaml.safe_load((REPO / "routes.yaml").read_text())
    route = config["routes"]["summarization"]
    config["routes"] = {
        ROUTES[0]: route,
        ROUTES[1]: {**route, "speculative": {"method": "prompt_lookup"}},
    }
    path = folder / "lookup-routes.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


async def measure(url: str, rounds: int, max_tokens: int) -> dict[str, list[Sample]]:
    article = resources.files("zest.gateway.cli").joinpath("bench_article.txt").read_text()
    runs: dict[str, list[Sample]] = {route: [] for route in ROUTES}
    async with httpx.AsyncClient(timeout=900) as client:
        for round_number in range(rounds + 1):  # round 0 untimed: the article's prefix cached
            for route in ROUTES if round_number % 2 else ROUTES[::-1]:
                body: dict[str, Any] = {  # no temperature: the route's own sampling
                    "model": route,
                    "messages": [{"role": "user", "content": article}],
                    "max_tokens": max_tokens,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
                sample = await stream(client, url, body)
                if round_number:
                    runs[route].append(sample)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, default=Path("bench-out/lookup"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = zest_command("serve", "--routes", str(routes_file(args.out)), "--port", str(port))
    root = f"http://127.0.0.1:{port}"
    with serving(command, f"{root}/api/v1/ready", args.out / "zest.log", name="zest serve"):
        runs = asyncio.run(measure(f"{root}/v1/chat/completions", args.rounds, args.max_tokens))
    plain, lookup = (statistics.median(s.decode_tps for s in runs[r]) for r in ROUTES)
    spec = [(s.usage or {}).get("speculative", {}) for s in runs[ROUTES[1]]]
    drafted = sum(d.get("drafted_tokens", 0) for d in spec)
    accepted = sum(d.get("accepted_tokens", 0) for d in spec)
    print(f"{ROUTES[0]}: decode p50 {plain:.1f} tok/s")
    print(f"{ROUTES[1]}: decode p50 {lookup:.1f} tok/s ({lookup / plain:.2f}x)")
    print(f"drafts accepted: {accepted}/{drafted} ({accepted / max(drafted, 1):.0%})")


if __name__ == "__main__":
    main()
