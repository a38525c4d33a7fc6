"""The shipped examples run against the real server, and the sample routes files are valid."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import REPO, Server, start_server, stop_server
from zest.router import load_routes

EXAMPLES = REPO / "examples"


# A guard against a hung example, not a measure of speed: the examples stream, with no cap of
# their own, and a loaded machine may take minutes over a summary.
HUNG_S = 900


def example_run(
    server: Server, name: str, *args: str, stdin: str = "", url: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The example against `server`: ZEST_URL is the server's root (or `url`: its /v1 works too)."""
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=HUNG_S,
        env={**os.environ, "ZEST_URL": url or server.base_url},
        check=False,
    )


def run_example(
    server: Server, name: str, *args: str, stdin: str = "", url: str | None = None
) -> str:
    result = example_run(server, name, *args, stdin=stdin, url=url)
    assert result.returncode == 0, result.stderr
    return result.stdout


# The server each `make serve` line of an example's docstring starts: its fixture here.
SERVERS = {
    "make serve": "server",
    "make serve ROUTES=examples/routes/extraction.yaml": "extraction",
    "make serve ROUTES=examples/routes/embeddings.yaml": "embeddings",
}


def docstring(example: Path) -> list[str]:
    return (ast.get_docstring(ast.parse(example.read_text())) or "").splitlines()


def documented_usage(example: Path) -> tuple[str, str]:
    """The `make serve …` line an example's docstring says to run first, and its own command."""
    lines = [line.split("  #")[0].strip() for line in docstring(example)]
    serve = [line for line in lines if line.startswith("make serve")]
    command = [
        line for line in lines if line.startswith(f".venv/bin/python examples/{example.name}")
    ]
    assert len(serve) == 1, f"{example.name}: its docstring names no one `make serve` line"
    assert len(command) == 1, f"{example.name}: its docstring shows no one command running it"
    return serve[0], command[0]


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("[!_]*.py")), ids=lambda p: p.name)
def test_every_example_runs_as_its_docstring_says(
    example: Path, request: pytest.FixtureRequest
) -> None:
    """After the two set-up commands, or with the one `make serve ROUTES=…` its first line
    names; the client finds the server by ZEST_PORT, as in `ZEST_PORT=9000 make serve`."""
    serve, command = documented_usage(example)
    assert serve in SERVERS, f"{example.name}: {serve!r} is not a server this test starts"
    if serve != "make serve":
        assert f"`{serve}`" in docstring(example)[0], (
            f"{example.name}: its first line must name `{serve}`"
        )
    running: Server = request.getfixturevalue(SERVERS[serve])
    env = {k: v for k, v in os.environ.items() if k not in ("ZEST_URL", "ZEST_HOST")}
    result = subprocess.run(
        ["bash", "-c", command.replace(".venv/bin/python", sys.executable, 1)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=HUNG_S,
        env={**env, "ZEST_PORT": running.base_url.rsplit(":", 1)[1]},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_chat_example_streams_with_usage(server: Server) -> None:
    out = run_example(server, "chat.py", "Name a fruit.", url=server.v1)
    assert out.rstrip().endswith("completion tokens]")


def test_autocomplete_example_echoes_and_continues(server: Server) -> None:
    assert run_example(server, "autocomplete.py", "def double(x):").startswith("def double(x):")


def test_summarize_example_reads_stdin(server: Server) -> None:
    assert run_example(server, "summarize.py", stdin="Rain fell all day in the city. " * 5).strip()


def test_summarize_example_shows_the_server_s_error(server: Server) -> None:
    """Empty stdin: the server's 400, as it said it, and exit 1 (not a traceback)."""
    result = example_run(server, "summarize.py", stdin="")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == "zest answered 400: the input is empty: send some text\n"


def test_agent_example_calls_its_tool_and_uses_the_result(server: Server) -> None:
    out = run_example(server, "agent.py", "What is 12.5 plus 30?")
    first = out.splitlines()[0]
    assert first.startswith("[tool] add(")
    arguments = json.loads(first.removeprefix("[tool] add(").rsplit(") = ", 1)[0])
    assert first.endswith(f" = {arguments['a'] + arguments['b']}")


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
    with httpx.Client(base_url=exposed.v1, timeout=600) as http:
        ids = [(m["id"], m["zest"]["type"]) for m in http.get("/models").json()["data"]]
        assert ids == [("chat", "task"), ("smollm2", "model")]
        for path, body in (
            ("/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}),
            ("/completions", {"prompt": "Hello"}),
        ):
            reply = http.post(path, json={"model": "smollm2", "max_tokens": 3, **body})
            assert reply.status_code == 200, reply.text
            assert reply.headers["x-zest-route"].startswith("task=smollm2; model=smollm2;")


@pytest.fixture(scope="module")
def extraction(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("extraction") / "zest.log"
    running = start_server(EXAMPLES / "routes" / "extraction.yaml", log)
    yield running
    stop_server(running)


def test_the_extraction_task_answers_in_its_schema_whatever_the_client_sends(
    extraction: Server,
) -> None:
    invoice = json.loads(run_example(extraction, "extract.py", "Invoice 7 from Bolt Ltd, 12 USD"))
    assert set(invoice) == {"number", "vendor", "total", "currency"}
    assert isinstance(invoice["total"], int | float)
    assert invoice["currency"] in {"EUR", "USD", "GBP"}
    # The route's format wins over the client's (json_object here): still the invoice schema.
    with openai.OpenAI(base_url=extraction.v1, api_key="u", max_retries=0, timeout=600) as client:
        answer = client.chat.completions.create(
            model="extract_invoice",
            messages=[{"role": "user", "content": "Invoice 9 from ACME, total 3 EUR"}],
            response_format={"type": "json_object"},
        )
    assert set(json.loads(answer.choices[0].message.content or "")) == set(invoice)


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("embeddings") / "zest.log"
    running = start_server(EXAMPLES / "routes" / "embeddings.yaml", log)
    yield running
    stop_server(running)


@pytest.fixture
def extraction_client(extraction: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=extraction.v1, api_key="u", max_retries=0, timeout=600) as made:
        yield made


def test_a_client_schema_constrains_a_plain_chat_task(extraction_client: openai.OpenAI) -> None:
    client = extraction_client
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 40},
            "country": {"type": "string", "maxLength": 40},
        },
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    place = {"name": "place", "schema": schema, "strict": True}
    fmt: Any = {"type": "json_schema", "json_schema": place}
    stream = client.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "Name a city and its country."}],
        response_format=fmt,
        temperature=0,
        stream=True,
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert set(json.loads(text)) == {"city", "country"}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "Hi"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"not": {}}},
            },
        )
    assert refused.value.param == "response_format.json_schema.schema"
    assert "not: zest cannot constrain an answer to not" in refused.value.message
