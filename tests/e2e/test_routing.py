"""Routing by content through the real server, with the official openai client: the example's
rules (examples/routes/routing.yaml: SmolLM2, Gemma 3 270M, MiniLM) decide real requests, and
every answer says so (x-zest-rule, x-zest-route, the body's zest object, the trace on demand,
streamed or not); privacy only tightens along a rule (a counting upstream is never reached);
a classifier that times out follows on_error; a reload with bad rules keeps the good table.

The example file gets, for these tests, a remote model (the counting proxy, answering 500) and
routes around it, and two routes whose classifier cannot answer in time."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.e2e.conftest import REPO, Server, start_server, stop_server
from tests.upstream import Behaviour, Proxy

EXAMPLE = REPO / "examples" / "routes" / "routing.yaml"
CASES = [
    json.loads(line)
    for line in (REPO / "examples" / "routes" / "routing.cases.jsonl").read_text().splitlines()
]
CLASSIFY = {"via": "classifier", "labels": ["math", "other"], "label": "math"}


def routes_for_tests(proxy: Proxy) -> dict[str, Any]:
    routes: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    routes["models"]["upstream"] = {
        "engine": "remote",
        "base_url": proxy.v1,
        "model": "upstream-model",
        "retries": 0,
    }
    routes["routes"].update(
        {
            # Remote first: a request of its own reaches the upstream (which fails: 500) and
            # falls back to SmolLM2.
            "chat-open": {
                "kind": "chat",
                "model": "upstream",
                "fallback": [{"model": "smollm2"}],
                "privacy": "allow_remote",
                "max_tokens": 8,
            },
            # local_only (the default): what it sends to chat-open keeps local_only.
            "private": {
                "kind": "chat",
                "model": "smollm2",
                "max_tokens": 8,
                "rules": [{"id": "open", "when": {"keywords_any": ["open"]}, "to": "chat-open"}],
            },
            # Every deterministic kind, none matching a long lorem ipsum.
            "heavy": {
                "kind": "chat",
                "model": "smollm2",
                "max_tokens": 8,
                "rules": [
                    {"id": "words", "when": {"keywords_any": ["def ", "zzz"]}, "to": "chat-local"},
                    {"id": "all", "when": {"keywords_all": ["lorem", "zzz"]}, "to": "chat-local"},
                    {"id": "redos", "when": {"regex": "^(\\w+\\s?)*$"}, "to": "chat-local"},
                    {
                        "id": "meta",
                        "when": {"metadata": {"key": "k", "exists": True}},
                        "to": "chat-local",
                    },
                    {
                        "id": "sizes",
                        "when": {"min_chars": 10, "max_chars": 100},
                        "to": "chat-local",
                    },
                    {"id": "tokens", "when": {"max_prompt_tokens": 100}, "to": "chat-local"},
                    {"id": "tools", "when": {"has_tools": True}, "to": "chat-local"},
                ],
            },
            "hurried": _hurried("no_match"),
            "hurried-default": _hurried("default_label"),
            # Images: zest's models read text; a rule sends them to a remote route (the proxy).
            "vision": {
                "kind": "chat",
                "model": "upstream",
                "privacy": "allow_remote",
                "max_tokens": 8,
            },
            "looks": _images_to("vision", privacy="allow_remote"),
            "looks-private": _images_to("vision", privacy="local_only"),
            "looks-local": _images_to("chat-local", privacy="allow_remote"),
        }
    )
    return routes


def _images_to(target: str, *, privacy: str) -> dict[str, Any]:
    rule = {"id": "images", "when": {"has_images": True}, "to": target}
    return {"kind": "chat", "model": "smollm2", "max_tokens": 8, "privacy": privacy,
            "rules": [rule]}  # fmt: skip


def _hurried(on_error: str) -> dict[str, Any]:
    """A classifier with no time to answer: its on_error decides."""
    classify = {**CLASSIFY, "prompt": "Question: {input}\nSubject: ", "timeout_s": 0.001}
    classify["on_error"] = on_error
    if on_error == "default_label":
        classify["default_label"] = "math"
    rule = {"id": "math", "when": {"classify": classify}, "to": "chat-math"}
    return {"kind": "chat", "model": "smollm2", "max_tokens": 8, "rules": [rule]}


@pytest.fixture(scope="module")
def proxy() -> Iterator[Proxy]:
    """A counting upstream that answers every request 500 (nothing behind it)."""
    running = Proxy("http://127.0.0.1:9/v1", Behaviour(status=500))
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, proxy: Proxy) -> Iterator[tuple[Server, Path]]:
    folder = tmp_path_factory.mktemp("routing")
    routes = folder / "routes.yaml"
    routes.write_text(yaml.safe_dump(routes_for_tests(proxy), sort_keys=False))
    env = {"ZEST_EMULATE_DEVICES": "", "ZEST_WATCH": "false"}
    running = start_server(routes, folder / "zest.log", env)
    yield running, routes
    stop_server(running)


@pytest.fixture(scope="module")
def server(served: tuple[Server, Path]) -> Server:
    return served[0]


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.v1, api_key="unused", timeout=300) as made:
        yield made


def served_task(headers: httpx.Headers) -> str:
    return headers["x-zest-route"].split(";")[0].removeprefix("task=")


def send(client: openai.OpenAI, task: str, request: dict[str, Any], **extra: Any) -> Any:
    """The request as a client sends it (chat, completions or responses); the raw answer."""
    body = {**request, **extra}
    if "messages" in body:
        chat_fields = {"messages", "tools", "metadata"}
        known = {k: v for k, v in body.items() if k in chat_fields}
        rest = {k: v for k, v in body.items() if k not in chat_fields}
        return client.chat.completions.with_raw_response.create(
            model=task, max_tokens=4, **known, extra_body=rest or None
        )
    if "prompt" in body:
        prompt = body.pop("prompt")
        return client.completions.with_raw_response.create(
            model=task, prompt=prompt, max_tokens=4, extra_body=body or None
        )
    text = body.pop("input")
    return client.responses.with_raw_response.create(
        model=task, input=text, max_output_tokens=16, extra_body=body or None
    )


def zest_of(parsed: Any) -> dict[str, Any]:
    extra = parsed.model_extra or {}
    found: dict[str, Any] = extra["zest"]
    return found


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if "waiting" not in c],  # a real queue: test_overflow_goes_to_the_spare
    ids=lambda c: c["name"],
)
def test_each_condition_kind_decides_a_real_request(
    client: openai.OpenAI, case: dict[str, Any]
) -> None:
    raw = send(client, case["task"], case["request"])
    expect = case["expect"]
    assert raw.headers["x-zest-rule"] == expect["rule"]
    assert served_task(raw.headers) == expect["route"]
    zest = zest_of(raw.parse())
    assert zest["route_to"] == expect["route"]
    assert zest["matched_rule"] == (None if expect["rule"] == "default" else expect["rule"])
    assert zest["default_used"] is (expect["rule"] == "default")
    assert zest["outputs"] == expect.get("outputs", zest["outputs"])
    assert "trace" not in zest  # only when asked for


def test_the_trace_is_there_when_the_body_asks(client: openai.OpenAI) -> None:
    raw = send(client, "chat", {"messages": [{"role": "user", "content": "hi there"}]},
               route_trace=True)  # fmt: skip
    zest = zest_of(raw.parse())
    assert zest["matched_rule"] == "brief"
    trace = zest["trace"]
    # Each entry names its kind (as Lemonade's traces do) beside zest's text of it.
    assert all(entry["condition"].startswith(f"{entry['kind']}: ") for entry in trace)
    assert [entry["kind"] for entry in trace] == [
        "metadata",
        "queued_over",
        "has_tools",
        "keywords_any",
        "regex",
        "similar_to",
        "keywords_all",
        "min_prompt_tokens",
        "max_chars",
    ]
    assert [entry["result"] for entry in trace] == [False] * 8 + [True]
    similar = trace[5]
    assert similar["condition"] == (
        'similar_to: {"via": "embed", "timeout_s": 10.0, "label": "code", "min_score": 0.6}'
    )
    assert set(similar) == {"condition", "kind", "result", "score", "cached"}
    assert -1.0 <= similar["score"] < 0.6


def test_the_trace_is_there_when_the_header_asks(server: Server) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi there"}],
            "max_tokens": 4}  # fmt: skip
    answer = httpx.post(
        f"{server.v1}/chat/completions",
        json=body,
        headers={"x-zest-route-trace": "1"},
        timeout=600,
    )
    assert answer.status_code == 200, answer.text
    zest = answer.json()["zest"]
    assert zest["trace"][-1] == {"condition": "max_chars: 24", "kind": "max_chars", "result": True}
    # A model-backed result is cached by condition and text: the second time says so.
    assert zest["trace"][5]["cached"] is True


def test_a_streamed_answer_carries_the_decision_on_its_first_chunk(
    client: openai.OpenAI,
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="chat",
        messages=[{"role": "user", "content": "Why does my def f(): loop?"}],
        max_tokens=4,
        stream=True,
        extra_body={"route_trace": True},
    )
    assert raw.headers["x-zest-rule"] == "code"
    assert served_task(raw.headers) == "chat-coder"
    chunks = list(raw.parse())
    first = zest_of(chunks[0])
    assert {k: first[k] for k in ("route_to", "matched_rule", "default_used", "outputs")} == {
        "route_to": "chat-coder",
        "matched_rule": "code",
        "default_used": False,
        "outputs": {"team": "code"},
    }
    assert first["trace"][-1] == {
        "condition": 'keywords_any: ["def ", "stack trace", "```"]',
        "kind": "keywords_any",
        "result": True,
    }
    assert first["task"] == "chat-coder"
    # Between the first and the last chunk (which has the whole zest object), none.
    ends = [i for i, c in enumerate(chunks) if c.choices and c.choices[0].finish_reason]
    assert all(not (c.model_extra or {}).get("zest") for c in chunks[1 : ends[0]])
    assert zest_of(chunks[ends[0]])["matched_rule"] == "code"


def test_a_streamed_completion_carries_it_too(client: openai.OpenAI) -> None:
    raw = client.completions.with_raw_response.create(
        model="autocomplete", prompt="import os\n", max_tokens=4, stream=True
    )
    assert raw.headers["x-zest-rule"] == "code"
    assert served_task(raw.headers) == "autocomplete-code"
    chunks = list(raw.parse())
    assert zest_of(chunks[0])["route_to"] == "autocomplete-code"


def test_overflow_goes_to_the_spare_model_while_the_queue_is_long(
    server: Server, client: openai.OpenAI
) -> None:
    """chat's model has one slot: with requests waiting for it, queued_over sends the next
    one to the spare model."""
    busy = [threading.Thread(target=_long_answer, args=(server, n), daemon=True) for n in range(4)]
    for thread in busy:
        thread.start()
    try:
        _until_overflow(server)
        raw = send(client, "chat", {"messages": [{"role": "user", "content": "Tell me a story."}]},
                   route_trace=True)  # fmt: skip
    finally:
        for thread in busy:
            thread.join(timeout=300)
    assert raw.headers["x-zest-rule"] == "overflow"
    assert served_task(raw.headers) == "chat-spare"
    zest = zest_of(raw.parse())
    assert zest["outputs"] == {"reason": "overflow"}
    assert zest["trace"][1] == {
        "condition": 'queued_over: {"route": "chat", "requests": 1}',
        "kind": "queued_over",
        "result": True,
    }


def _long_answer(server: Server, number: int) -> None:
    body = {
        "model": "chat-local",
        "messages": [{"role": "user", "content": f"Count slowly from {number} to 500."}],
        "max_tokens": 64,
    }
    httpx.post(f"{server.v1}/chat/completions", json=body, timeout=300)


def _until_overflow(server: Server) -> None:
    request = {"messages": [{"role": "user", "content": "Tell me a story."}]}
    deadline = time.monotonic() + 300  # a hang guard, not a speed bound
    while time.monotonic() < deadline:
        explained = explain(server, "chat", request).json()
        if explained["decision"]["matched_rule"] == "overflow":
            return
        time.sleep(0.05)
    raise AssertionError("the queue never grew past one waiting request")


def explain(server: Server, task: str, request: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.v1}/explain", json={"task": task, "request": request}, timeout=600)


# Privacy only tightens along a rule


def test_a_local_only_request_sent_to_a_remote_route_never_leaves(
    server: Server, client: openai.OpenAI, proxy: Proxy
) -> None:
    proxy.requests.clear()
    request = {"messages": [{"role": "user", "content": "open the pod bay doors"}]}
    raw = send(client, "private", request)
    assert raw.headers["x-zest-rule"] == "open"
    assert raw.headers["x-zest-route"].startswith("task=chat-open; model=smollm2;")
    assert zest_of(raw.parse())["route_to"] == "chat-open"
    assert proxy.requests == []  # the upstream was never reached
    plan = explain(server, "private", request).json()
    assert plan["decision"]["route_to"] == "chat-open"
    assert plan["route"]["privacy"] == "local_only"
    assert [a["model"] for a in plan["attempts"]] == ["smollm2"]
    assert plan["removed"] == [
        "remote: the request came from route 'private', which is local_only, and keeps that "
        "privacy here (route 'chat-open' allows remote attempts; privacy only tightens along a "
        "rule)"
    ]
    assert proxy.requests == []
    # The same route, asked directly, does try its remote model (and falls back: it fails).
    direct = send(client, "chat-open", request)
    assert direct.headers["x-zest-route"].startswith("task=chat-open; model=smollm2;")
    assert len(proxy.requests) == 1


# Model-backed conditions that fail


@pytest.mark.parametrize(
    ("task", "rule", "route", "label"),
    [("hurried", "default", "hurried", None), ("hurried-default", "math", "chat-math", "math")],
)
def test_a_classifier_that_times_out_follows_on_error_and_says_so(
    client: openai.OpenAI, task: str, rule: str, route: str, label: str | None
) -> None:
    request = {"messages": [{"role": "user", "content": "What is 6 times 7?"}]}
    raw = send(client, task, request, route_trace=True)
    assert raw.headers["x-zest-rule"] == rule
    assert served_task(raw.headers) == route
    [entry] = zest_of(raw.parse())["trace"]
    assert entry["condition"].startswith('classify: {"via": "classifier", "timeout_s": 0.001,')
    assert entry["error"] == "timed out after 0.001 s"
    assert entry["result"] is (label is not None)
    assert entry.get("label") == label
    assert entry["cached"] is False  # a failure is not cached: the next request tries again


# Images: routed by has_images, forwarded unchanged where privacy allows, refused by text-only

IMAGE = {
    "type": "image_url",
    "image_url": {"url": "data:image/png;base64,iVBORw0K", "detail": "low"},
}
LOOK = [
    {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"}, IMAGE]},
    {"role": "assistant", "content": "A cat."},
    {"role": "user", "content": "What colour is it?"},  # the last message has no image
]


@pytest.fixture
def replying(proxy: Proxy) -> Iterator[Proxy]:
    """The proxy answering a short text (as an upstream that reads images would), counted."""
    proxy.requests.clear()
    proxy.behaviour = Behaviour(reply="Orange.")
    yield proxy
    proxy.behaviour = Behaviour(status=500)


def test_an_image_in_any_message_is_forwarded_unchanged_to_the_remote_route(
    client: openai.OpenAI, replying: Proxy
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="looks", messages=LOOK, max_tokens=4, extra_body={"route_trace": True}
    )
    assert raw.headers["x-zest-rule"] == "images"
    assert raw.headers["x-zest-route"].startswith("task=vision; model=upstream; device=remote")
    answer = raw.parse()
    assert answer.choices[0].message.content == "Orange."
    assert zest_of(answer)["trace"] == [
        {"condition": "has_images: true", "kind": "has_images", "result": True}
    ]
    [received] = replying.requests
    assert received.body["messages"] == LOOK


def test_a_responses_input_image_is_forwarded_as_the_chat_part_it_stands_for(
    client: openai.OpenAI, replying: Proxy
) -> None:
    parts = [
        {"type": "input_text", "text": "What is in this picture?"},
        {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "low"},
    ]
    raw = client.responses.with_raw_response.create(
        model="looks", input=[{"role": "user", "content": parts}], max_output_tokens=16
    )
    assert raw.headers["x-zest-rule"] == "images"
    assert raw.parse().output_text == "Orange."
    [received] = replying.requests
    assert received.body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png",
                                                    "detail": "low"}},
            ],
        }
    ]  # fmt: skip


def test_bare_input_parts_are_a_user_turn_with_its_image_forwarded(
    client: openai.OpenAI, replying: Proxy
) -> None:
    """Lemonade's other Responses shape, content parts without a message around them: the
    image is seen by has_images and forwarded as the chat part of one user turn (issue 33)."""
    parts = [
        {"type": "input_text", "text": "What is in this picture?"},
        {"type": "input_image", "image_url": "https://example.com/cat.png"},
    ]
    raw = client.responses.with_raw_response.create(
        model="looks",
        input=parts,
        max_output_tokens=16,  # type: ignore[arg-type]
    )
    assert raw.headers["x-zest-rule"] == "images"
    assert raw.parse().output_text == "Orange."
    [received] = replying.requests
    assert received.body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            ],
        }
    ]


def test_an_image_sent_to_a_text_only_route_is_a_400_naming_it(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="looks-local", messages=LOOK, max_tokens=4)
    answer = refused.value.response
    assert answer.headers["x-zest-rule"] == "images"  # refused after the rule: it says so
    assert answer.headers["x-zest-route"] == "task=chat-local"
    body = answer.json()
    assert body["error"]["param"] == "images"
    assert body["error"]["message"].startswith(
        "task 'chat-local' has no attempt that can honour images: smollm2 (llamacpp) cannot "
        "honour images: remove images from the request"
    )
    assert {k: body["zest"][k] for k in ("task", "matched_rule", "outputs")} == {
        "task": "chat-local",
        "matched_rule": "images",
        "outputs": {},
    }


def test_an_image_of_a_local_only_route_never_leaves(server: Server, replying: Proxy) -> None:
    body = {"model": "looks-private", "messages": LOOK, "max_tokens": 4}
    answer = httpx.post(f"{server.v1}/chat/completions", json=body, timeout=600)
    assert answer.status_code == 503, answer.text
    assert answer.headers["x-zest-rule"] == "images"
    assert answer.json()["error"]["message"] == (
        "route 'vision' runs only on the remote model 'upstream', which is left out: remote: "
        "the request came from route 'looks-private', which is local_only, and keeps that "
        "privacy here (route 'vision' allows remote attempts; privacy only tightens along a "
        "rule): add a local model to routes.vision.fallback, or set "
        "routes.looks-private.privacy: allow_remote"
    )
    assert replying.requests == []  # privacy only tightens: the upstream was never reached


# POST /v1/explain


def test_explain_shows_the_decision_its_trace_and_the_chosen_routes_plan(server: Server) -> None:
    request = {"prompt": "def add(a, b):", "metadata": {"editor": "vim"}}
    answer = explain(server, "autocomplete", request)
    assert answer.status_code == 200, answer.text
    explained = answer.json()
    assert explained["requested_task"] == "autocomplete"
    assert explained["endpoint"] == "/v1/completions"
    assert explained["decision"] == {
        "route_to": "autocomplete-code",
        "matched_rule": "code",
        "default_used": False,
        "outputs": {},
        "trace": [
            {
                "condition": "regex: '^\\s*(def|class|import|from) '",  # as the file writes it
                "kind": "regex",
                "result": True,
            },
        ],
    }
    assert explained["task"] == "autocomplete-code"
    assert explained["route"]["model"] == "gemma"
    assert explained["prompt_tokens"] > 0
    assert [a["model"] for a in explained["attempts"]] == ["gemma"]


def test_explain_plans_with_what_the_request_asks_of_an_engine(server: Server) -> None:
    """An image routed to a text-only route: explain shows the 400 serving would answer, not
    attempts that would be left out (the planner is given the request's needs, as in serving)."""
    answer = explain(server, "looks-local", {"messages": LOOK})
    assert answer.status_code == 200, answer.text
    explained = answer.json()
    assert explained["decision"]["route_to"] == "chat-local"
    assert explained["attempts"] == []
    assert explained["error"]["param"] == "images"
    assert "cannot honour images" in explained["error"]["message"]


def test_explain_refuses_what_it_cannot_decide(server: Server) -> None:
    unknown = explain(server, "nope", {"prompt": "x"})
    assert unknown.status_code == 404
    bad = explain(server, "chat", {"messages": [{"role": "robot", "content": "x"}]})
    assert bad.status_code == 400
    error = bad.json()["error"]
    assert error["param"] == "request.messages.0.role"
    assert error["message"].startswith("request.messages.0.role: Input should be ")
    kind = explain(server, "autocomplete", {"messages": [{"role": "user", "content": "x"}]})
    assert kind.status_code == 400  # a completion route takes no messages


# Reload


def test_a_reload_with_bad_rules_keeps_the_last_good_table(
    served: tuple[Server, Path], client: openai.OpenAI
) -> None:
    server, routes = served
    good = routes.read_text()
    unknown = yaml.safe_load(good)
    unknown["routes"]["chat"]["rules"][0]["to"] = "chat-locl"
    backreference = yaml.safe_load(good)
    backreference["routes"]["chat"]["rules"][1]["when"] = {"regex": "(a)\\1"}
    errors = [reload_refused(server, routes, bad, good) for bad in (unknown, backreference)]
    assert errors[0] == [
        f"{routes}: routes.chat.rules.0.to: unknown route 'chat-locl': did you mean 'chat-local'?"
    ]
    [message] = errors[1]
    assert message.startswith(
        f"{routes}: routes.chat.rules.1.when.regex: regex '(a)\\1' is not one RE2 runs ("
    )
    assert message.endswith("so backreferences and lookarounds are out; rewrite it without them")
    request = {
        "messages": [{"role": "user", "content": "hello"}],
        "metadata": {"consent": "denied"},
    }
    raw = send(client, "chat", request)
    assert raw.headers["x-zest-rule"] == "private-stays-local"
    assert served_task(raw.headers) == "chat-local"


def reload_refused(server: Server, routes: Path, bad: dict[str, Any], good: str) -> list[str]:
    routes.write_text(yaml.safe_dump(bad, sort_keys=False))
    try:
        refused = httpx.post(f"{server.v1}/admin/reload", timeout=600)
    finally:
        routes.write_text(good)
    assert refused.status_code == 422, refused.text
    errors: list[str] = refused.json()["error"]["errors"]
    return errors


# Bad input: routed by the rules' semantics, or refused, never a 5xx


def test_metadata_of_ten_thousand_keys_is_refused_by_openais_limit(server: Server) -> None:
    metadata = {f"k{n}": "v" for n in range(10_000)}
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "metadata": metadata}
    answer = httpx.post(f"{server.v1}/chat/completions", json=body, timeout=600)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "metadata"
    assert error["message"] == "metadata: metadata holds at most 16 keys, got 10000"


def test_a_prompt_of_megabytes_is_decided_then_refused_as_too_long(server: Server) -> None:
    """3 MB: every deterministic rule reads it (a regex that backtracks elsewhere among them),
    none matches, and the task's own route refuses it as over its context."""
    text = "lorem ipsum dolor sit amet " * 110_000 + "!"
    body = {"model": "heavy", "messages": [{"role": "user", "content": text}], "max_tokens": 1}
    answer = httpx.post(
        f"{server.v1}/chat/completions",
        json=body,
        headers={"x-zest-route-trace": "1"},
        timeout=300,
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "over the limit of" in error["message"]
    # Refused after the rules decided: the error says what they decided, as an answer does.
    assert answer.headers["x-zest-rule"] == "default"
    assert answer.headers["x-zest-route"] == "task=heavy"
    zest = answer.json()["zest"]
    assert {k: zest[k] for k in ("task", "route_to", "matched_rule", "default_used")} == {
        "task": "heavy",
        "route_to": "heavy",
        "matched_rule": None,
        "default_used": True,
    }
    kinds = {entry["kind"] for entry in zest["trace"]}
    assert kinds == {"keywords_any", "keywords_all", "regex", "metadata", "min_chars",
                     "max_chars", "max_prompt_tokens", "has_tools"}  # fmt: skip
