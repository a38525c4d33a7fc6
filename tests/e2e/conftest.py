"""Start the real `zest serve` on a free loopback port with the real SmolLM2 model."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from tests.e2e.invariants import wait_released
from zest.bench._spawn import spawn, stop
from zest.errors import CommandError

REPO = Path(__file__).resolve().parents[2]
ZEST = Path(sys.executable).with_name("zest")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    base_url: str
    log_path: Path
    process: subprocess.Popen[bytes]
    headers: dict[str, str] = field(default_factory=dict)  # its admin key, when it has keys

    @property
    def v1(self) -> str:
        return f"{self.base_url}/v1"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_for_log(self, needle: str, timeout: float = 300.0) -> str:  # a hang guard
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log().splitlines():
                if needle in line:
                    return line
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} never appeared in the server log:\n{self.log()}")


def stream_chat(
    client: openai.OpenAI, model: str, messages: Any, max_tokens: int, **extra: Any
) -> tuple[list[ChatCompletionChunk], str]:
    """A streamed chat with the usage chunk at its end: its chunks and the text they carry."""
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=messages,
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            **extra,
        )
    )
    return chunks, "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def run_zest(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """The `zest` command to its end; `env` is the whole environment (default: this one).
    `timeout`: a hang guard, not a speed bound (a command may load models)."""
    return subprocess.run(
        [str(ZEST), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=os.environ if env is None else env,
        check=False,
    )


def spawn_until_answering(
    command: list[str], log_path: Path, probe_url: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start `command` with its output in `log_path`; return once `probe_url` answers 200.
    A process that exits, or never answers within ten minutes (a hang guard: a loaded
    machine's start and warm loads may take minutes), fails with its log."""
    try:
        return spawn(command, probe_url, log_path, timeout_s=600, env=env, cwd=REPO)
    except CommandError as exc:
        raise AssertionError(f"{exc}:\n{log_path.read_text()}") from exc


stop_process = stop


def start_server(
    routes: Path,
    log_path: Path,
    extra_env: dict[str, str] | None = None,
    *,
    until: str = "ready",
) -> Server:
    """`zest serve` on a free port, returned once ready (not just live): the warm start has
    loaded its models (or failed, and the process exits with the reason in its log).
    `until="health"`: once live; `until="warm"`: once the warm start is done, for a server
    with routes meant to be unservable here (its readiness stays 503)."""
    base_url = f"http://127.0.0.1:{free_port()}"
    command = [str(ZEST), "serve", "--routes", str(routes), "--port", base_url.rsplit(":", 1)[1]]
    env = {**os.environ, **(extra_env or {})}
    probe = "health" if until == "warm" else until
    process = spawn_until_answering(command, log_path, f"{base_url}/api/v1/{probe}", env)
    server = Server(base_url, log_path, process, _key_headers(env))
    RUNNING.append(server)
    if until == "warm":
        wait_warm(server)
    return server


def wait_warm(server: Server, timeout: float = 600.0) -> None:
    """Until the warm start is done (readiness may still be 503: unservable routes); the bound
    is a hang guard."""
    deadline = time.monotonic() + timeout
    while httpx.get(f"{server.v1}/ready", timeout=10).json()["status"] == "loading":
        if time.monotonic() > deadline:
            raise AssertionError(f"the warm start did not end within {timeout}s:\n{server.log()}")
        time.sleep(0.05)


def stop_server(server: Server) -> None:
    if server in RUNNING:
        RUNNING.remove(server)
    stop_process(server.process)


RUNNING: list[Server] = []  # started by start_server, not stopped by stop_server yet


def _key_headers(env: dict[str, str]) -> dict[str, str]:
    key = env.get("ZEST_ADMIN_KEY") or env.get("ZEST_API_KEYS", "").split(",")[0].strip()
    return {"authorization": f"Bearer {key}"} if key else {}


@pytest.fixture(autouse=True)
def released_after_the_test() -> Iterator[None]:
    """After every test, every server still running holds nothing: no generation in flight,
    every model idle, no KV cell held (tests/e2e/invariants.py), errors included."""
    yield
    for running in list(RUNNING):
        if running.process.poll() is None:
            wait_released(running.base_url, running.headers)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The default routes.yaml, served as `make serve` serves it."""
    log_path = tmp_path_factory.mktemp("server") / "zest.log"
    running = start_server(REPO / "routes.yaml", log_path)
    yield running
    stop_server(running)


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=600) as client:
        yield client


HOSTILE_KEY = "sk-hostile-api"
HOSTILE_ADMIN_KEY = "sk-hostile-admin"
HOSTILE_LIMIT = 65536  # ZEST_MAX_BODY_BYTES of the hostile server


@pytest.fixture(scope="session")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The server of the hostile-input suite (test_hostile.py, test_fuzz.py): keys on, a
    64 KiB body limit, every route capping max_tokens at 8 (tests/e2e/routes/hostile.yaml)."""
    env = {
        "ZEST_API_KEYS": HOSTILE_KEY,
        "ZEST_ADMIN_KEY": HOSTILE_ADMIN_KEY,
        "ZEST_MAX_BODY_BYTES": str(HOSTILE_LIMIT),
        "ZEST_CORS_ORIGINS": "",
    }
    routes = REPO / "tests" / "e2e" / "routes" / "hostile.yaml"
    running = start_server(routes, tmp_path_factory.mktemp("hostile") / "zest.log", env)
    yield running
    assert running.process.poll() is None, running.log()  # alive after everything it was sent
    stop_server(running)
