"""A completions `prompt` in each form OpenAI defines: a text, a list of texts (a batch: n
answers for each), and the forms zest refuses (token ids, a list with other values), each with
the exact 400 naming `prompt` (issue 33, item 6)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from zest.gateway.http._body_errors import validation_error
from zest.gateway.serving._requests import MAX_ANSWERS, CompletionRequest


def read(prompt: Any, **fields: Any) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "autocomplete", "prompt": prompt, **fields})


def refusal(prompt: Any, **fields: Any) -> tuple[str | None, str]:
    with pytest.raises(ValidationError) as refused:
        read(prompt, **fields)
    error = validation_error(refused.value, CompletionRequest)
    return error.param, error.message


def test_a_text_is_one_prompt_and_what_the_rules_read() -> None:
    request = read("def add(a, b):")
    assert request.prompts() == ["def add(a, b):"]
    assert request.routing_text() == "def add(a, b):"


def test_a_list_of_texts_is_a_batch_the_rules_read_joined_with_newlines() -> None:
    """Lemonade joins a prompt list's texts with newlines: a rule sees every prompt."""
    request = read(["alpha at the start", "omega at the end"], n=2)
    assert request.prompts() == ["alpha at the start", "omega at the end"]
    assert request.routing_text() == "alpha at the start\nomega at the end"


TOKEN_IDS = (
    "prompt: token ids are not taken as a prompt: a task's rules read text, and the models its "
    "routes reach each have their own vocabulary; send a text, or a list of texts (one answer "
    "each)"
)


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ([1, 2, 3], TOKEN_IDS),
        ([[1, 2], [3]], TOKEN_IDS),
        (
            ["alpha here", {"escalate": "now"}, "omega there"],
            "prompt: item 1 of the list is {'escalate': 'now'}, not a text: send a text, or a "
            "list of texts (one answer each)",
        ),
        (
            ["a text", 17],
            "prompt: item 1 of the list is 17, not a text: send a text, or a list of texts "
            "(one answer each)",
        ),
        (
            [],
            "prompt: the list of prompts is empty: send a text, or a list of texts (one answer "
            "each)",
        ),
    ],
    ids=["token-ids", "token-id-lists", "an-object", "mixed-with-an-id", "empty"],
)
def test_what_is_no_text_is_refused_naming_prompt(prompt: Any, message: str) -> None:
    assert refusal(prompt) == ("prompt", message)


def test_a_batch_asks_for_at_most_64_answers_counting_n() -> None:
    assert len(read(["x"] * 8, n=8).prompts()) * 8 == MAX_ANSWERS
    assert refusal(["x"] * 9, n=8) == (
        "prompt",
        "prompt: 9 prompts with n=8 ask for 72 answers, more than 64 per request: send fewer "
        "prompts per request",
    )
