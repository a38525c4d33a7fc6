"""A chat route's prompt: its system prompt first (one system turn), then its few-shot
examples, then the request's own messages."""

from __future__ import annotations

from zest.gateway.serving import ChatMessage, build_prompt
from zest.router import RouteConfig


def test_examples_come_after_the_system_turn_and_before_the_request() -> None:
    route = RouteConfig.model_validate(
        {
            "kind": "chat",
            "model": "m",
            "system_prompt": "Be brief.",
            "examples": [{"user": "Capital of Spain?", "assistant": "Madrid."}],
        }
    )
    asked = [
        ChatMessage(role="system", content="Answer in English."),
        ChatMessage(role="user", content="Capital of Italy?"),
    ]
    assert list(build_prompt(route, "chat", asked, None).messages) == [
        {"role": "system", "content": "Be brief.\n\nAnswer in English."},
        {"role": "user", "content": "Capital of Spain?"},
        {"role": "assistant", "content": "Madrid."},
        {"role": "user", "content": "Capital of Italy?"},
    ]
