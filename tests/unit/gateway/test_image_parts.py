"""Image parts are taken far enough to be routed: has_images reads every message (or input
item), the routing text is the text parts alone, and a remote engine forwards the parts as the
client sent them (a Responses input_image as the chat image_url part it stands for)."""

from __future__ import annotations

import json
from typing import Any

from zest.engines import CONTENT_PARTS
from zest.engines._remote import forwarded_message
from zest.gateway.serving import ChatRequest, ResponsesRequest
from zest.gateway.serving._generation import routing_text

IMAGE = {
    "type": "image_url",
    "image_url": {"url": "data:image/png;base64,iVBORw0K", "detail": "low"},
}
LOOK = [{"type": "text", "text": "What is"}, IMAGE, {"type": "text", "text": "in it?"}]


def chat(*contents: Any) -> ChatRequest:
    messages = [{"role": "user", "content": content} for content in contents]
    return ChatRequest.model_validate({"model": "chat", "messages": messages})


def test_an_image_in_an_earlier_message_counts_and_the_rules_read_the_last_text() -> None:
    request = chat(LOOK, "And the colour?")
    assert [m.has_images() for m in request.messages] == [True, False]
    assert routing_text(request.messages, None) == "And the colour?"
    assert request.messages[0].routing_text() == "What is\nin it?"
    assert request.messages[0].text() == "What isin it?"  # what a text-only model would read


def test_a_message_with_an_image_carries_its_parts_as_sent() -> None:
    sent = chat(LOOK).messages[0].as_sent()
    assert sent["content"] == "What isin it?"
    assert json.loads(sent[CONTENT_PARTS]) == LOOK
    assert CONTENT_PARTS not in chat([{"type": "text", "text": "hi"}]).messages[0].as_sent()


def test_the_remote_engine_forwards_the_parts_unchanged() -> None:
    sent = chat(LOOK).messages[0].as_sent()
    assert forwarded_message(sent) == {"role": "user", "content": LOOK}
    assert forwarded_message({"role": "user", "content": "hi"}) == {"role": "user", "content": "hi"}


def test_a_trimmed_message_keeps_its_images_after_its_trimmed_text() -> None:
    sent = {**chat(LOOK).messages[0].as_sent(), "content": "What [trimmed]"}
    assert forwarded_message(sent)["content"] == [{"type": "text", "text": "What [trimmed]"}, IMAGE]


def test_a_responses_input_image_is_routed_and_sent_as_a_chat_image_part() -> None:
    request = ResponsesRequest.model_validate(
        {
            "model": "chat",
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is in it?"},
                        {"type": "input_image", "image_url": "https://example.com/cat.png"},
                    ],
                },
                {"role": "user", "content": "And the colour?"},
            ],
        }
    )
    routing = request.routing_inputs()
    assert (routing.text, routing.has_images) == ("And the colour?", True)
    first = request.messages()[0].as_sent()
    assert json.loads(first[CONTENT_PARTS]) == [
        {"type": "text", "text": "What is in it?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
    ]


def test_a_request_without_images_says_so() -> None:
    assert not any(m.has_images() for m in chat("hi", [{"type": "text", "text": "x"}]).messages)
    plain = ResponsesRequest.model_validate({"model": "chat", "input": "hi"})
    assert not plain.routing_inputs().has_images
