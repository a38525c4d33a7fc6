"""What a dialect costs over the OpenAI path for the same request: Ollama's /api/chat and
Anthropic's /v1/messages against /v1/chat/completions, through the same server, in one run.

    .venv/bin/python -m zest.bench.dialects [--pairs 300] [--out dialects.json]

The server's one route sends every request to a loopback upstream that answers at once with a
canned reply (no model: what is left is the gateway's own work, where the dialect's cost is),
so the figure is the translation of the body and of the answer, not generation. The two paths
are sent in alternation, one pair after the other (the machine's noise falls on both alike),
non-streamed and streamed; the report gives each path's p50 and p95 latency, the p50
difference in milliseconds and the ratio. The issue's bound: at most 1 ms p50 over OpenAI's.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from zest.bench._spawn import serving, zest_command
from zest.bench._workload import percentile

ROUTES = """version: 1
models:
  upstream: {{engine: remote, base_url: "http://127.0.0.1:{port}/v1", model: canned, retries: 0}}
routes:
  chat: {{kind: chat, model: upstream, privacy: allow_remote, max_tokens: 16}}
"""
MESSAGES = [{"role": "user", "content": "Say hello in one word."}]
_CHUNK = {"id": "chatcmpl-canned", "object": "chat.completion.chunk", "model": "canned"}
_EVENTS = [
    {**_CHUNK, "choices": [{"index": 0, "delta": {"content": "Hello"}}]},
    {**_CHUNK, "choices": [{"index": 0, "delta": {"content": "!"}}]},
    {**_CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {**_CHUNK, "choices": [], "usage": {"prompt_tokens": 6, "completion_tokens": 2}},
]
_CANNED = ("".join(f"data: {json.dumps(e)}\n\n" for e in _EVENTS) + "data: [DONE]\n\n").encode()


async def _canned(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An OpenAI-compatible upstream that answers every chat at once, streamed."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": _CANNED})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_upstream(port: int) -> None:
    import uvicorn

    config = uvicorn.Config(_canned, host="127.0.0.1", port=port, log_level="critical",
                            lifespan="off", access_log=False)  # fmt: skip
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, name="canned", daemon=True).start()
    while not server.started:
        time.sleep(0.01)


def _requests(base: str, stream: bool) -> dict[str, Callable[[httpx.Client], None]]:
    openai = {"model": "chat", "messages": MESSAGES, "max_tokens": 16, "stream": stream}
    ollama = {"model": "chat", "messages": MESSAGES, "options": {"num_predict": 16},
              "stream": stream}  # fmt: skip

    def send(url: str, body: dict[str, Any]) -> Callable[[httpx.Client], None]:
        def call(client: httpx.Client) -> None:
            with client.stream("POST", url, json=body) as answer:
                answer.read()
                if answer.status_code != 200:
                    raise RuntimeError(f"{url}: {answer.status_code} {answer.text}")

        return call

    anthropic = {"model": "chat", "messages": MESSAGES, "max_tokens": 16, "stream": stream}
    return {
        "openai": send(f"{base}/v1/chat/completions", openai),
        "ollama": send(f"{base}/api/chat", ollama),
        "anthropic": send(f"{base}/v1/messages", anthropic),
    }


def _measure(client: httpx.Client, calls: dict[str, Any], pairs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in calls}
    for index in range(pairs + 20):
        names = list(calls)  # each starts a round in turn: the noise falls on all alike
        order = names[index % len(names) :] + names[: index % len(names)]
        for name in order:
            started = time.perf_counter()
            calls[name](client)
            if index >= 20:  # the first pairs warm both paths up
                times[name].append((time.perf_counter() - started) * 1000)
    return times


def _summary(times: dict[str, list[float]]) -> dict[str, Any]:
    p50 = {name: percentile(sorted(values), 50) for name, values in times.items()}
    p95 = {name: percentile(sorted(values), 95) for name, values in times.items()}
    dialects = [name for name in times if name != "openai"]
    return {
        "requests_each": len(times["openai"]),
        "p50_ms": {name: round(value, 3) for name, value in p50.items()},
        "p95_ms": {name: round(value, 3) for name, value in p95.items()},
        **{f"{d}_over_openai_p50_ms": round(p50[d] - p50["openai"], 3) for d in dialects},
        **{f"{d}_to_openai_p50_ratio": round(p50[d] / p50["openai"], 3) for d in dialects},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zest.bench.dialects", description=__doc__)
    parser.add_argument("--pairs", type=int, default=300, help="requests per path and mode")
    parser.add_argument("--out", type=Path, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    upstream, port = _free_port(), _free_port()
    _start_upstream(upstream)
    with tempfile.TemporaryDirectory() as folder:
        routes = Path(folder) / "routes.yaml"
        routes.write_text(ROUTES.format(port=upstream))
        command = zest_command("serve", "--routes", str(routes), "--port", str(port))
        base = f"http://127.0.0.1:{port}"
        env = {**os.environ, "ZEST_LOG_LEVEL": "warning"}
        with (
            serving(command, f"{base}/api/v1/ready", Path(folder) / "zest.log", env=env),
            httpx.Client(timeout=60) as client,
        ):
            report = {
                mode: _summary(_measure(client, _requests(base, mode == "streamed"), args.pairs))
                for mode in ("non-streamed", "streamed")
            }
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
