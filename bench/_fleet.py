"""A fleet on loopback: several `zest serve` replicas sharing one routes file, behind HAProxy
running deploy/haproxy/haproxy.cfg itself (its ${...} variables set to this fleet's ports).
Used by tests/e2e/test_fleet.py and bench/affinity.py.

    with fleet(routes, folder) as running:
        httpx.post(f"{running.url}/v1/chat/completions", ...)   # through the balancer
        running.replicas[0].url                                 # one replica, directly
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from zest.bench._spawn import spawn, stop, zest_command
from zest.errors import CommandError

__all__ = [
    "HAPROXY_CONFIG",
    "REPLICA_COUNT",
    "Fleet",
    "Replica",
    "fleet",
    "free_port",
    "haproxy_binary",
    "haproxy_env",
    "wait_all_up",
]

REPO = Path(__file__).resolve().parents[1]
HAPROXY_CONFIG = REPO / "deploy" / "haproxy" / "haproxy.cfg"
# The config's server lines are "${ZEST_REPLICA_N-...}": the fleet has as many replicas.
REPLICA_COUNT = len(re.findall(r"\$\{ZEST_REPLICA_\d+-", HAPROXY_CONFIG.read_text()))
_READY_S = 180.0  # a shared machine: three models loading together may take a while


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def haproxy_binary() -> str | None:
    """Debian's haproxy (installed by `make haproxy`), on PATH or in /usr/sbin."""
    found = shutil.which("haproxy")
    if found:
        return found
    return "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None


def haproxy_env(bind_port: int, replica_ports: list[int], check_inter: str) -> dict[str, str]:
    """The variables deploy/haproxy/haproxy.cfg reads, for a fleet on loopback."""
    env = {"ZEST_LB_BIND": f"127.0.0.1:{bind_port}", "ZEST_LB_CHECK_INTER": check_inter}
    for index, port in enumerate(replica_ports, start=1):
        env[f"ZEST_REPLICA_{index}"] = f"127.0.0.1:{port}"
    return env


@dataclass
class Replica:
    name: str
    port: int
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class Fleet:
    replicas: list[Replica]
    port: int  # the balancer's
    balancer: subprocess.Popen[bytes]
    balancer_log: Path
    routes: Path
    env: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def replica(self, name: str) -> Replica:
        return next(r for r in self.replicas if r.name == name)

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> Replica:
        """Send `sig` to a replica (SIGKILL: no drain, its connections are reset)."""
        replica = self.replica(name)
        replica.process.send_signal(sig)
        return replica

    def restart(self, name: str, routes: Path | None = None) -> Replica:
        """Start the replica again, on its port and with its name (and the fleet's routes file
        unless `routes`), once the old one exited; the balancer's health check takes it back
        when it is ready. A start that fails raises and leaves the old entry in place."""
        old = self.replica(name)
        if old.alive():
            stop(old.process)
        new = _start_replica(routes or self.routes, name, old.port, old.log_path, self.env)
        self.replicas[self.replicas.index(old)] = new
        return new

    def balancer_log_text(self) -> str:
        return self.balancer_log.read_text(encoding="utf-8", errors="replace")


def _replica_env(base: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """This environment without the user's ZEST_* settings (keys, strict privacy, emulated
    devices would change what is measured), plus the fleet's own."""
    env = {k: v for k, v in base.items() if not k.startswith("ZEST_")}
    return {**env, "ZEST_EMULATE_DEVICES": "", "ZEST_WATCH": "true", **extra}


def _start_replica(
    routes: Path, name: str, port: int, log_path: Path, env: dict[str, str]
) -> Replica:
    command = zest_command(
        "serve", "--routes", str(routes), "--host", "127.0.0.1", "--port", str(port),
        "--replica-name", name,
    )  # fmt: skip
    probe = f"http://127.0.0.1:{port}/v1/ready"
    label = f"zest serve ({name})"
    process = spawn(command, probe, log_path, name=label, timeout_s=_READY_S, env=env)
    return Replica(name, port, log_path, process)


def _start_replicas(routes: Path, folder: Path, env: dict[str, str]) -> list[Replica]:
    """The replicas, loading their models together; any that fails stops the others."""
    names = [f"zest-{n}" for n in range(1, REPLICA_COUNT + 1)]
    with ThreadPoolExecutor(len(names)) as pool:
        futures = [
            pool.submit(_start_replica, routes, n, free_port(), folder / f"{n}.log", env)
            for n in names
        ]
    started = [f.result() for f in futures if f.exception() is None]
    failure = next((f.exception() for f in futures if f.exception() is not None), None)
    if failure is not None:
        for replica in started:
            stop(replica.process)
        raise failure
    return started


def _start_balancer(
    replicas: list[Replica], folder: Path, check_inter: str
) -> tuple[subprocess.Popen[bytes], int, Path]:
    binary = haproxy_binary()
    if binary is None:
        raise CommandError("haproxy is not installed: run `make haproxy`")
    port = free_port()
    env = {**os.environ, **haproxy_env(port, [r.port for r in replicas], check_inter)}
    log_path = folder / "haproxy.log"
    # -db: in the foreground, logging to stdout; the probe goes through to a replica.
    command = [binary, "-db", "-f", str(HAPROXY_CONFIG)]
    process = spawn(command, f"http://127.0.0.1:{port}/v1/ready", log_path, env=env)
    return process, port, log_path


@contextmanager
def fleet(
    routes: Path,
    folder: Path,
    *,
    env: Mapping[str, str] | None = None,
    check_inter: str = "200ms",
) -> Iterator[Fleet]:
    """REPLICA_COUNT replicas of `routes` (each ready: models loaded) and HAProxy in front;
    everything stopped at the end. Logs go to `folder`."""
    replica_env = _replica_env(os.environ, env or {})
    replicas = _start_replicas(routes, folder, replica_env)
    try:
        balancer, port, log_path = _start_balancer(replicas, folder, check_inter)
    except BaseException:
        for replica in replicas:
            stop(replica.process)
        raise
    running = Fleet(replicas, port, balancer, log_path, routes, replica_env)
    try:
        wait_all_up(running)
        yield running
    finally:
        stop(running.balancer)
        for replica in running.replicas:
            if replica.alive():
                stop(replica.process)


def wait_all_up(running: Fleet, timeout: float = 30.0) -> None:
    """Until round robin through the balancer has reached every replica."""
    deadline = time.monotonic() + timeout
    seen: set[str] = set()
    while seen != {r.name for r in running.replicas}:
        if time.monotonic() > deadline:
            raise CommandError(f"the balancer reached only {sorted(seen)}: see its log")
        answer = httpx.get(f"{running.url}/v1/ready", timeout=10)
        seen.add(answer.headers.get("x-zest-replica", ""))
