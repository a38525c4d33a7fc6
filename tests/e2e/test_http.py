"""Raw HTTP against the real server: task endpoints, headers, SSE framing, errors, disconnects."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import REPO, Server
from zest.engines import Prompt, load_tokenizer
from zest.router import load_routes

HI = [{"role": "user", "content": "Say hello."}]


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return dict(body["error"])


def sse_payloads(response: httpx.Response) -> list[str]:
    return [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]


@pytest.mark.parametrize("prefix", ["/v1", "/api/v1"])
def test_both_prefixes_serve_the_api(http: httpx.Client, prefix: str) -> None:
    assert http.get(f"{prefix}/health").json()["status"] == "ok"
    reply = http.post(
        f"{prefix}/chat/completions", json={"model": "chat", "messages": HI, "max_tokens": 4}
    )
    assert reply.status_code == 200
    assert reply.json()["object"] == "chat.completion"


def test_the_route_header_says_what_served_the_request(http: httpx.Client) -> None:
    reply = http.post(
        "/v1/chat/completions", json={"model": "chat", "messages": HI, "max_tokens": 4}
    )
    assert reply.headers["x-zest-route"] == "task=chat; model=smollm2; device=cpu; engine=llamacpp"
    assert reply.headers["x-request-id"].startswith("req_")
    assert reply.json()["zest"] == {
        "task": "chat",
        "model": "smollm2",
        "device": "cpu",
        "engine": "llamacpp",
        "reason": "auto: found cpu; shortest queue, fastest first (queued: cpu 0)",
        "max_tokens": 4,
        # Every answer carries its routing decision: chat has no rules, so its own route served.
        "route_to": "chat",
        "matched_rule": None,
        "default_used": True,
        "outputs": {},
    }
    assert reply.headers["x-zest-plan"] == (
        "auto: found cpu; shortest queue, fastest first (queued: cpu 0)"
    )


def test_a_max_tokens_above_the_route_cap_is_clamped_visibly(http: httpx.Client) -> None:
    reply = http.post(
        "/v1/completions",
        json={"model": "autocomplete", "prompt": "Once upon", "max_tokens": 500, "temperature": 0},
    )
    assert reply.status_code == 200
    zest = reply.json()["zest"]
    assert (zest["max_tokens"], zest["max_tokens_clamped_from"]) == (64, 500)
    assert reply.json()["usage"]["completion_tokens"] <= 64


@pytest.mark.parametrize(
    ("task", "body", "obj"),
    [
        ("chat", {"messages": HI}, "chat.completion"),
        ("chat", {"input": "Say hello."}, "chat.completion"),
        ("summarization", {"input": "The cat sat on the mat all day."}, "chat.completion"),
        ("autocomplete", {"prompt": "def square(x):"}, "text_completion"),
        ("autocomplete", {"input": "def square(x):"}, "text_completion"),
    ],
)
def test_task_endpoints_answer_in_the_route_kind_shape(
    http: httpx.Client, task: str, body: dict[str, Any], obj: str
) -> None:
    reply = http.post(f"/api/v1/tasks/{task}", json={**body, "max_tokens": 8})
    assert reply.status_code == 200, reply.text
    assert reply.json()["object"] == obj
    assert reply.json()["model"] == task
    assert reply.headers["x-zest-route"].startswith(f"task={task};")


def test_the_route_system_prompt_and_examples_are_applied(http: httpx.Client) -> None:
    """The chat task's prompt is its system prompt, its example exchanges, then the input: as
    many tokens as those messages make with the model's own tokenizer."""
    routes = load_routes(REPO / "routes.yaml")
    route = routes.config.routes["chat"]
    assert route.examples  # (summarization has none: its examples leaked into summaries)
    text = "The cat sat on the mat all day."
    answer = http.post("/v1/tasks/chat", json={"input": text, "max_tokens": 1})
    by_hand: list[dict[str, str]] = [{"role": "system", "content": route.system_prompt or ""}]
    for example in route.examples:
        by_hand += [
            {"role": "user", "content": example.user},
            {"role": "assistant", "content": example.assistant},
        ]
    by_hand.append({"role": "user", "content": text})
    tokenizer = load_tokenizer("smollm2", routes.config.models["smollm2"], routes.base_dir)
    assert tokenizer is not None
    assert answer.json()["usage"]["prompt_tokens"] == len(Prompt.chat(by_hand).encode(tokenizer))
    other = http.post("/v1/tasks/summarization", json={"input": text, "max_tokens": 1})
    assert other.json()["usage"]["prompt_tokens"] != answer.json()["usage"]["prompt_tokens"]


def test_task_endpoint_streams(http: httpx.Client) -> None:
    reply = http.post("/v1/tasks/chat", json={"input": "Hi", "max_tokens": 6, "stream": True})
    assert reply.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(reply)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[-1]["choices"][0]["finish_reason"] in {"stop", "length"}


def test_a_completion_task_refuses_messages(http: httpx.Client) -> None:
    reply = http.post("/v1/tasks/autocomplete", json={"messages": HI})
    assert reply.status_code == 400
    assert error_of(reply)["message"] == (
        "task 'autocomplete' is a completion route: send 'prompt' (or 'input'), not messages"
    )


BAD_BODIES = [
    ({"model": "chat", "messages": []}, "messages: messages must hold at least one message"),
    (
        {"model": "chat", "messages": [{"role": "robot", "content": "x"}]},
        "messages.0.role: Input should be 'system', 'developer', 'user', 'assistant' or "
        "'tool', got 'robot'",
    ),
    (
        {"model": "chat", "messages": HI, "max_tokens": 0},
        "max_tokens: Input should be greater than or equal to 1, got 0",
    ),
    (
        {"model": "chat", "messages": HI, "max_tokens": -5},
        "max_tokens: Input should be greater than or equal to 1, got -5",
    ),
    (
        {"model": "chat", "messages": HI, "max_tokens": 10**9},
        "max_tokens is 1000000000 but model 'smollm2' has a context of 4096 tokens: "
        "ask for at most 4001",
    ),
    (
        {"model": "chat", "messages": HI, "temperature": "hot"},
        "temperature: Input should be a valid number, unable to parse string as a number, "
        "got 'hot'",
    ),
    (
        {"model": "chat", "messages": "hello"},
        "messages: Input should be a valid list, got 'hello': send a list (a JSON array)",
    ),
    (
        {"model": "chat", "messages": HI, "max_token": 5},
        "max_token: unknown parameter: did you mean 'max_tokens'?",
    ),
    (
        {"model": "chat", "messages": HI, "n": 9},
        "n: Input should be less than or equal to 8, got 9",
    ),
    ({"messages": HI}, "model: missing required parameter"),
    (
        {"model": "autocomplete", "messages": HI},
        "task 'autocomplete' is a completion route: call /v1/completions or POST "
        "/v1/tasks/autocomplete instead",
    ),
]


@pytest.mark.parametrize(("body", "message"), BAD_BODIES)
def test_bad_bodies_get_a_400_that_says_what_to_fix(
    http: httpx.Client, body: dict[str, Any], message: str
) -> None:
    reply = http.post("/v1/chat/completions", json=body)
    assert reply.status_code == 400
    error = error_of(reply)
    assert error["message"] == message
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize("raw", [b"{not json", b"", b"\xff\xfe"])
def test_invalid_json_is_a_400(http: httpx.Client, raw: bytes) -> None:
    reply = http.post(
        "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
    )
    assert reply.status_code == 400
    assert error_of(reply)["message"].startswith("the request body is not valid JSON: ")


def test_a_json_array_is_not_a_request(http: httpx.Client) -> None:
    reply = http.post("/v1/completions", json=[1, 2])
    assert error_of(reply)["message"] == "the request body must be a JSON object"


def test_an_unknown_task_is_a_404_listing_the_known_ones(http: httpx.Client) -> None:
    for reply in (
        http.post("/v1/chat/completions", json={"model": "chatt", "messages": HI}),
        http.post("/v1/tasks/chatt", json={"messages": HI}),
    ):
        assert reply.status_code == 404
        error = error_of(reply)
        assert error["code"] == "model_not_found"
        assert error["message"] == (
            "unknown task 'chatt': use one of autocomplete, chat, summarization "
            "(GET /v1/models lists them)"
        )


def test_a_prompt_longer_than_the_context_is_refused_with_the_numbers(http: httpx.Client) -> None:
    reply = http.post("/v1/completions", json={"model": "autocomplete", "prompt": "tok " * 9000})
    assert reply.status_code == 400
    error = error_of(reply)
    assert error["code"] == "context_length_exceeded"
    assert error["message"].startswith(
        "this model's maximum context length is 4096 tokens, but the prompt is "
    )
    assert http.get("/v1/health").status_code == 200


def test_unknown_endpoints_and_methods_get_openai_errors(http: httpx.Client) -> None:
    missing = http.get("/v1/nope")
    assert missing.status_code == 404
    assert error_of(missing)["message"] == (
        "no such endpoint: GET /v1/nope (see docs/http-api.md for the API)"
    )
    wrong = http.get("/v1/chat/completions")
    assert wrong.status_code == 405
    assert error_of(wrong)["message"] == "method GET is not allowed on /v1/chat/completions"


# SmolLM2's end tokens (<|endoftext|>, <|im_end|>) banned: the story cannot end before its
# max_tokens, so a client leaving early always finds it running, however fast the machine.
ENDLESS = {"0": -100, "2": -100}


def test_a_client_that_disconnects_cancels_its_generation(
    server: Server, http: httpx.Client
) -> None:
    body = {
        "model": "chat",
        "messages": [{"role": "user", "content": "Tell a long story."}],
        "max_tokens": 400,
        "temperature": 0,
        "logit_bias": ENDLESS,
        "stream": True,
    }
    with http.stream("POST", "/v1/chat/completions", json=body) as reply:
        request_id = reply.headers["x-request-id"]
        for received, _ in enumerate(reply.iter_lines()):
            if received >= 4:
                break
    line = server.wait_for_log(f"{request_id} task=chat")
    assert "finish=cancelled" in line
    produced = int(line.split("completion_tokens=")[1].split()[0])
    assert produced < 400
    # The model is free again: the next request is answered in full.
    after = http.post(
        "/v1/chat/completions",
        json={"model": "chat", "messages": HI, "max_tokens": 4},
        timeout=600,  # a hang guard, not a speed bound
    )
    assert after.status_code == 200
    assert after.json()["usage"]["completion_tokens"] >= 1


def test_a_client_that_gives_up_on_a_plain_request_cancels_it(server: Server) -> None:
    body = {
        "model": "chat",
        "messages": [{"role": "user", "content": "Tell a long story."}],
        "max_tokens": 397,  # names this request in the log
        "temperature": 0,
        "logit_bias": ENDLESS,
    }
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.v1}/chat/completions", json=body, timeout=httpx.Timeout(60, read=0.3))
    line = server.wait_for_log("max_tokens=397")
    assert "finish=cancelled" in line
    assert int(line.split("completion_tokens=")[1].split()[0]) < 397


@pytest.mark.parametrize(
    "path", ["/v1/chat/completions", "/v1/completions", "/v1/tasks/chat", "/v1/responses"]
)
def test_a_body_nested_thousands_deep_is_a_400_not_a_500(http: httpx.Client, path: str) -> None:
    for depth in (900, 5000):  # deep enough to walk, and deeper than the parser goes
        body = '{"model": "chat", "x": ' + "[" * depth + "]" * depth + "}"
        reply = http.post(path, content=body, headers={"content-type": "application/json"})
        assert reply.status_code == 400, (depth, reply.text)
    assert "nests too deeply" in error_of(reply)["message"]


CHAT_SURROGATE = '{"model": "chat", "messages": [{"role": "user", "content": "a\\ud800"}]}'


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", CHAT_SURROGATE, "messages.0.content"),
        ("/v1/completions", '{"model": "autocomplete", "prompt": "\\ud800"}', "prompt"),
        ("/v1/tasks/chat", '{"input": "x\\udfff"}', "input"),
    ],
)  # fmt: skip
def test_a_lone_surrogate_is_a_400_naming_the_field(
    http: httpx.Client, path: str, body: str, param: str
) -> None:
    reply = http.post(path, content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 400
    error = error_of(reply)
    assert error["param"] == param
    assert "lone UTF-16 surrogate" in error["message"]


def test_error_answers_carry_a_request_id(http: httpx.Client) -> None:
    for reply in (
        http.post("/v1/chat/completions", json={"model": "chat"}),  # 400
        http.post("/v1/chat/completions", json={"model": "nope", "messages": HI}),  # 404 task
        http.get("/v1/no-such-endpoint"),  # 404 route
    ):
        assert reply.status_code >= 400
        assert reply.headers["x-request-id"].startswith("req_")


@pytest.mark.parametrize("body", [{"input": ""}, {"input": "   "}, {"prompt": ""}])
def test_an_empty_task_input_is_a_400_not_invented_text(
    http: httpx.Client, body: dict[str, str]
) -> None:
    reply = http.post("/v1/tasks/summarization", json=body)
    assert reply.status_code == 400
    assert "is empty: send some text" in error_of(reply)["message"]


def test_a_prompt_too_long_by_its_length_alone_is_refused_without_counting_it(
    http: httpx.Client,
) -> None:
    """Six 7 MB prompts at once: each refused from its length (no token of SmolLM2 spans more
    than 81 bytes), never tokenized (seconds of CPU each), while the server keeps answering."""
    body = {"model": "autocomplete", "prompt": "lorem ipsum " * 600_000}

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=str(http.base_url), timeout=600) as client:
            return list(
                await asyncio.gather(
                    *(client.post("/v1/completions", json=body) for _ in range(6)),
                    client.get("/v1/health"),
                )
            )

    *refused, health = asyncio.run(burst())
    assert health.status_code == 200
    for reply in refused:
        assert reply.status_code == 400
        error = error_of(reply)
        assert error["code"] == "context_length_exceeded"
        assert error["message"] == (
            "the prompt is at least 88889 tokens (7200000 characters; no token of model "
            "'smollm2' spans more than 81 bytes), over the limit of 4096 (its context): shorten "
            "the messages or the prompt"
        )
