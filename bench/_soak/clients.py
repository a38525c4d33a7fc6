"""The soak's requests: what each client stream sends next (`plan_request`, pure) and how it
is sent and read, by the official openai client or raw httpx (`Caller`), down to how it ended."""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, replace
from typing import Any

import httpx
import openai

from .outcomes import Drop, Ending, Outcome, Request
from .servers import LOCAL_MAX_TOKENS

__all__ = ["QUESTIONS", "ROUTES", "Caller", "body_of", "plan_request", "served_model"]

QUESTIONS = (
    "Name a colour and say why you like it.",
    "What is the capital of France?",
    "Give me one tip for sleeping well.",
    "Write one sentence about the sea.",
    "What do bees make?",
    "Say hello in a friendly way.",
)
# task -> (endpoint, goes to the upstream first, weight)
ROUTES: dict[str, tuple[str, bool, int]] = {
    "chat": ("chat", False, 4),
    "complete": ("completions", False, 2),
    "remote": ("chat", True, 4),
}
_DROP_SHARE = 0.1  # of the requests, each kind of disconnect


def plan_request(rng: random.Random) -> Request:
    """The next request of a stream: a route, a client, streamed or not, and whether the
    harness will disconnect (before the first token, or after a few chunks of a stream)."""
    names = list(ROUTES)
    route = rng.choices(names, weights=[ROUTES[n][2] for n in names])[0]
    endpoint, remote, _ = ROUTES[route]
    stream = rng.random() < 0.6
    request = Request(
        route=route,
        remote=remote,
        endpoint="chat" if endpoint == "chat" else "completions",
        client=rng.choice(("openai", "httpx")),
        stream=stream,
    )
    roll = rng.random()
    if roll < _DROP_SHARE:
        return replace(request, drop=Drop.BEFORE_FIRST_TOKEN, drop_after=rng.uniform(0.02, 0.3))
    if roll < 2 * _DROP_SHARE and stream:
        return replace(request, drop=Drop.MID_STREAM, drop_after=float(rng.randint(1, 4)))
    return request


def body_of(request: Request, rng: random.Random) -> dict[str, Any]:
    """The JSON body: a fresh question (a random tag first), greedy or not, short."""
    question = f"[{rng.randrange(16**6):06x}] {rng.choice(QUESTIONS)}"
    body: dict[str, Any] = {
        "model": request.route,
        "max_tokens": LOCAL_MAX_TOKENS,
        "temperature": rng.choice((0.0, 0.7)),
        "stream": request.stream,
    }
    if request.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": question}]
    else:
        body["prompt"] = f"Question: {question}\nAnswer:"
    if request.stream and rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    return body


def served_model(route_header: str | None) -> str | None:
    """The model named by x-zest-route (`task=chat; model=smollm2; device=cpu; ...`)."""
    for part in (route_header or "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == "model":
            return value
    return None


@dataclass
class _Seen:
    """What a request showed while it ran (filled in as it goes)."""

    ending: Ending = Ending.UNREACHABLE
    status: int | None = None
    error: str | None = None
    message: str = ""
    ttft_s: float | None = None
    tokens: int = 0
    served_by: str | None = None
    began: float = 0.0

    def text(self, piece: str | None) -> None:
        if piece:
            if self.ttft_s is None:
                self.ttft_s = time.monotonic() - self.began
            self.tokens += 1

    def failed_with(self, error: Any, status: int | None = None) -> None:
        """An error body's or event's fields (`{"error": {...}}` or the inner object)."""
        inner = error.get("error", error) if isinstance(error, dict) else {}
        inner = inner if isinstance(inner, dict) else {}
        self.error = str(inner.get("code") or inner.get("type") or "unknown")
        self.message = str(inner.get("message") or "")[:300]
        self.status = status if status is not None else self.status


class Caller:
    """Sends a planned request to zest and says how it ended. `clock` is the soak's start."""

    def __init__(self, v1: str, timeout_s: float, clock: float) -> None:
        self.v1, self.timeout_s, self.clock = v1, timeout_s, clock
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s + 30, connect=10))
        self.openai = openai.AsyncOpenAI(
            base_url=v1, api_key="soak", max_retries=0, timeout=timeout_s + 30
        )

    async def close(self) -> None:
        await self.http.aclose()
        await self.openai.close()

    async def call(self, request: Request, body: dict[str, Any]) -> Outcome:
        seen = _Seen(began=time.monotonic())
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._dropping(request, body, seen)
        except TimeoutError:
            seen.ending = Ending.TIMEOUT
        except Exception as exc:  # a bug of the harness: counted, shown, and the soak goes on
            seen.ending, seen.message = Ending.HARNESS_ERROR, f"{type(exc).__name__}: {exc}"[:300]
        return Outcome(
            request=request,
            started=seen.began - self.clock,
            ended=time.monotonic() - self.clock,
            ending=seen.ending,
            status=seen.status,
            error=seen.error,
            message=seen.message,
            ttft_s=seen.ttft_s,
            tokens=seen.tokens,
            served_by=seen.served_by,
        )

    async def _dropping(self, request: Request, body: dict[str, Any], seen: _Seen) -> None:
        """The request, cut short by the harness when it plans a disconnect before the first
        token (the time runs out: the connection is closed under the request)."""
        if request.drop is not Drop.BEFORE_FIRST_TOKEN:
            await self._send(request, body, seen)
            return
        dropped = False
        try:
            async with asyncio.timeout(request.drop_after) as drop:
                await self._send(request, body, seen)
        except TimeoutError:
            dropped = drop.expired()
            if not dropped:
                raise
        if dropped:
            seen.ending = Ending.DROPPED

    async def _send(self, request: Request, body: dict[str, Any], seen: _Seen) -> None:
        if request.client == "openai":
            await self._openai(request, body, seen)
        elif request.stream:
            await self._httpx_stream(request, body, seen)
        else:
            await self._httpx_whole(request, body, seen)

    # --- raw httpx ----------------------------------------------------------------------------

    def _url(self, request: Request) -> str:
        return f"{self.v1}/{'chat/completions' if request.endpoint == 'chat' else 'completions'}"

    async def _httpx_whole(self, request: Request, body: dict[str, Any], seen: _Seen) -> None:
        try:
            response = await self.http.post(self._url(request), json=body)
        except httpx.TransportError as exc:
            seen.message = f"{type(exc).__name__}: {exc}"[:300]
            return
        seen.status, seen.ending = response.status_code, Ending.BODY
        seen.served_by = served_model(response.headers.get("x-zest-route"))
        try:
            data = response.json()
        except ValueError:
            seen.error, seen.message = "malformed", response.text[:300]
            return
        if response.status_code != 200:
            seen.failed_with(data)
        elif not data.get("choices"):
            seen.error, seen.message = "malformed", response.text[:300]
        else:
            seen.tokens = int((data.get("usage") or {}).get("completion_tokens") or 0)

    async def _httpx_stream(self, request: Request, body: dict[str, Any], seen: _Seen) -> None:
        began = False
        try:
            async with self.http.stream("POST", self._url(request), json=body) as response:
                seen.status = response.status_code
                seen.served_by = served_model(response.headers.get("x-zest-route"))
                if response.status_code != 200:
                    seen.ending = Ending.BODY
                    raw = await response.aread()
                    seen.failed_with(_json_or_none(raw))
                    return
                began = True
                seen.ending = await self._read_events(request, response, seen)
        except httpx.TransportError as exc:
            seen.ending = Ending.BROKEN if began else Ending.UNREACHABLE
            seen.message = f"{type(exc).__name__}: {exc}"[:300]

    async def _read_events(self, request: Request, response: httpx.Response, seen: _Seen) -> Ending:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line.removeprefix("data:").strip()
            if data == "[DONE]":
                return Ending.DONE
            event = _json_or_none(data.encode())
            if not isinstance(event, dict):
                seen.error, seen.message = "malformed", data[:300]
                return Ending.DONE
            if "error" in event:
                seen.failed_with(event)
                return Ending.ERROR_EVENT
            seen.text(_piece(event))
            if _drop_now(request, seen):
                return Ending.DROPPED  # leaving the block closes the connection
        return Ending.EOF

    # --- the official openai client -----------------------------------------------------------

    async def _openai(self, request: Request, body: dict[str, Any], seen: _Seen) -> None:
        resource = (
            self.openai.chat.completions if request.endpoint == "chat" else self.openai.completions
        )
        try:
            raw: Any = await resource.with_raw_response.create(**body)
        except openai.APIStatusError as exc:
            seen.ending = Ending.BODY
            seen.failed_with(exc.body if isinstance(exc.body, dict) else {}, exc.status_code)
            seen.served_by = served_model(exc.response.headers.get("x-zest-route"))
            return
        except openai.APIConnectionError as exc:  # timeouts included: ours fire first
            seen.message = f"{type(exc).__name__}: {exc}"[:300]
            return
        seen.status = raw.status_code
        seen.served_by = served_model(raw.headers.get("x-zest-route"))
        parsed = raw.parse()  # with_raw_response: the legacy response, parsed in sync
        if not request.stream:
            seen.ending = Ending.BODY
            if not parsed.choices:
                seen.error = "malformed"
            seen.tokens = parsed.usage.completion_tokens if parsed.usage else 0
            return
        seen.ending = await self._openai_events(request, parsed, seen)

    async def _openai_events(self, request: Request, stream: Any, seen: _Seen) -> Ending:
        """The openai client ends its iteration at [DONE] or at the end of the body alike, so
        a stream counts as done when a choice carried its finish_reason."""
        finished = False
        try:
            async for chunk in stream:
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                seen.text(choice.delta.content if request.endpoint == "chat" else choice.text)
                finished = finished or choice.finish_reason is not None
                if _drop_now(request, seen):
                    await stream.close()
                    return Ending.DROPPED
        except openai.APIConnectionError as exc:
            seen.message = f"{type(exc).__name__}: {exc}"[:300]
            return Ending.BROKEN
        except openai.APIError as exc:  # an error event
            seen.failed_with(exc.body if isinstance(exc.body, dict) else {"message": exc.message})
            return Ending.ERROR_EVENT
        except httpx.TransportError as exc:
            seen.message = f"{type(exc).__name__}: {exc}"[:300]
            return Ending.BROKEN
        return Ending.DONE if finished else Ending.EOF


def _drop_now(request: Request, seen: _Seen) -> bool:
    return request.drop is Drop.MID_STREAM and seen.tokens >= request.drop_after


def _piece(event: dict[str, Any]) -> str | None:
    choices = event.get("choices") or []
    if not choices:
        return None
    choice = choices[0]
    delta = choice.get("delta")
    return str(delta.get("content") or "") if isinstance(delta, dict) else choice.get("text")


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None
