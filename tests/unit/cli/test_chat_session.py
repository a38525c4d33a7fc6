"""`zest chat`'s session without a server: what a cut turn sends along, and the served line."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from zest.gateway.cli._chat import Served, Session, Turn
from zest.gateway.cli._client import Gateway


@pytest.fixture
def session() -> Iterator[Session]:
    with httpx.Client() as client:
        yield Session(client, Gateway("http://127.0.0.1:9", None), "chat", "chat")


def test_a_cut_turn_goes_along_as_far_as_it_was_written(session: Session) -> None:
    session.asked, session.written = "Tell me a story.", ["Once upon", " a time"]
    assert session.cut()
    assert session.history == [Turn("Tell me a story.", "Once upon a time", cut=True)]
    assert not session.cut()  # kept once
    assert session._body("Go on.")["messages"] == [
        {"role": "user", "content": "Tell me a story."},
        {"role": "assistant", "content": "Once upon a time"},
        {"role": "user", "content": "Go on."},
    ]


def usage(completion: int, rate: float | None) -> dict[str, Any]:
    pipeline = {"decode_tokens_per_s": rate}
    return {"prompt_tokens": 30, "completion_tokens": completion, "pipeline": pipeline}


@pytest.mark.parametrize(
    ("completion", "rate", "shown"),
    [(1, 0.0, "—"), (2, 1.4, "—"), (3, 40.2, "—"), (4, 61.6, "62"), (40, None, "—")],
)
def test_a_rate_needs_a_few_tokens(completion: int, rate: float | None, shown: str) -> None:
    served = Served("task=chat; model=smollm2; device=cpu", usage(completion, rate))
    assert served.line() == f"[smollm2 on cpu; 30 in, {completion} out; {shown} tokens/s]"
