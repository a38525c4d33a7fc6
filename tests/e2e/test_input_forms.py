"""The request forms OpenAI's and Lemonade's clients send beyond the plain ones (issue 33,
item 6), against the real server with the default routes.yaml: a completions `prompt` that is
a list of prompts (n choices each, OpenAI's index order, usage summed), streamed or not, with
the official openai client; the forms refused, with raw HTTP; and the Responses API's bare
items (strings, input_text and input_image parts without a message around them).

The routing rules read these forms as Lemonade does: examples/routes/routing.cases.jsonl has
a case for each (run by tests/e2e/test_routing.py and test_route_test_cli.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import Server

# Prompts whose next tokens are far from any near-tie: the same greedy text whether a prompt is
# decoded beside another or alone (a near-tie may part two runs: docs/serving.md).
PROMPTS = ["1, 2, 3, 4, 5, 6,", "Monday, Tuesday, Wednesday,"]


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=600) as made:
        yield made


def singles(client: openai.OpenAI, max_tokens: int) -> list[Any]:
    """Each prompt's greedy completion on its own."""
    return [
        client.completions.create(
            model="autocomplete", prompt=prompt, max_tokens=max_tokens, temperature=0
        )
        for prompt in PROMPTS
    ]


def test_a_list_of_prompts_gets_n_choices_each_in_openai_s_order(client: openai.OpenAI) -> None:
    """Choice k continues prompt k // n (echo shows which), as that prompt alone would be
    continued (greedy); the usage counts each prompt once and every choice's tokens."""
    reply = client.completions.create(
        model="autocomplete", prompt=PROMPTS, n=2, max_tokens=3, temperature=0, echo=True
    )
    alone = singles(client, 3)
    assert [choice.index for choice in reply.choices] == [0, 1, 2, 3]
    for k, choice in enumerate(reply.choices):
        assert choice.text == PROMPTS[k // 2] + alone[k // 2].choices[0].text
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert reply.usage.completion_tokens == 2 * sum(a.usage.completion_tokens for a in alone)
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_a_list_of_prompts_streams_each_choice_under_its_index(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model="autocomplete", prompt=PROMPTS, max_tokens=3, temperature=0, echo=True,
        stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    texts, finished, usage = ["", ""], [], None
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            if choice.finish_reason:
                finished.append(choice.index)
        usage = chunk.usage or usage
    alone = singles(client, 3)
    assert sorted(finished) == [0, 1]
    assert texts == [prompt + a.choices[0].text for prompt, a in zip(PROMPTS, alone, strict=True)]
    assert usage is not None
    assert usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert usage.completion_tokens == sum(a.usage.completion_tokens for a in alone)


def test_a_list_of_one_prompt_is_that_prompt(http: httpx.Client) -> None:
    body = {"model": "autocomplete", "max_tokens": 4, "temperature": 0}
    listed = http.post("/v1/completions", json={**body, "prompt": ["The sky is"]})
    plain = http.post("/v1/completions", json={**body, "prompt": "The sky is"})
    assert listed.status_code == plain.status_code == 200, listed.text
    assert listed.json()["choices"] == plain.json()["choices"]


def refused(http: httpx.Client, prompt: Any, **extra: Any) -> dict[str, Any]:
    body = {"model": "autocomplete", "prompt": prompt, "max_tokens": 4, **extra}
    answer = http.post("/v1/completions", json=body)
    assert answer.status_code == 400, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", "prompt")
    return error


TOKEN_IDS = (
    "prompt: token ids are not taken as a prompt: a task's rules read text, and the models its "
    "routes reach each have their own vocabulary; send a text, or a list of texts (one answer "
    "each)"
)


@pytest.mark.parametrize("prompt", [[9906, 11, 1917], [[9906, 11], [1917]]], ids=["ids", "lists"])
def test_token_id_prompts_are_refused_saying_to_send_text(http: httpx.Client, prompt: Any) -> None:
    assert refused(http, prompt)["message"] == TOKEN_IDS


def test_a_list_with_something_else_than_text_is_refused_naming_the_item(
    http: httpx.Client,
) -> None:
    """Lemonade's rules skip such an item (a rule's decision would not see it), and OpenAI
    refuses it: here it is a 400 before anything is routed."""
    error = refused(http, ["alpha here", {"escalate": "now"}, "omega there"])
    assert error["message"] == (
        "prompt: item 1 of the list is {'escalate': 'now'}, not a text: send a text, or a list "
        "of texts (one answer each)"
    )


def test_a_batch_asks_for_at_most_64_answers(http: httpx.Client) -> None:
    error = refused(http, ["Hi"] * 9, n=8)
    assert error["message"] == (
        "prompt: 9 prompts with n=8 ask for 72 answers, more than 64 per request: send fewer "
        "prompts per request"
    )


def text_of(response: dict[str, Any]) -> str:
    """A response object's text (the openai client's output_text)."""
    return "".join(part["text"] for item in response["output"] for part in item["content"])


def test_responses_bare_strings_are_the_user_s_turn(http: httpx.Client) -> None:
    """The same prompt as one user message of their text, joined with newlines (its tokens
    say so; the answers' texts may part at a near-tie)."""
    body = {"model": "chat", "input": ["Name a colour.", "One word."], "max_output_tokens": 4}
    bare = http.post("/v1/responses", json=body)
    message = {**body, "input": [{"role": "user", "content": "Name a colour.\nOne word."}]}
    wrapped = http.post("/v1/responses", json=message)
    assert bare.status_code == wrapped.status_code == 200, bare.text
    assert text_of(bare.json())
    assert bare.json()["usage"]["input_tokens"] == wrapped.json()["usage"]["input_tokens"]


def test_responses_bare_input_text_parts_stream_like_a_message(http: httpx.Client) -> None:
    parts = [
        {"type": "input_text", "text": "Name a colour."},
        {"type": "input_text", "text": "One word."},
    ]
    body = {"model": "chat", "input": parts, "max_output_tokens": 4, "stream": True}
    with http.stream("POST", "/v1/responses", json=body) as answer:
        assert answer.status_code == 200
        events = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: ")]
    ended = ("response.completed", "response.incomplete")  # 4 tokens may cut the answer
    (done,) = [e["response"] for e in events if e["type"] in ended]
    message = {**body, "input": [{"role": "user", "content": "Name a colour.\nOne word."}]}
    wrapped = http.post("/v1/responses", json={**message, "stream": False})
    assert text_of(done)
    assert done["usage"]["input_tokens"] == wrapped.json()["usage"]["input_tokens"]
