"""Ollama's answers to /api/chat and /api/generate, from a running Generation: NDJSON lines
as the deltas come (one line a delta, never buffered), or one JSON body; the last carries
Ollama's final fields in nanoseconds, from zest's own timings:

- total_duration: from the handler's start to the last token;
- load_duration: the time the request waited for its engine (a load, when it caused one);
- prompt_eval_count / prompt_eval_duration: the prompt's tokens and the engine's prefill time;
- eval_count / eval_duration: the tokens generated and the engine's decode time (where an
  engine reports no stages, a remote one: the time between the first token and the last).

A failure after the first line ends the stream with Ollama's `{"error": "..."}` line.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from zest.errors import EngineError, RequestError
from zest.gateway.http._responses import zest_extension
from zest.gateway.serving import Generation, ToolAnswer, close_all

__all__ = ["NDJSON", "OllamaAnswer", "ndjson_line", "now_stamp"]

log = logging.getLogger("zest.gateway")
NDJSON = "application/x-ndjson"
Shape = Literal["chat", "generate"]
_DONE_REASONS = {"stop": "stop", "length": "length", "tool_calls": "stop"}


def now_stamp() -> str:
    """Ollama's created_at: RFC 3339 in UTC."""
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


def ndjson_line(payload: dict[str, Any]) -> bytes:
    return msgspec.json.encode(payload) + b"\n"


def _ns(seconds: float) -> int:
    return max(int(seconds * 1e9), 0)


def ollama_tool_calls(answer: ToolAnswer) -> list[dict[str, Any]]:
    """An answer's calls in Ollama's shape: arguments as an object, not JSON text."""
    calls = []
    for index, call in enumerate(answer.calls):
        function = call["function"]
        try:
            arguments = json.loads(function["arguments"])
        except json.JSONDecodeError:
            arguments = {}
        calls.append(
            {"function": {"index": index, "name": function["name"], "arguments": arguments}}
        )
    return calls


@dataclass
class OllamaAnswer:
    """One request's answer in Ollama's shape; `after` runs once it is over (keep_alive)."""

    gen: Generation
    shape: Shape
    model: str  # as the client named it
    started: float  # perf_counter at the handler's start
    after: Callable[[], Any] | None = None
    _first_at: float = 0.0
    _finish: str = "stop"
    _tokens: int = 0
    _texts: list[str] = field(default_factory=list)

    def _piece(self, text: str, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        piece: dict[str, Any] = {"model": self.model, "created_at": now_stamp()}
        if self.shape == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = calls
            piece["message"] = message
        else:
            piece["response"] = text
        piece["done"] = False
        return piece

    def _final(self, text: str = "", calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        gen, ended = self.gen, time.perf_counter()
        stats = gen.final_stats or gen.first.stats
        prefill_s = stats.prefill_ms / 1000 if stats else self._first_at - self.started
        decode_s = stats.decode_ms / 1000 if stats and stats.decode_ms else ended - self._first_at
        return {
            **self._piece(text, calls),
            "done": True,
            "done_reason": _DONE_REASONS.get(self._finish, self._finish),
            "total_duration": _ns(ended - self.started),
            "load_duration": _ns(gen.load_s),
            "prompt_eval_count": gen.prompt_tokens,
            "prompt_eval_duration": _ns(prefill_s),
            "eval_count": self._tokens,
            "eval_duration": _ns(decode_s),
            "zest": zest_extension(gen),
        }

    async def _deltas(self) -> AsyncIterator[str]:
        """The text of each delta as it comes; the finish and the count kept."""
        self._first_at = time.perf_counter()
        async for delta in self.gen.deltas():
            if delta.finish_reason is not None:
                self._finish, self._tokens = delta.finish_reason, delta.completion_tokens
            if delta.text:
                yield delta.text

    def _tools_read(self) -> tuple[str, list[dict[str, Any]]]:
        """A tool-use answer, read whole: its text, or its calls."""
        assert self.gen.tools is not None
        answer = self.gen.tools.read("".join(self._texts))
        calls = ollama_tool_calls(answer)
        if calls and answer.finish_reason:
            self._finish = answer.finish_reason
        return answer.content or "", calls

    async def lines(self) -> AsyncIterator[bytes]:
        """The NDJSON stream: a line a delta, then the final line (an error line on failure)."""
        try:
            async for text in self._deltas():
                if self.gen.tools is not None:
                    self._texts.append(text)  # the constrained answer is read whole
                else:
                    yield ndjson_line(self._piece(text))
            if self.gen.tools is not None:
                text, calls = self._tools_read()
                if text or calls:
                    yield ndjson_line(self._piece(text, calls))
            yield ndjson_line(self._final())
        except RequestError as exc:
            log.warning("stream for task %s failed after it began: %s", self.gen.plan.task, exc)
            yield ndjson_line({"error": exc.message})
        except Exception:
            log.exception("stream for task %s failed after it began", self.gen.plan.task)
            failed = EngineError("generation failed mid-stream: see the server log")
            yield ndjson_line({"error": failed.message})
        finally:
            await close_all([self.gen])
            await self._after()

    async def body(self) -> dict[str, Any]:
        """The whole answer as one JSON body."""
        try:
            async for text in self._deltas():
                self._texts.append(text)
            if self.gen.tools is not None:
                return self._final(*self._tools_read())
            return self._final("".join(self._texts))
        finally:
            await close_all([self.gen])
            await self._after()

    async def _after(self) -> None:
        if self.after is not None:
            done, self.after = self.after(), None
            if done is not None:
                await done
