"""One request's routing decision, apart from its generation: what `zest route test`, `zest
explain --request` and POST /v1/explain run.

A request body is read as its endpoint reads it (messages: /v1/chat/completions, prompt:
/v1/completions, input: /v1/responses), and handed to `route_request`, the function every
generation starts with: the decision is the server's own, not a copy of it. Deterministic
conditions load nothing (a token count reads the model's tokenizer only); a model-backed one
runs its route, as a served request would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from zest.errors import BadRequestError
from zest.gateway.serving._explain import explain_task
from zest.gateway.serving._generation import (
    build_prompt,
    check_tools,
    decision_told,
    request_needs,
    route_request,
)
from zest.gateway.serving._judge import prompt_to_judge
from zest.gateway.serving._requests import (
    IGNORED_FIELDS,
    ChatRequest,
    CompletionRequest,
    SamplingFields,
)
from zest.gateway.serving._responses_api import ResponsesRequest
from zest.gateway.serving._routing import Routed
from zest.gateway.serving._runtime import Runtime
from zest.gateway.serving._tools import tool_use_for

__all__ = [
    "ExplainRequest",
    "ParsedRequest",
    "decide_request",
    "explain_request",
    "parse_request",
]

Kind = Literal["chat", "completion"]
_ENDPOINTS = (
    ("messages", "/v1/chat/completions"),
    ("prompt", "/v1/completions"),
    ("input", "/v1/responses"),
)


class ExplainRequest(BaseModel):
    """POST /v1/explain: a task, and the body a client would send it."""

    model_config = ConfigDict(extra="forbid")

    task: str
    request: dict[str, Any]


@dataclass(frozen=True)
class ParsedRequest:
    """A request body as its endpoint hands it to the generation."""

    endpoint: str
    kind: Kind
    body: SamplingFields
    inputs: dict[str, Any]  # messages, prompt, tools, routing: start_choices' keywords


def parse_request(task: str, request: Mapping[str, Any]) -> ParsedRequest:
    """`request` validated as the endpoint its input field names validates it (its `model`
    is `task`); BadRequestError (param `request...`) if it is not a request that endpoint
    takes."""
    data = {key: value for key, value in request.items() if key != "model"}
    data["model"] = task
    field = next((name for name, _ in _ENDPOINTS if name in data), None)
    if field is None:
        raise BadRequestError(
            "the request has no messages, prompt or input: send the body a client would send "
            "to /v1/chat/completions, /v1/completions or /v1/responses",
            param="request",
        )
    endpoint = dict(_ENDPOINTS)[field]
    try:
        return _parsed(field, endpoint, data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in ("request", *error["loc"]))
        raise BadRequestError(
            f"{where}: {error['msg']} (as {endpoint} reads it)", param=where
        ) from None


def _parsed(field: str, endpoint: str, data: dict[str, Any]) -> ParsedRequest:
    schema: dict[str, type[BaseModel]] = {
        "messages": ChatRequest,
        "prompt": CompletionRequest,
        "input": ResponsesRequest,
    }
    for name in IGNORED_FIELDS:  # as the endpoint does: they change nothing
        if name not in schema[field].model_fields:
            data.pop(name, None)
    if field == "messages":
        chat = ChatRequest.model_validate(data)
        answer = chat.response_format.constraint() if chat.response_format else None
        tools = tool_use_for(chat.tools, chat.tool_choice, answer, chat.parallel_tool_calls)
        return ParsedRequest(endpoint, "chat", chat, {"messages": chat.messages, "tools": tools})
    if field == "prompt":
        completion = CompletionRequest.model_validate(data)
        return ParsedRequest(
            endpoint, "completion", completion, {"prompt": completion.routing_text()}
        )
    responses = ResponsesRequest.model_validate(data)
    inputs = {
        "messages": responses.messages(),
        "tools": responses.tool_use(),
        "routing": responses.routing_inputs(),
    }
    return ParsedRequest(endpoint, "chat", responses.sampling(), inputs)


async def decide_request(
    runtime: Runtime, task: str, request: Mapping[str, Any]
) -> tuple[ParsedRequest, Routed]:
    """The route that would serve `request` sent to `task`, and the decision that chose it."""
    parsed = parse_request(task, request)
    routed = await route_request(runtime, task, parsed.kind, parsed.body, dict(parsed.inputs))
    return parsed, routed


async def explain_request(
    runtime: Runtime, task: str, request: Mapping[str, Any]
) -> dict[str, Any]:
    """The decision for `request` (with its trace), then the plan of the route it chose, and
    what serving does with this request's prompt on each attempt, measured by that attempt's
    model (privacy as tightened by the rule): the outcome the server would answer."""
    parsed, routed = await decide_request(runtime, task, request)
    routes, route = runtime.routes, routed.route
    inputs = parsed.inputs
    with decision_told(routed, trace=True):  # refused as serving refuses it, rule named
        check_tools(routed.task, route, inputs.get("tools"))
    suffix = getattr(parsed.body, "suffix", None)
    prompt = build_prompt(
        route,
        parsed.kind,
        inputs.get("messages"),
        inputs.get("prompt"),
        inputs.get("tools"),
        suffix=suffix,
    )
    tokens = await runtime.count_prompt(routes, route.model, prompt)
    explained = explain_task(
        routes.config,
        runtime.inventory,
        routed.task,
        tokens,
        runtime.queue_depths(),
        strict_privacy=runtime.strict_privacy,
        contexts=await runtime.model_contexts(routes),
        device_bytes=runtime.device_bytes,
        route=route,
        needs=request_needs(
            route, parsed.body, inputs.get("tools"), suffix, inputs.get("messages")
        ),
        prompt=await prompt_to_judge(
            runtime,
            routes,
            route,
            prompt,
            requested=parsed.body.requested_max_tokens(),
            trims_to_fit=parsed.body.trims_to_fit(),
            context_cap=parsed.body.context_cap(),
        ),
    )
    decision = routed.decision.as_dict(with_trace=True) if routed.decision else None
    if routed.ruled and "outcome" in explained:  # x-zest-rule of the answer
        explained["outcome"]["rule"] = routed.rule_label
    return {"requested_task": task, "endpoint": parsed.endpoint, "decision": decision, **explained}
