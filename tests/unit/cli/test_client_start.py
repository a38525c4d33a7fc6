"""The client commands (`zest chat`, `run`, `eval`) talk to a running gateway: starting one
loads neither the server nor an engine (numpy and llama_cpp alone took seconds)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# What a client command must not import: the engines and what they bring, and the server.
SERVING = ("zest.engines", "llama_cpp", "onnxruntime_genai", "numpy", "zest.gateway.serving")

# Runs the real entry point, then says which of them it imported, as it exits.
PROBE = """
import atexit, sys
atexit.register(lambda: print("loaded:", *[name for name in {serving!r} if name in sys.modules]))
from zest.gateway.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _zest(*argv: str) -> subprocess.CompletedProcess[str]:
    probe = PROBE.format(serving=SERVING)
    return subprocess.run(
        [sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize(
    "argv",
    [
        ("chat", "--help"),
        ("run", "--help"),
        ("eval", "--help"),
        ("run", "chat", "hello", "--url", "http://127.0.0.1:9"),  # nothing listens: an error
        ("eval", "no-such-cases.jsonl"),
    ],
)
def test_a_client_command_imports_no_engine(argv: tuple[str, ...]) -> None:
    done = _zest(*argv)
    assert done.stdout.splitlines()[-1] == "loaded:", done.stderr


def test_zest_help_still_lists_every_command() -> None:
    done = _zest("--help")
    assert done.returncode == 0
    for command in ("serve", "check", "explain", "alerts", "init", "models", "eval", "route"):
        assert f"    {command} " in done.stdout
    for command in ("chat", "run", "bench"):
        assert f"    {command} " in done.stdout
