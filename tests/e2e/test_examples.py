"""The shipped examples run against the real server, and the sample routes files are valid."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import REPO, Server, start_server, stop_server
from zest.router import load_routes

EXAMPLES = REPO / "examples"


def run_example(server: Server, name: str, *args: str, stdin: str = "") -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ZEST_URL": server.v1},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_chat_example_streams_with_usage(server: Server) -> None:
    out = run_example(server, "chat.py", "Name a fruit.")
    assert out.rstrip().endswith("completion tokens]")


def test_autocomplete_example_echoes_and_continues(server: Server) -> None:
    assert run_example(server, "autocomplete.py", "def double(x):").startswith("def double(x):")


def test_summarize_example_reads_stdin(server: Server) -> None:
    assert run_example(server, "summarize.py", stdin="Rain fell all day in the city. " * 5).strip()


@pytest.mark.parametrize("path", sorted((EXAMPLES / "routes").glob("*.yaml")), ids=lambda p: p.name)
def test_sample_routes_files_are_valid(path: Path) -> None:
    assert load_routes(path).config.routes


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("exposed") / "zest.log"
    running = start_server(EXAMPLES / "routes" / "expose-models.yaml", log)
    yield running
    stop_server(running)


def test_exposed_models_are_addressable_by_id(exposed: Server) -> None:
    with httpx.Client(base_url=exposed.v1, timeout=60) as http:
        ids = [(m["id"], m["zest"]["type"]) for m in http.get("/models").json()["data"]]
        assert ids == [("chat", "task"), ("smollm2", "model")]
        for path, body in (
            ("/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}),
            ("/completions", {"prompt": "Hello"}),
        ):
            reply = http.post(path, json={"model": "smollm2", "max_tokens": 3, **body})
            assert reply.status_code == 200, reply.text
            assert reply.headers["x-zest-route"].startswith("task=smollm2; model=smollm2;")
