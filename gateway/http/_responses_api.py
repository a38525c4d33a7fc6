"""OpenAI's Responses API shapes (/v1/responses): one response object, or its stream of typed
events (response.created ... response.completed, or response.incomplete for an answer cut
short), from a chat generation."""

from __future__ import annotations

import logging
import secrets
import string
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec

from zest.engines import Delta, TokenLogprob
from zest.errors import EngineError, RequestError
from zest.gateway.http._responses import logprobs_object, zest_extension
from zest.gateway.serving import Generation, ResponsesRequest, ResponseText, ToolAnswer

__all__ = ["ResponseShape"]

log = logging.getLogger("zest.gateway")
# stream_options.include_obfuscation: each delta event padded with random characters to a
# multiple of this many bytes of text, so that its size does not give away its text's.
_OBFUSCATION_BUCKET = 32
_OBFUSCATION_CHARACTERS = string.ascii_letters + string.digits


class ResponseShape:
    """The response object of one request, built as its generation goes."""

    def __init__(self, gen: Generation, request: ResponsesRequest) -> None:
        self.gen, self.request = gen, request
        self.id = "resp_" + secrets.token_hex(12)
        self.message_id = "msg_" + secrets.token_hex(12)
        self.created_at = int(time.time())
        self.sequence = 0
        # Each output token's log probability (include: message.output_text.logprobs).
        self.scored: Sequence[TokenLogprob] = ()

    async def body(self) -> dict[str, Any]:
        text, finish, produced = "", "stop", 0
        async for delta in self.gen.deltas():
            text += delta.text
            if delta.finish_reason is not None:
                finish, produced = self._finished(delta)
        return self._response(self._output(text, finish), finish, produced)

    def _finished(self, delta: Delta) -> tuple[str, int]:
        self.scored = delta.logprobs
        return delta.finish_reason or "stop", delta.completion_tokens

    async def events(self) -> AsyncIterator[bytes]:
        """The stream: a failure after it began ends it with an error event."""
        try:
            yield self._event("response.created", response=self._response([], None, 0))
            async for event in self._output_events():
                yield event
        except RequestError as exc:
            log.warning("response stream for %s failed: %s", self.gen.plan.task, exc)
            yield self._event("error", **exc.to_body()["error"])
        except Exception:
            log.exception("response stream for %s failed", self.gen.plan.task)
            body = EngineError("generation failed mid-stream: see the server log").to_body()
            yield self._event("error", **body["error"])
        finally:
            await self.gen.aclose()

    async def _output_events(self) -> AsyncIterator[bytes]:
        """A text answer streams as it comes; a tool-use answer's calls are read whole, then
        sent, and its text (tool_choice auto) streams once it is clearly not a call."""
        tools = self.gen.tools
        reader = ResponseText() if tools is not None and tools.choice == "auto" else None
        opened = tools is None
        if opened:
            for event in self._message_opened():
                yield event
        text, finish, produced = "", "stop", 0
        async for delta in self.gen.deltas():
            text += delta.text
            said = delta.text if tools is None else reader.feed(delta.text) if reader else ""
            if said and not opened:
                for event in self._message_opened():
                    yield event
                opened = True
            if said:
                yield self._text_delta(said)
            if delta.finish_reason is not None:
                finish, produced = self._finished(delta)
        output = self._output(text, finish)
        if reader is not None and reader.streaming and (rest := reader.rest(_text_of(output))):
            yield self._text_delta(rest)  # what the whole answer read beyond what was sent
        for event in self._items_done(output, opened=opened):
            yield event
        response = self._response(output, finish, produced)
        yield self._event(f"response.{response['status']}", response=response)

    def _text_delta(self, text: str) -> bytes:
        """A delta event (its tokens' log probabilities come with the text's done event)."""
        fields: dict[str, Any] = {}
        if self.request.obfuscated():
            pad = _OBFUSCATION_BUCKET - len(text.encode()) % _OBFUSCATION_BUCKET
            fields["obfuscation"] = "".join(
                secrets.choice(_OBFUSCATION_CHARACTERS) for _ in range(pad)
            )
        return self._event(
            "response.output_text.delta",
            item_id=self.message_id,
            output_index=0,
            content_index=0,
            delta=text,
            logprobs=[],
            **fields,
        )

    def _message_opened(self) -> list[bytes]:
        return [
            self._event(
                "response.output_item.added",
                output_index=0,
                item={**self._message(""), "status": "in_progress", "content": []},
            ),
            self._event(
                "response.content_part.added",
                item_id=self.message_id,
                output_index=0,
                content_index=0,
                part=_text_part(""),
            ),
        ]

    def _items_done(self, output: list[dict[str, Any]], *, opened: bool) -> list[bytes]:
        events = []
        for index, item in enumerate(output):
            if item["type"] == "message":
                text, scored = item["content"][0]["text"], item["content"][0]["logprobs"]
                if not opened:
                    events += self._message_opened()
                events.append(
                    self._event(
                        "response.output_text.done",
                        item_id=self.message_id,
                        output_index=index,
                        content_index=0,
                        text=text,
                        logprobs=scored,
                    )
                )
                events.append(
                    self._event(
                        "response.content_part.done",
                        item_id=self.message_id,
                        output_index=index,
                        content_index=0,
                        part=item["content"][0],
                    )
                )
            else:
                events.append(
                    self._event("response.output_item.added", output_index=index, item=item)
                )
                events.append(
                    self._event(
                        "response.function_call_arguments.done",
                        item_id=item["id"],
                        output_index=index,
                        name=item["name"],
                        arguments=item["arguments"],
                    )
                )
            events.append(self._event("response.output_item.done", output_index=index, item=item))
        return events

    def _output(self, text: str, finish: str) -> list[dict[str, Any]]:
        """The output items; a message cut short (max_output_tokens, the route's max_tokens)
        is `incomplete`, as the response is."""
        status = "incomplete" if finish == "length" else "completed"
        if self.gen.tools is None:
            return [self._message(text, status)]
        answer: ToolAnswer = self.gen.tools.read(text)
        if not answer.calls:
            return [self._message(answer.content or "", status)]
        return [
            {
                "type": "function_call",
                "id": "fc_" + secrets.token_hex(12),
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
            for call in answer.calls
        ]

    def _message(self, text: str, status: str = "completed") -> dict[str, Any]:
        scored = logprobs_object("chat", self.scored)["content"] if self.scored else []
        return {
            "type": "message",
            "id": self.message_id,
            "status": status,
            "role": "assistant",
            "content": [_text_part(text, scored)],
        }

    def _response(
        self, output: list[dict[str, Any]], finish: str | None, produced: int
    ) -> dict[str, Any]:
        status = "in_progress" if finish is None else "completed"
        if finish == "length":
            status = "incomplete"
        gen, request = self.gen, self.request
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "model": request.model,
            "instructions": request.instructions,
            "output": output,
            "parallel_tool_calls": request.parallel_tool_calls is not False,
            "tool_choice": _plain(request.tool_choice) or "auto",
            "tools": [t.model_dump(exclude_none=True) for t in request.tools or []],
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_output_tokens": request.max_output_tokens,
            "max_tool_calls": request.max_tool_calls,
            "top_logprobs": request.top_logprobs or 0,
            "truncation": request.truncation or "disabled",
            "background": False,
            "usage": {
                "input_tokens": gen.prompt_tokens,
                "input_tokens_details": {"cached_tokens": gen.first.cached_tokens},
                "output_tokens": produced,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": gen.prompt_tokens + produced,
            },
            "zest": zest_extension(gen),
        }

    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return b"event: %s\ndata: %s\n\n" % (kind.encode(), msgspec.json.encode(payload))


def _text_of(output: list[dict[str, Any]]) -> str | None:
    """The text of the output's message (None: the output is calls)."""
    message = output[0] if output and output[0]["type"] == "message" else None
    return None if message is None else str(message["content"][0]["text"])


def _text_part(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def _plain(choice: Any) -> Any:
    return choice.model_dump() if hasattr(choice, "model_dump") else choice
