"""OpenAI response shapes: one JSON body, or SSE chunks ending with `data: [DONE]`."""

from __future__ import annotations

import asyncio
import base64
import logging
import secrets
import struct
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import msgspec

from zest.engines import EngineInfo, StageStats, TokenLogprob
from zest.errors import EngineError, RequestError
from zest.gateway.serving import Embedded, Generation, ResponseText, ToolAnswer, close_all
from zest.policies import Trimmed
from zest.router import Decision

__all__ = [
    "collect_body",
    "embedding_body",
    "embedding_headers",
    "header_value",
    "route_headers",
    "sse_events",
    "zest_extension",
]

log = logging.getLogger("zest.gateway")
Kind = Literal["chat", "completion"]
_OBJECT = {"chat": "chat.completion", "completion": "text_completion"}
_CHUNK_OBJECT = {"chat": "chat.completion.chunk", "completion": "text_completion"}
_ID_PREFIX = {"chat": "chatcmpl-", "completion": "cmpl-"}


def route_headers(gen: Generation) -> dict[str, str]:
    """The x-zest-* headers: what served the request, its plan, fallbacks, trimming, stages."""
    headers = served_headers(gen.plan.task, gen.info, gen.attempt.reason, gen.fallbacks)
    if gen.decision is not None:
        headers["x-zest-rule"] = header_value(gen.decision.rule_label)
    if gen.trimmed is not None:
        headers["x-zest-trimmed"] = trimmed_header(gen.trimmed)
    stats = gen.final_stats or gen.first.stats
    if stats is not None:
        headers["x-zest-pipeline"] = pipeline_header(stats)
    if gen.cache is not None:  # the route keeps answers: was this one kept?
        headers["x-zest-cache"] = gen.cache
    return {**headers, **gen.headers}  # the caller's own (x-ratelimit-*)


def zest_extension(gen: Generation) -> dict[str, Any]:
    """The `zest` object of a response: what served the request and what was applied."""
    info: dict[str, Any] = {
        "task": gen.plan.task,
        "model": gen.info.model,
        "device": gen.info.device,
        "engine": gen.info.engine,
        "reason": gen.attempt.reason,
        "max_tokens": gen.budget.max_tokens,
    }
    if gen.budget.clamped_from is not None:
        info["max_tokens_clamped_from"] = gen.budget.clamped_from
    if gen.fallbacks:
        info["fallbacks"] = gen.fallbacks
    if gen.trimmed is not None:
        info["trimmed"] = {
            "tokens": gen.trimmed.trimmed_tokens,
            "strategy": gen.trimmed.strategy,
            "messages_dropped": gen.trimmed.messages_dropped,
            "prompt_tokens_before": gen.trimmed.tokens_before,
            "at_least": gen.trimmed.at_least,
        }
    if gen.approximate:
        info["approximate_tokens"] = True
    if gen.decision is not None:  # the routing decision: route_to, matched_rule, ...
        info.update(gen.decision.as_dict(with_trace=gen.trace))
    return info


def _decision_of(gen: Generation) -> dict[str, Any]:
    """The routing decision alone (route_to, matched_rule, ...; the trace if asked for)."""
    decision = gen.decision or Decision(gen.plan.task, None)
    return {"task": gen.plan.task, **decision.as_dict(with_trace=gen.trace)}


def pipeline_header(stats: StageStats) -> str:
    figures = stats.as_dict()
    parts = [f"prefill={stats.prefill_device} {figures['prefill_ms']}ms"]
    if stats.handoff_bytes is not None:
        parts.append(f"handoff={figures['handoff_ms']}ms {stats.handoff_bytes}B")
    decode = f"decode={stats.decode_device}"
    if figures["decode_tokens_per_s"] is not None:
        decode += f" {figures['decode_tokens_per_s']}tok/s"
    return "; ".join([*parts, decode])


def header_value(text: str) -> str:
    """Text safe in a header: one line, ASCII (upstream error messages are quoted in it)."""
    return " ".join(text.split()).encode("ascii", "replace").decode("ascii")


def trimmed_header(trimmed: Trimmed) -> str:
    header = f"tokens={trimmed.trimmed_tokens}; strategy={trimmed.strategy}"
    if trimmed.strategy == "turns":
        header += f"; messages_dropped={trimmed.messages_dropped}"
    if trimmed.at_least:
        header += "; at_least=true"
    return header


def _new_id(kind: Kind) -> str:
    return _ID_PREFIX[kind] + secrets.token_hex(12)


def _usage(gens: Sequence[Generation], completion_tokens: int, prompts: int = 1) -> dict[str, Any]:
    """The answer's usage: every prompt's tokens once (a batch's, summed; not once per choice),
    every choice's completion tokens; the first choice's trimming and stages."""
    gen, each = gens[0], gens[:: max(len(gens) // prompts, 1)]  # each prompt's first choice
    prompt_tokens = sum(g.prompt_tokens for g in each)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": sum(g.first.cached_tokens for g in each)},
    }
    if gen.trimmed is not None:  # extension: the prompt tokens trimmed to fit the budget
        usage["trimmed_tokens"] = gen.trimmed.trimmed_tokens
    if gen.final_stats is not None:  # extension: where each stage ran and how long it took
        usage["pipeline"] = gen.final_stats.as_dict()
        if gen.final_stats.drafted_tokens:  # extension: how speculative decoding did
            usage["speculative"] = gen.final_stats.speculation()
    return usage


def _choice(
    kind: Kind, text: str, finish: str | None, *, chunk: bool, index: int = 0
) -> dict[str, Any]:
    if kind == "completion":
        return {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
    key = "delta" if chunk else "message"
    content: dict[str, Any] = {"content": text} if chunk else {"role": "assistant", "content": text}
    return {"index": index, key: content, "logprobs": None, "finish_reason": finish}


Choices = Generation | Sequence[Generation]
# A completion's echo: its prompt, or each prompt of a batch (in order).
Echo = str | Sequence[str]


def _listed(gens: Choices) -> list[Generation]:
    return [gens] if isinstance(gens, Generation) else list(gens)


def _echo_of(echo: Echo, index: int, choices: int) -> str:
    """Choice `index`'s echo: the prompt it continues (a batch's choice k is prompt k // n's)."""
    if isinstance(echo, str):
        return echo
    return echo[index // max(choices // len(echo), 1)] if echo else ""


async def collect_body(
    gens: Choices, kind: Kind, requested_model: str, echo: Echo = "", *, prompts: int = 1
) -> dict[str, Any]:
    """One JSON body: a choice per generation (n for each of the `prompts`), the usage of
    all of them."""
    listed = _listed(gens)
    collected = await asyncio.gather(
        *(
            _collect_choice(gen, kind, _echo_of(echo, index, len(listed)), index)
            for index, gen in enumerate(listed)
        )
    )
    first = listed[0]
    return {
        "id": _new_id(kind),
        "object": _OBJECT[kind],
        "created": int(time.time()),
        "model": requested_model,
        "choices": [choice for choice, _ in collected],
        "usage": _usage(listed, sum(produced for _, produced in collected), prompts),
        "zest": zest_extension(first),
    }


async def _collect_choice(
    gen: Generation, kind: Kind, echo: str, index: int
) -> tuple[dict[str, Any], int]:
    parts, finish, produced = [echo], "stop", 0
    scored: tuple[TokenLogprob, ...] = ()
    async for delta in gen.deltas():
        parts.append(delta.text)
        if delta.finish_reason is not None:
            finish, produced, scored = delta.finish_reason, delta.completion_tokens, delta.logprobs
    text = "".join(parts)
    if gen.tools is not None:
        return _tool_choice(gen.tools.read(text), finish, index), produced
    choice = _choice(kind, text, finish, chunk=False, index=index)
    choice["logprobs"] = logprobs_object(kind, scored, len(echo)) if scored else None
    return choice, produced


def logprobs_object(kind: Kind, scored: Sequence[TokenLogprob], offset: int = 0) -> dict[str, Any]:
    """OpenAI's logprobs of a choice: chat's `content` list, or the completions' legacy
    columns (tokens, token_logprobs, top_logprobs, text_offset)."""
    if kind == "chat":
        return {
            "content": [
                {
                    "token": t.token,
                    "logprob": t.logprob,
                    "bytes": list(t.utf8),
                    "top_logprobs": [
                        {"token": text, "logprob": lp, "bytes": list(raw)}
                        for text, raw, lp in t.top
                    ],
                }
                for t in scored
            ],
            "refusal": None,
        }
    offsets, at = [], offset
    for t in scored:
        offsets.append(at)
        at += len(t.token)
    return {
        "tokens": [t.token for t in scored],
        "token_logprobs": [t.logprob for t in scored],
        "top_logprobs": [{text: lp for text, _, lp in t.top} for t in scored],
        "text_offset": offsets,
    }


def _tool_choice(answer: ToolAnswer, finish: str, index: int = 0) -> dict[str, Any]:
    """A chat choice from a tool-use answer: its calls (finish_reason tool_calls) or content."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.content}
    if answer.calls:
        message["tool_calls"] = list(answer.calls)
    return {
        "index": index,
        "message": message,
        "logprobs": None,
        "finish_reason": answer.finish_reason or finish,
    }


def _tool_deltas(answer: ToolAnswer) -> list[dict[str, Any]]:
    """A tool-use answer as stream deltas: each call whole, or the content (none: an answer
    cut before it said anything)."""
    if not answer.calls:
        return [] if answer.content is None else [{"content": answer.content}]
    return [{"tool_calls": [{"index": i, **call}]} for i, call in enumerate(answer.calls)]


def _event(payload: dict[str, Any]) -> bytes:
    # msgspec, not json: 1.3 against 20 us a chunk, UTF-8 as sent (issue 25, item 4)
    return b"data: " + msgspec.json.encode(payload) + b"\n\n"


# One streamed choice's chunk: its choice object, and (on its last) the tokens it produced.
_Piece = tuple[dict[str, Any], int | None]


async def _choice_pieces(
    gen: Generation, kind: Kind, echo: str, index: int
) -> AsyncIterator[_Piece]:
    if kind == "chat":
        role = {"role": "assistant", "content": ""}
        yield {"index": index, "delta": role, "logprobs": None, "finish_reason": None}, None
    if echo:  # a completion's echo: the prompt as sent, first
        yield _choice(kind, echo, None, chunk=True, index=index), None
    held: list[str] = []  # a tool-use answer is read whole, then sent as its calls...
    # ...but with tool_choice auto, a text answer goes out as it comes (serving/_tool_text.py)
    text = ResponseText() if gen.tools is not None and gen.tools.choice == "auto" else None
    async for delta in gen.deltas():
        if delta.text and gen.tools is not None:
            held.append(delta.text)
            if text is not None and (said := text.feed(delta.text)):
                yield _choice(kind, said, None, chunk=True, index=index), None
        elif delta.text:
            yield _choice(kind, delta.text, None, chunk=True, index=index), None
        if delta.finish_reason is None:
            continue
        finish: str = delta.finish_reason
        if gen.tools is not None:
            answer = gen.tools.read("".join(held))
            pieces = _tool_deltas(answer)
            if text is not None and text.streaming:  # only the text not sent yet
                pieces = [{"content": rest} for rest in [text.rest(answer.content)] if rest]
            for piece in pieces:
                yield {"index": index, "delta": piece, "finish_reason": None}, None
            finish = answer.finish_reason or finish
        last = _choice(kind, "", finish, chunk=True, index=index)
        if delta.logprobs:  # every token's, on the choice's last chunk
            last["logprobs"] = logprobs_object(kind, delta.logprobs, len(echo))
        yield last, delta.completion_tokens


async def _merged(streams: list[AsyncIterator[_Piece]]) -> AsyncIterator[_Piece]:
    """The pieces of several choices as they come (one choice: as it is)."""
    if len(streams) == 1:
        async for piece in streams[0]:
            yield piece
        return
    queue: asyncio.Queue[_Piece | BaseException | None] = asyncio.Queue()

    async def pump(stream: AsyncIterator[_Piece]) -> None:
        try:
            async for piece in stream:
                await queue.put(piece)
            await queue.put(None)
        except Exception as exc:  # re-raised in the reader: the stream ends with an error event
            await queue.put(exc)

    tasks = [asyncio.ensure_future(pump(stream)) for stream in streams]
    try:
        ended = 0
        while ended < len(streams):
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            if item is None:
                ended += 1
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)  # each pump closes its choice's stream as it stops


async def sse_events(
    gens: Choices,
    kind: Kind,
    requested_model: str,
    include_usage: bool,
    echo: Echo = "",
    *,
    prompts: int = 1,
) -> AsyncIterator[bytes]:
    """SSE chunks, each choice's with its index; a failure after the first byte ends the
    stream with an error event."""
    listed = _listed(gens)
    base = {
        "id": _new_id(kind),
        "object": _CHUNK_OBJECT[kind],
        "created": int(time.time()),
        "model": requested_model,
    }

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return _event({**base, "choices": choices, **extra})

    first = listed[0]
    # The routing decision travels on the first chunk: a client reads where it was sent
    # before the answer (every choice's last chunk has the whole zest object).
    decided = {"zest": _decision_of(first)} if first.ruled else {}
    try:
        produced = 0
        streams = [
            _choice_pieces(g, kind, _echo_of(echo, i, len(listed)), i) for i, g in enumerate(listed)
        ]
        async for choice, tokens in _merged(streams):
            if tokens is None:
                yield chunk([choice], **decided)
                decided = {}
                continue
            produced += tokens
            yield chunk([choice], zest=zest_extension(first))
        if include_usage:
            yield chunk([], usage=_usage(listed, produced, prompts))
        yield b"data: [DONE]\n\n"
    except RequestError as exc:
        log.warning("stream for task %s failed after it began: %s", first.plan.task, exc)
        yield _event(exc.to_body())
    except Exception:
        log.exception("stream for task %s failed after it began", first.plan.task)
        yield _event(EngineError("generation failed mid-stream: see the server log").to_body())
    finally:
        await close_all(listed)


def embedding_headers(done: Embedded) -> dict[str, str]:
    """What served an embedding request (the same headers as a generation's)."""
    served = served_headers(done.plan.task, done.info, done.attempt.reason, done.fallbacks)
    return {**served, **done.headers}


def served_headers(
    task: str, info: EngineInfo, reason: str, fallbacks: Sequence[str]
) -> dict[str, str]:
    """x-zest-route, x-zest-plan and (when any) x-zest-fallbacks of any request."""
    headers = {
        "x-zest-route": f"task={task}; model={info.model}; device={info.device}; "
        f"engine={info.engine}",
        "x-zest-plan": reason,
    }
    if fallbacks:
        headers["x-zest-fallbacks"] = header_value(" | ".join(fallbacks))
    return headers


def embedding_body(
    done: Embedded, requested_model: str, encoding: Literal["float", "base64"]
) -> dict[str, Any]:
    """OpenAI's embeddings list; base64 is the little-endian float32 bytes, as OpenAI sends."""
    used = done.result.prompt_tokens
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": _encoded(vector, encoding)}
            for i, vector in enumerate(done.result.vectors)
        ],
        "model": requested_model,
        "usage": {"prompt_tokens": used, "total_tokens": used},
        "zest": {
            "task": done.plan.task,
            "model": done.info.model,
            "device": done.info.device,
            "engine": done.info.engine,
            "reason": done.attempt.reason,
            "dimensions": len(done.result.vectors[0]) if done.result.vectors else 0,
            **({"fallbacks": done.fallbacks} if done.fallbacks else {}),
        },
    }


def _encoded(vector: tuple[float, ...], encoding: Literal["float", "base64"]) -> Any:
    if encoding == "float":
        return list(vector)
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
