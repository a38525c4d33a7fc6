"""Starting a server as a child process and waiting until it answers (zest bench's servers)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import httpx
import pytest

from zest.bench._spawn import serving, zest_command
from zest.errors import CommandError


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_block_runs_once_the_server_answers_and_the_server_stops_after(
    tmp_path: Path,
) -> None:
    port = free_port()
    command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    url = f"http://127.0.0.1:{port}/"
    with serving(command, url, tmp_path / "server.log", cwd=tmp_path) as process:
        assert httpx.get(url, timeout=300).status_code == 200
    assert process.poll() is not None


def test_a_server_that_exits_first_names_its_log(tmp_path: Path) -> None:
    log = tmp_path / "zest.log"
    command = zest_command("serve", "--routes", str(tmp_path / "missing.yaml"))
    with (
        pytest.raises(CommandError, match=rf"^zest serve exited with status 1: see {log}$"),
        serving(command, f"http://127.0.0.1:{free_port()}/", log, name="zest serve"),
    ):
        pass
    assert "file not found" in log.read_text()


def test_a_server_that_never_answers_is_stopped(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    url = f"http://127.0.0.1:{free_port()}/"
    with (
        pytest.raises(CommandError, match=r"did not answer .* within 1s"),
        serving(command, url, tmp_path / "log", timeout_s=1.0),
    ):
        pass
