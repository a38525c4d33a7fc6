"""Graceful shutdown of the real server (issue 13, item 3): on SIGTERM new requests get 503
`shutting_down` with Retry-After and readiness 503 at once, streams running finish within the
grace, the ones still running after it end with an error event (never a silent cut), and the
process exits 0 with no traceback in its log.

The streams are held open by upstreams the test controls (tests/upstream.py), not by a model's
speed (issue 33): one answers only when the test releases it, one never ends by itself. So
"finished within the grace" and "cut after it" hold on a machine of any speed, and "at once"
is proven by a grace far longer than the test waits for the process to exit."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Server, start_server
from tests.upstream import Behaviour, Proxy

GRACE_S = 10  # what the draining test waits out; the streams' own ends take milliseconds
FOREVER_S = 3600  # a grace no test waits for: an exit before it did not wait for the grace
HANG_S = 300  # a guard against a hung process, not a measure of speed


@pytest.fixture
def upstreams() -> Iterator[tuple[Proxy, Proxy]]:
    """`held` streams a word, then waits for the test's release to finish; `endless` streams
    until its client leaves."""
    release = threading.Event()
    held = Proxy("http://127.0.0.1:9/v1", Behaviour(reply="The end.", release=release))
    endless = Proxy("http://127.0.0.1:9/v1", Behaviour(endless="and then "))
    for proxy in (held, endless):
        proxy.start()
    yield held, endless
    release.set()
    for proxy in (held, endless):
        proxy.stop()


def serve(folder: Path, upstreams: tuple[Proxy, Proxy], grace_s: float) -> Server:
    held, endless = upstreams
    routes = folder / "routes.yaml"
    routes.write_text(
        "version: 1\n"
        "models:\n"
        f"  held: {{engine: remote, base_url: '{held.v1}', model: held}}\n"
        f"  endless: {{engine: remote, base_url: '{endless.v1}', model: endless}}\n"
        "routes:\n"
        "  short: {kind: chat, model: held, privacy: allow_remote, max_tokens: 64}\n"
        "  long: {kind: chat, model: endless, privacy: allow_remote, max_tokens: 100000}\n"
    )
    env = {"ZEST_EMULATE_DEVICES": "", "ZEST_SHUTDOWN_GRACE_S": str(grace_s)}
    return start_server(routes, folder / "zest.log", env)


class Streamed(threading.Thread):
    """A streamed chat read to its end: its SSE data lines, and when the first came."""

    def __init__(self, server: Server, task: str) -> None:
        super().__init__()
        self.url, self.task = f"{server.v1}/chat/completions", task
        self.events: list[str] = []
        self.first = threading.Event()

    def run(self) -> None:
        body = {"model": self.task, "messages": [{"role": "user", "content": "Go on."}]}
        with httpx.stream("POST", self.url, json={**body, "stream": True}, timeout=HANG_S) as got:
            for line in got.iter_lines():
                if line.startswith("data: "):
                    self.events.append(line.removeprefix("data: "))
                    self.first.set()


def started(server: Server, task: str) -> Streamed:
    stream = Streamed(server, task)
    stream.start()
    assert stream.first.wait(HANG_S), server.log()
    return stream


def test_sigterm_drains_refuses_new_work_and_exits_0(
    tmp_path: Path, upstreams: tuple[Proxy, Proxy]
) -> None:
    held, endless = upstreams
    server = serve(tmp_path, upstreams, GRACE_S)
    long, short = started(server, "long"), started(server, "short")
    server.process.send_signal(signal.SIGTERM)
    server.wait_for_log("shutting down: ", timeout=HANG_S)
    refused = httpx.post(
        f"{server.v1}/chat/completions",
        json={"model": "short", "messages": [{"role": "user", "content": "Hi"}]},
        timeout=HANG_S,
    )
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "shutting_down"
    assert refused.headers["retry-after"] == str(GRACE_S)
    assert refused.headers["x-request-id"].startswith("req_")
    ready = httpx.get(f"{server.v1}/ready", timeout=HANG_S)
    assert (ready.status_code, ready.json()["status"]) == (503, "stopping")
    assert httpx.get(f"{server.v1}/health", timeout=HANG_S).status_code == 200  # still live
    assert held.behaviour.release is not None
    held.behaviour.release.set()  # the short answer may end now, well within the grace
    short.join(HANG_S)
    assert short.events[-1] == "[DONE]"  # finished within the grace
    code = server.process.wait(timeout=GRACE_S + HANG_S)
    long.join(HANG_S)
    error = json.loads(long.events[-1])["error"]  # cut after the grace, with an error event
    assert error["code"] == "shutting_down"
    assert f"after the {GRACE_S}s grace" in error["message"]
    assert endless.left.is_set()  # its upstream stream was closed, not left running
    assert code == 0
    log = server.log()
    assert "Traceback" not in log
    assert "shutting down: ending 1 request(s) still running" in log


def test_sigterm_with_nothing_in_flight_exits_0_at_once(
    tmp_path: Path, upstreams: tuple[Proxy, Proxy]
) -> None:
    server = serve(tmp_path, upstreams, FOREVER_S)
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=HANG_S) == 0  # long before the grace: none waited
    log = server.log()
    assert "shutting down: 0 request(s) in flight" in log
    assert "ending" not in log
    assert "Traceback" not in log


def test_a_second_signal_ends_the_running_streams_at_once(
    tmp_path: Path, upstreams: tuple[Proxy, Proxy]
) -> None:
    _, endless = upstreams
    server = serve(tmp_path, upstreams, FOREVER_S)
    long = started(server, "long")
    server.process.send_signal(signal.SIGTERM)
    server.wait_for_log("shutting down: ", timeout=HANG_S)
    server.process.send_signal(signal.SIGINT)  # Ctrl-C while draining: no more waiting
    assert server.process.wait(timeout=HANG_S) == 0  # long before the grace
    long.join(HANG_S)
    assert json.loads(long.events[-1])["error"]["code"] == "shutting_down"
    assert endless.left.is_set()
