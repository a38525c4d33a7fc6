"""Starting a server as a child process (`zest serve`, or a peer such as llama_cpp.server) and
waiting until it answers, for the commands that drive one (zest bench) and for the tests."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from zest.errors import CommandError

__all__ = ["serving", "spawn", "stop", "zest_command"]

_POLL_S = 0.1


def zest_command(*args: str) -> list[str]:
    """`zest ARGS…` run by this interpreter (no reliance on the script being on PATH)."""
    return [sys.executable, "-m", "zest", *args]


@contextmanager
def serving(
    command: Sequence[str],
    probe_url: str,
    log: Path,
    *,
    name: str | None = None,
    timeout_s: float = 180.0,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `command` with its output in `log` until the block ends; enter the block once
    `probe_url` answers 200 (for zest, /api/v1/ready: the models are loaded). A process that
    exits first, or does not answer within `timeout_s`, is an error that names its log.
    `name` says which server it is in that error (default: the program's name)."""
    process = spawn(command, probe_url, log, name=name, timeout_s=timeout_s, env=env, cwd=cwd)
    try:
        yield process
    finally:
        stop(process)


def spawn(
    command: Sequence[str],
    probe_url: str,
    log: Path,
    *,
    name: str | None = None,
    timeout_s: float = 180.0,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start `command` and return it once `probe_url` answers 200 (see `serving`); the caller
    stops it with `stop`. A failure to answer stops it before raising."""
    with log.open("wb") as out:  # the child keeps its own descriptor
        process = subprocess.Popen(
            list(command), stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd
        )
    try:
        _wait_until_answering(process, name or Path(command[0]).name, probe_url, log, timeout_s)
    except BaseException:
        stop(process)
        raise
    return process


def _wait_until_answering(
    process: subprocess.Popen[bytes], name: str, probe_url: str, log: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise CommandError(f"{name} exited with status {process.returncode}: see {log}")
        try:
            if httpx.get(probe_url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(_POLL_S)
    raise CommandError(f"{name} did not answer {probe_url} within {timeout_s:.0f}s: see {log}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate, then kill if it has not exited within 15 s."""
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
