"""An auto tool-use answer's text, streamed as it comes (serving/_tool_text.py): whatever the
pieces the engine sends, what goes out is the start of what the whole answer reads as, and the
end adds only the rest; calls and a response in the client's own format wait for the end."""

from __future__ import annotations

import json
import random

import pytest

from zest.gateway.serving._tool_text import ResponseText
from zest.gateway.serving._tools import Tool, ToolUse

USE = ToolUse((Tool.model_validate({"type": "function", "function": {"name": "f"}}),), "auto")
TEXTS = [
    "Hello, world!",
    'She said "hi" \\ then left.\nNew line\ttab',
    "Unicode: é ü 漢字 and an emoji 😀 or two 🎉",
    "",
    "/slashes/ and \b\f control escapes",
]


def envelopes(text: str) -> list[str]:
    """The answer as the grammar lets a model write it: ASCII escapes or not, spaced or not."""
    return [
        json.dumps({"response": text}),
        json.dumps({"response": text}, ensure_ascii=False),
        '{ "response" :  ' + json.dumps(text) + " }",
    ]


def streamed(answer: str, cuts: list[int]) -> tuple[list[str], ResponseText]:
    reader, pieces, last = ResponseText(), [], 0
    for cut in [*cuts, len(answer)]:
        pieces.append(reader.feed(answer[last:cut]))
        last = cut
    return pieces, reader


@pytest.mark.parametrize("text", TEXTS)
def test_whatever_the_pieces_the_text_streams_as_the_whole_answer_reads(text: str) -> None:
    chance = random.Random(7)  # fixed: the same pieces every run
    for answer in envelopes(text):
        for _ in range(40):
            cuts = sorted(chance.sample(range(len(answer)), k=min(len(answer), 6)))
            pieces, reader = streamed(answer, cuts)
            whole = USE.read(answer).content
            assert whole == text
            assert "".join(pieces) + reader.rest(whole) == text
            assert reader.rest(whole) == ""  # the closing quote came: all of it went out
            assert reader.streaming


def test_a_text_cut_short_streams_what_the_cut_answer_reads_as() -> None:
    answer = json.dumps({"response": "Caf\u00e9 \U0001f600 done"})  # ASCII escapes
    for end in range(len(answer)):
        pieces, reader = streamed(answer[:end], list(range(end)))  # a character at a time
        cut = USE.read(answer[:end])
        sent = "".join(pieces)
        if reader.streaming:
            assert (cut.content or "").startswith(sent), (end, sent, cut)
            assert sent + reader.rest(cut.content) == (cut.content or "")
        else:
            assert sent == ""


@pytest.mark.parametrize(
    "answer",
    [
        '{"tool_calls": [{"name": "f", "arguments": {}}]}',
        '{"response": {"city": "Oslo"}}',  # the client's own format: sent whole at the end
    ],
)
def test_calls_and_formatted_responses_wait_for_the_end(answer: str) -> None:
    pieces, reader = streamed(answer, list(range(len(answer))))
    assert "".join(pieces) == ""
    assert not reader.streaming


def test_the_text_starts_once_the_answer_is_clearly_no_call() -> None:
    reader = ResponseText()
    assert reader.feed('{"resp') == ""
    assert reader.feed('onse": ') == ""
    assert reader.feed('"Hel') == "Hel"
    assert reader.feed("lo\\u00") == "lo"  # the escape waits for its end
    assert reader.feed('e9"}') == "é"
    assert reader.sent == "Hello"[:3] + "lo" + "é"
