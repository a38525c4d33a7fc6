"""With tools and tool_choice auto, a text answer streams as it comes, on chat completions and
on the Responses API, once it is clearly not a tool call; calls still go whole at the end. And
a Responses message cut short is `incomplete`, as its response is (issue 32, item 8).

A scripted engine holds the answer open half-way: the text sent so far must be out before the
rest is generated (no timing: the rest only comes once the test has seen the start)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from tests.unit.gateway.generations import generation
from zest.engines import Delta
from zest.gateway.http._responses import sse_events
from zest.gateway.http._responses_api import ResponseShape
from zest.gateway.serving import ResponsesRequest
from zest.gateway.serving._generation import Generation

T = TypeVar("T")
DONE = b"data: [DONE]"
REQUEST = ResponsesRequest.model_validate(
    {"model": "chat", "input": "Hi", "tools": [{"type": "function", "name": "weather"}]}
)


class HeldAnswer:
    """Sends its first pieces, then waits to be let go before the rest."""

    def __init__(self, first: list[str], rest: list[str], finish: str = "stop") -> None:
        self.first, self.rest, self.finish = first, rest, finish
        self.go = asyncio.Event()

    async def deltas(self) -> AsyncIterator[Delta]:
        for text in self.first[1:]:
            yield Delta(text)
        await self.go.wait()
        for text in self.rest:
            yield Delta(text)
        yield Delta("", finish_reason=self.finish, completion_tokens=9)

    def generation(self) -> Generation:
        gen = generation(self.deltas(), first=Delta(self.first[0]))
        gen.tools = REQUEST.tool_use()
        return gen


async def within(awaitable: Awaitable[T]) -> T:
    """What a stream says next; a bound only so that a stream holding its text fails here."""
    return await asyncio.wait_for(awaitable, 30)


def chat_text(frame: bytes) -> str | None:
    choice = json.loads(frame.removeprefix(b"data: "))["choices"][0]
    return choice["delta"].get("content")


def test_chat_streams_an_auto_tool_answer_s_text_as_it_comes() -> None:
    answer = HeldAnswer(['{"response": "The weather', " in Oslo"], [' is mild."}'])

    async def run() -> tuple[list[str | None], list[str | None]]:
        frames = sse_events(answer.generation(), "chat", "chat", False)
        before = [chat_text(await within(anext(frames))) for _ in range(3)]
        answer.go.set()
        after = [chat_text(frame) async for frame in frames if not frame.startswith(DONE)]
        return before, after

    before, after = asyncio.run(run())
    assert before == ["", "The weather", " in Oslo"]  # out while the answer is held
    assert after == [" is mild.", ""]  # the rest, then the finish chunk
    assert "".join(t or "" for t in before + after) == "The weather in Oslo is mild."


def test_chat_sends_calls_whole_at_the_end() -> None:
    call = '{"tool_calls": [{"name": "weather", "arguments": {}}]}'
    answer = HeldAnswer([call[:20]], [call[20:]])

    async def run() -> list[Any]:
        frames = sse_events(answer.generation(), "chat", "chat", False)
        first = await within(anext(frames))  # the role
        answer.go.set()
        rest = [frame async for frame in frames]
        return [json.loads(f.removeprefix(b"data: ")) for f in [first, *rest[:-1]]]

    deltas = [frame["choices"][0]["delta"] for frame in asyncio.run(run())]
    assert [d.get("content") for d in deltas] == ["", None, ""]  # role, the call, the finish
    assert deltas[1]["tool_calls"][0]["function"]["name"] == "weather"


def events_of(raw: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(e.split(b"data: ", 1)[1]) for e in raw]


def test_responses_streams_an_auto_tool_answer_s_text_as_it_comes() -> None:
    answer = HeldAnswer(['{"response": "Mild', " and"], [' dry."}'])

    async def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        events = ResponseShape(answer.generation(), REQUEST).events()
        before = events_of([await within(anext(events)) for _ in range(5)])
        answer.go.set()
        return before, events_of([event async for event in events])

    before, after = asyncio.run(run())
    assert [e["type"] for e in before] == [
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
    ]
    assert [e["delta"] for e in before[3:]] == ["Mild", " and"]
    assert [e["type"] for e in after] == [
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert after[0]["delta"] == " dry."
    assert after[1]["text"] == "Mild and dry."
    assert after[-1]["response"]["output"][0]["status"] == "completed"


def test_a_responses_message_cut_short_is_incomplete_item_and_response() -> None:
    answer = HeldAnswer(['{"response": "Mild', " and"], [" dr"], finish="length")

    async def run() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        answer.go.set()
        events = events_of([e async for e in ResponseShape(answer.generation(), REQUEST).events()])
        held = HeldAnswer(['{"response": "Mild', " and"], [" dr"], finish="length")
        held.go.set()
        return events, await ResponseShape(held.generation(), REQUEST).body()

    events, body = asyncio.run(run())
    done = next(e for e in events if e["type"] == "response.output_item.done")
    assert done["item"]["status"] == "incomplete"
    assert events[-1]["type"] == "response.incomplete"
    for response in (events[-1]["response"], body):
        assert response["status"] == "incomplete"
        assert response["incomplete_details"] == {"reason": "max_output_tokens"}
        assert response["output"][0]["status"] == "incomplete"
        assert response["output"][0]["content"][0]["text"] == "Mild and dr"
