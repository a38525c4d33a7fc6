"""Anthropic's Messages API: POST /v1/messages (and /api/v1/messages) and
/v1/messages/count_tokens, on chat tasks. A front door, not a second serving path: the body
becomes the request /v1/chat/completions builds (start_generation with chat turns, sampling
fields, tools and what the rules read), and the generation's answer becomes Anthropic's
message or event stream (_anthropic_shape). Keys come as x-api-key (or Bearer) as on every
endpoint; anthropic-version and anthropic-beta are accepted and change nothing."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, post

from zest.gateway.http._anthropic_shape import ANTHROPIC, MessageShape
from zest.gateway.http._body import IGNORED
from zest.gateway.http._callers import caller_of
from zest.gateway.http._dialect import DIALECT
from zest.gateway.http._exchange import (
    event_stream,
    metadata_read,
    request_headers,
    request_id_of,
    unless_disconnected,
)
from zest.gateway.http._fleet import AFFINITY_STATE, request_affinity
from zest.gateway.http._metrics import RequestRecord
from zest.gateway.http._openapi import STREAMS
from zest.gateway.http._responses import route_headers
from zest.gateway.serving import (
    CountTokensRequest,
    MessagesRequest,
    Runtime,
    build_prompt,
    start_generation,
)
from zest.router import find_route

__all__ = ["ANTHROPIC_HANDLERS"]


@post("/messages", status_code=200, opt={**STREAMS, DIALECT: ANTHROPIC})
async def messages(
    data: MessagesRequest,
    request: Request[Any, Any, Any],
    runtime: Runtime,
    record: RequestRecord,
) -> Response[Any]:
    """A message from a chat task: its text, or its tool calls (tool_use blocks)."""
    request.state[IGNORED] = data.ignored()
    if request.headers.get("x-zest-route-trace") == "1":
        data = data.model_copy(update={"route_trace": True})
    request_id = request_id_of(request)
    turns = data.chat()
    request.state[AFFINITY_STATE] = request_affinity(request.headers, data.model, turns)
    gen = await unless_disconnected(
        request,
        start_generation(
            runtime,
            data.model,
            kind="chat",
            body=data.sampling(),
            request_id=request_id,
            messages=turns,
            tools=data.tool_use(),
            events=record,
            routing=data.routing_inputs(),
            caller=caller_of(request),
        ),
    )
    metadata_read(request, gen)
    shape = MessageShape(gen, data)
    headers = {**route_headers(gen), **request_headers(request, request_id)}
    if data.stream:
        return event_stream(shape.events(), headers)
    try:
        payload = await unless_disconnected(request, shape.body())
    finally:
        await gen.aclose()
    return Response(payload, headers=headers)


@post("/messages/count_tokens", status_code=200, opt={DIALECT: ANTHROPIC})
async def count_tokens(
    data: CountTokensRequest, request: Request[Any, Any, Any], runtime: Runtime
) -> Response[dict[str, int]]:
    """The prompt's tokens as the task's model counts them (its system prompt, few-shot
    examples and the tools' description included), without generating: the task's own
    model (counting runs no model, so no routing rule is evaluated)."""
    request.state[IGNORED] = data.ignored()
    routes = runtime.routes
    route = find_route(data.model, "chat", routes.config)
    prompt = build_prompt(route, "chat", data.chat(), None, data.tool_use())
    tokens = await runtime.count_prompt(routes, route.model, prompt)
    headers = request_headers(request, request_id_of(request))
    headers["x-zest-route"] = f"task={data.model}; model={route.model}"
    return Response({"input_tokens": tokens}, headers=headers)


ANTHROPIC_HANDLERS = [messages, count_tokens]
