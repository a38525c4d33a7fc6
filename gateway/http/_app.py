"""The Litestar application: OpenAI-compatible and task-named endpoints under /api/v1 and /v1."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

from litestar import Litestar, MediaType, Request, Response, Router, get, head, post
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.exceptions import HTTPException, ValidationException

from zest.errors import (
    BadRequestError,
    RequestError,
    UnknownTaskError,
    clipped,
    error_body,
    shown,
)
from zest.gateway.http._answers import (
    ChatCompletion,
    Completion,
    EmbeddingList,
    Health,
    ModelEntry,
    ModelList,
    ResponseObject,
    answers,
)
from zest.gateway.http._anthropic import ANTHROPIC_HANDLERS
from zest.gateway.http._auth import PUBLIC_PATHS
from zest.gateway.http._body import JsonBodyPlugin, read_empty_body
from zest.gateway.http._callers import CLIENT_DIRECTORY, ClientDirectory, caller_of
from zest.gateway.http._dialect import dialect_of
from zest.gateway.http._exchange import (
    event_stream,
    metadata_read,
    request_headers,
    request_id_of,
    unless_disconnected,
)
from zest.gateway.http._fleet import AFFINITY_STATE, replica_header, request_affinity
from zest.gateway.http._held import release_held
from zest.gateway.http._mcp import McpMount
from zest.gateway.http._metrics import Metrics, RequestRecord
from zest.gateway.http._metrics_routes import (
    METRICS,
    last_stats,
    prometheus_metrics,
    provide_record,
    record_failure,
    stats_history,
)
from zest.gateway.http._ollama import ACCESS_POLICY, OLLAMA_GENERATION
from zest.gateway.http._ollama_models import OLLAMA_MODELS
from zest.gateway.http._ollama_pull import OLLAMA_PULL
from zest.gateway.http._openapi import STREAMS, openapi_config, openapi_json
from zest.gateway.http._ops import OPS_HANDLERS, describe_loaded, lemonade_health
from zest.gateway.http._responses import (
    collect_body,
    embedding_body,
    embedding_headers,
    header_value,
    route_headers,
    sse_events,
)
from zest.gateway.http._responses_api import ResponseShape
from zest.gateway.http._security import HttpSecurity, body_too_large_message
from zest.gateway.http._tracing import Tracing
from zest.gateway.http._usage_route import usage
from zest.gateway.http._web import web_asset, web_page
from zest.gateway.serving import (
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    Embedded,
    EmbeddingRequest,
    ExplainRequest,
    Reloader,
    ResponsesRequest,
    Runtime,
    SamplingFields,
    Settings,
    TaskRequest,
    build_prompt,
    close_all,
    describe_inventory,
    embed_inputs,
    explain_request,
    explain_task,
    prompt_to_judge,
    start_choices,
    start_generation,
    tool_use_for,
)
from zest.router import REMOTE_DEVICE, RoutesFile, find_route

__all__ = ["create_app"]

log = logging.getLogger("zest.gateway")
Kind = Literal["chat", "completion"]
MAX_PROMPT_TOKENS = 1_048_576  # the longest context a routes file may give a model


async def _respond(
    request: Request[Any, Any, Any],
    runtime: Runtime,
    name: str,
    kind: Kind,
    body: SamplingFields,
    *,
    record: RequestRecord,
    echo: str | Sequence[str] = "",
    **inputs: Any,
) -> Response[Any]:
    """Generate and answer; `echo` (a completion's echo: true: its prompt, or each prompt of
    a batch) comes before the text."""
    request_id = request_id_of(request)
    batch = len(inputs.get("prompts") or ()) or 1
    request.state[AFFINITY_STATE] = request_affinity(
        request.headers, name, inputs.get("messages"), inputs.get("prompt")
    )
    if request.headers.get("x-zest-route-trace") == "1":  # as route_trace: true in the body
        body = body.model_copy(update={"route_trace": True})
    # Watched from arrival: a client gone while queued or prefilling cancels its generation.
    gens = await unless_disconnected(
        request,
        start_choices(
            runtime,
            name,
            kind=kind,
            body=body,
            request_id=request_id,
            events=record,
            caller=caller_of(request),
            **inputs,
        ),
    )
    gen = gens[0]  # what served the first choice is what the headers show
    metadata_read(request, gen)
    if body.stream:
        headers = {**route_headers(gen), **request_headers(request, request_id)}
        events = sse_events(gens, kind, name, body.include_usage(), echo, prompts=batch)
        return event_stream(events, headers)
    try:
        payload = await unless_disconnected(
            request, collect_body(gens, kind, name, echo, prompts=batch)
        )
    except RequestError as exc:  # after the first token (a total timeout): say what served it
        exc.headers = {**route_headers(gen), **exc.headers, **request_headers(request, request_id)}
        raise
    finally:
        await close_all(gens)
    return Response(payload, headers={**route_headers(gen), **request_headers(request, request_id)})


@post("/chat/completions", status_code=200, opt=STREAMS, responses=answers(ChatCompletion))
async def chat_completions(
    data: ChatRequest, request: Request[Any, Any, Any], runtime: Runtime, record: RequestRecord
) -> Response[Any]:
    answer_schema = data.response_format.constraint() if data.response_format else None
    tools = tool_use_for(data.tools, data.tool_choice, answer_schema, data.parallel_tool_calls)
    return await _respond(
        request,
        runtime,
        data.model,
        "chat",
        data,
        record=record,
        messages=data.messages,
        tools=tools,
    )


@post("/completions", status_code=200, opt=STREAMS, responses=answers(Completion))
async def completions(
    data: CompletionRequest,
    request: Request[Any, Any, Any],
    runtime: Runtime,
    record: RequestRecord,
) -> Response[Any]:
    prompts = data.prompts()
    return await _respond(
        request,
        runtime,
        data.model,
        "completion",
        data,
        record=record,
        prompt=data.routing_text(),  # what the rules read; a batch's each prompt in `prompts`
        prompts=prompts if len(prompts) > 1 else None,
        suffix=data.suffix,
        echo=prompts if data.echo else "",
    )


@post(
    "/tasks/{task:str}",
    status_code=200,
    opt=STREAMS,
    responses=answers(ChatCompletion | Completion | EmbeddingList),  # by the route's kind
)
async def task_endpoint(
    task: str,
    data: TaskRequest,
    request: Request[Any, Any, Any],
    runtime: Runtime,
    record: RequestRecord,
) -> Response[Any]:
    route = runtime.routes.config.routes.get(task)  # its kind only: the request reads the table
    if route is not None and route.kind == "embedding":
        if data.messages is not None:
            raise BadRequestError(
                f"task {task!r} is an embedding route: send 'input' (or 'prompt'), not messages",
                param="messages",
            )
        done = await embed_inputs(
            runtime, task, [data.text() or ""], events=record, caller=caller_of(request)
        )
        return _embedding_response(request, done, task, "float", record)
    kind: Kind = route.kind if route and route.kind != "embedding" else "chat"
    if data.messages is not None:
        if kind == "completion":
            raise BadRequestError(
                f"task {task!r} is a completion route: send 'prompt' (or 'input'), not messages",
                param="messages",
            )
        return await _respond(
            request, runtime, task, kind, data, record=record, messages=data.messages
        )
    text = data.text() or ""
    if not text.strip():  # nothing to answer: never invent text from the system prompt alone
        raise BadRequestError(
            f"the {'prompt' if data.prompt is not None else 'input'} is empty: send some text",
            param="prompt" if data.prompt is not None else "input",
        )
    if kind == "chat":
        messages = [ChatMessage(role="user", content=text)]
        return await _respond(request, runtime, task, kind, data, record=record, messages=messages)
    return await _respond(request, runtime, task, kind, data, record=record, prompt=text)


@post("/responses", status_code=200, opt=STREAMS, responses=answers(ResponseObject))
async def responses(
    data: ResponsesRequest,
    request: Request[Any, Any, Any],
    runtime: Runtime,
    record: RequestRecord,
) -> Response[Any]:
    """OpenAI's Responses API on chat tasks: text in and out, instructions, streaming events,
    tools and text.format as on /v1/chat/completions."""
    if request.headers.get("x-zest-route-trace") == "1":
        data = data.model_copy(update={"route_trace": True})
    request_id = request_id_of(request)
    request.state[AFFINITY_STATE] = request_affinity(request.headers, data.model, data.messages())
    sampling = data.sampling()
    gen = await unless_disconnected(
        request,
        start_generation(
            runtime,
            data.model,
            kind="chat",
            body=sampling,
            request_id=request_id,
            messages=data.messages(),
            tools=data.tool_use(),
            events=record,
            routing=data.routing_inputs(),
            caller=caller_of(request),
        ),
    )
    metadata_read(request, gen)
    shape = ResponseShape(gen, data)
    headers = {**route_headers(gen), **request_headers(request, request_id)}
    if data.stream:
        return event_stream(shape.events(), headers)
    try:
        payload = await unless_disconnected(request, shape.body())
    finally:
        await gen.aclose()
    return Response(payload, headers=headers)


@post("/embeddings", status_code=200, responses=answers(EmbeddingList))
async def embeddings(
    data: EmbeddingRequest,
    request: Request[Any, Any, Any],
    runtime: Runtime,
    record: RequestRecord,
) -> Response[Any]:
    """OpenAI embeddings; `model` names a task of kind embedding."""
    done = await unless_disconnected(
        request,
        embed_inputs(runtime, data.model, data.inputs(), events=record, caller=caller_of(request)),
    )
    return _embedding_response(request, done, data.model, data.encoding_format, record)


def _embedding_response(
    request: Request[Any, Any, Any],
    done: Embedded,
    requested_model: str,
    encoding: Literal["float", "base64"],
    record: RequestRecord,
) -> Response[Any]:
    record.finish("ok")  # served: counted as a request that ended well
    request_id = request_id_of(request)
    headers = {**embedding_headers(done), **request_headers(request, request_id)}
    return Response(embedding_body(done, requested_model, encoding), headers=headers)


@get("/models", responses=answers(ModelList))
async def list_models(runtime: Runtime) -> dict[str, Any]:
    return {"object": "list", "data": list(_model_entries(runtime.routes.config).values())}


@get("/models/{model_id:path}", responses=answers(ModelEntry))
async def retrieve_model(model_id: str, runtime: Runtime) -> dict[str, Any]:
    """One entry of GET /v1/models (the openai client's models.retrieve): a task, or a model
    callable by id (expose_models)."""
    entries = _model_entries(runtime.routes.config)
    found = entries.get(model_id.lstrip("/"))
    if found is None:
        raise UnknownTaskError(
            f"unknown model {shown(model_id.lstrip('/'))}: use one of {', '.join(entries)} "
            "(GET /v1/models lists them)"
        )
    return found


def _model_entries(config: RoutesFile) -> dict[str, dict[str, Any]]:
    """The tasks, then (expose_models) the models, as OpenAI model objects by id."""
    entries = {
        task: {
            "id": task,
            "object": "model",
            "created": 0,
            "owned_by": "zest",
            "zest": {
                "type": "task",
                "kind": route.kind,
                "model": route.model,
                # A remote model runs on no local device: say where it goes instead.
                "device": route.device if config.models[route.model].local else REMOTE_DEVICE.name,
                "description": route.description,
            },
        }
        for task, route in config.routes.items()
    }
    for model_id, model in config.models.items():
        if config.exposes(model_id):
            entries.setdefault(
                model_id,
                {
                    "id": model_id,
                    "object": "model",
                    "created": 0,
                    "owned_by": "zest",
                    "zest": {"type": "model", "engine": model.engine},
                },
            )
    return entries


@get("/routes/{task:str}/explain")
async def explain_get(task: str, runtime: Runtime, prompt_tokens: int = 0) -> dict[str, Any]:
    """The plan for a prompt of `prompt_tokens` tokens, without running it."""
    if not 0 <= prompt_tokens <= MAX_PROMPT_TOKENS:
        raise BadRequestError(
            f"prompt_tokens must be from 0 to {MAX_PROMPT_TOKENS}: send the prompt's length "
            "in tokens",
            param="prompt_tokens",
        )
    routes = runtime.routes
    find_route(task, None, routes.config)  # an unknown task is a 404 before anything is read
    return explain_task(
        routes.config,
        runtime.inventory,
        task,
        prompt_tokens,
        runtime.queue_depths(),
        strict_privacy=runtime.strict_privacy,
        contexts=await runtime.model_contexts(routes),
        device_bytes=runtime.device_bytes,
    )


@post("/routes/{task:str}/explain", status_code=200)
async def explain_post(task: str, data: TaskRequest, runtime: Runtime) -> dict[str, Any]:
    """The plan for the request in the body (its prompt is counted with the model's tokenizer)."""
    routes = runtime.routes
    route = find_route(task, None, routes.config)
    messages = data.messages
    if messages is None and route.kind == "chat":
        messages = [ChatMessage(role="user", content=data.text() or "")]
    kind: Kind = "completion" if route.kind == "embedding" else route.kind  # text as it is
    prompt = build_prompt(route, kind, messages, data.text())
    tokens = await runtime.count_prompt(routes, route.model, prompt)
    requested = data.requested_max_tokens()
    return explain_task(
        routes.config,
        runtime.inventory,
        task,
        tokens,
        runtime.queue_depths(),
        strict_privacy=runtime.strict_privacy,
        contexts=await runtime.model_contexts(routes),
        device_bytes=runtime.device_bytes,
        prompt=await prompt_to_judge(runtime, routes, route, prompt, requested=requested),
    )


@post("/explain", status_code=200)
async def explain_request_post(data: ExplainRequest, runtime: Runtime) -> dict[str, Any]:
    """The routing decision for `request` sent to `task` (with its trace), then the plan of
    the route it chose, for that request's prompt; nothing is generated."""
    find_route(data.task, None, runtime.routes.config)  # an unknown task is a 404
    return await explain_request(runtime, data.task, data.request)


@get("/system-info")
async def system_info(runtime: Runtime) -> dict[str, Any]:
    """The devices found, how each was detected, which engines can use it, what is loaded."""
    return {**describe_inventory(runtime.inventory), "loaded": describe_loaded(runtime)}


@get("/health", responses=answers(Health))
async def health(runtime: Runtime) -> dict[str, Any]:
    """Liveness: the process answers (readiness, models loaded, is GET /v1/ready); with
    Lemonade's model_loaded (the model used last) and all_models_loaded for its clients."""
    loaded = sorted({entry.info.model for entry in runtime.pool.loaded()})
    return {
        "status": "ok",
        "state": runtime.state,
        "models_loaded": loaded,
        **lemonade_health(runtime),
    }


@head("/health")
async def health_head() -> Response[None]:
    """GET /health's answer without its body: load balancers probe with HEAD."""
    return Response(None, status_code=200, media_type=MediaType.TEXT)  # no body: length 0


def _request_error(request: Request[Any, Any, Any], exc: RequestError) -> Response[Any]:
    record_failure(request, exc)
    headers = {"x-request-id": request_id_of(request), **exc.headers}
    if affinity := request.state.get(AFFINITY_STATE):  # a generation's: retried with it
        headers["x-zest-affinity"] = affinity
    if exc.tried:  # the answer lists every attempt the request tried
        headers["x-zest-fallbacks"] = header_value(" | ".join(exc.tried))
    return _error_response(request, exc.status_code, exc.to_body(), headers)


def _error_response(
    request: Request[Any, Any, Any], status: int, body: dict[str, Any], headers: dict[str, str]
) -> Response[Any]:
    """An error in the shape of the dialect the endpoint speaks (OpenAI's by default)."""
    status, shaped = dialect_of(request.scope).shaped(status, body)
    return Response(shaped, status_code=status, headers=headers)


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    if _no_body(exc):  # Litestar reads no empty body: say what reading it says
        try:
            read_empty_body(request)
        except RequestError as error:
            return _request_error(request, error)
    record_failure(request, exc)
    status = exc.status_code
    message = exc.detail or "error"
    if status == 404:
        message = (
            f"no such endpoint: {request.method} {clipped(request.url.path)} "
            "(see docs/http-api.md for the API)"
        )
    elif status == 405:
        message = f"method {request.method} is not allowed on {clipped(request.url.path)}"
    elif status == 413:
        message = body_too_large_message(request.route_handler.resolve_request_max_body_size())
    param = None
    if isinstance(exc, ValidationException) and isinstance(exc.extra, list) and exc.extra:
        message, param = _parameter_error(exc.extra[0])  # Litestar's names the whole URL
    body = error_body(message, type="invalid_request_error", param=param)
    headers = {"x-request-id": request_id_of(request), **(exc.headers or {})}
    return _error_response(request, status, body, headers)


def _no_body(exc: HTTPException) -> bool:
    """Litestar's 400 for a handler's `data` that was not sent (an empty body)."""
    problems = exc.extra if isinstance(exc, ValidationException) else None
    return isinstance(problems, list) and any(
        isinstance(problem, dict) and problem.get("key") == "data" for problem in problems
    )


def _parameter_error(problem: Any) -> tuple[str, str | None]:
    """A query or path parameter Litestar could not read, named without echoing the URL."""
    key = clipped(str(problem.get("key", ""))) if isinstance(problem, dict) else ""
    why = str(problem.get("message", "")) if isinstance(problem, dict) else ""
    where = f"{key}: " if key else ""
    message = f"{where}{clipped(why, 200) or 'invalid'}: GET /v1/openapi.json says what it takes"
    return message, key or None


def _internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unhandled error", exc_info=exc)
    record_failure(request, exc)
    body = error_body("internal error: see the server log", type="server_error")
    return _error_response(request, 500, body, {"x-request-id": request_id_of(request)})


# What answers while the server drains: the probes (readiness says 503) and the metrics.
_OPEN_WHILE_DRAINING = PUBLIC_PATHS | {"/metrics", "/v1/metrics", "/api/v1/metrics"}


def _drain_guard(runtime: Runtime) -> Callable[[ASGIConnection[Any, Any, Any, Any], Any], None]:
    def refuse_while_draining(connection: ASGIConnection[Any, Any, Any, Any], _: Any) -> None:
        if runtime.drain.draining and connection.url.path not in _OPEN_WHILE_DRAINING:
            raise runtime.drain.refusal()

    return refuse_while_draining


def create_app(
    runtime: Runtime, settings: Settings | None = None, tracing: Tracing | None = None
) -> Litestar:
    """The ASGI app; `runtime` starts (warm start, sweeps, reload triggers) on startup and is
    closed on shutdown.

    `settings` (default: from the environment) gives its keys, CORS origins, body limit and
    whether the routes file is watched, and arms the runtime (Runtime.apply: strict privacy,
    the cache folder).
    """
    settings = settings or Settings()
    runtime.apply(settings)
    security = HttpSecurity.from_settings(settings)
    directory = ClientDirectory(runtime)  # the named clients' keys, per routes table
    reloader = Reloader(runtime, watch=settings.watch)
    handlers = [
        *OPS_HANDLERS,
        chat_completions,
        completions,
        embeddings,
        responses,
        *ANTHROPIC_HANDLERS,
        task_endpoint,
        list_models,
        retrieve_model,
        health,
        health_head,
        explain_get,
        explain_post,
        explain_request_post,
        system_info,
        prometheus_metrics,
        last_stats,
        stats_history,
        usage,
        openapi_json,
    ]
    metrics = Metrics(runtime)
    # Traces, when OTEL_EXPORTER_OTLP_ENDPOINT says where (`tracing`: given, as tests give one).
    metrics.tracing = tracing or Tracing.from_environment()
    mcp = McpMount(runtime, metrics, security.max_body_bytes)
    reloader.observers.append(mcp.routes_changed)

    @asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        await runtime.start()
        reloader.start()
        try:
            yield
        finally:
            await mcp.close()
            await reloader.stop()
            await runtime.close()

    async def provide_runtime() -> Runtime:
        return runtime

    async def provide_reloader() -> Reloader:
        return reloader

    async def provide_metrics() -> Metrics:
        return metrics

    from litestar.di import Provide

    return Litestar(
        route_handlers=[
            Router("/api/v1", route_handlers=handlers, include_in_schema=False),  # /v1's twin
            Router("/v1", route_handlers=handlers),
            # Ollama's API, beside /api/v1 (no path of one is a path of the other).
            Router("/api", route_handlers=[*OLLAMA_GENERATION, *OLLAMA_MODELS, *OLLAMA_PULL]),
            prometheus_metrics,  # also at the top level, where scrapers look by default
            mcp.handler(),  # POST /mcp: the tasks as MCP tools
            web_page,
            web_asset,
        ],
        dependencies={
            "runtime": Provide(provide_runtime, use_cache=True),
            "reloader": Provide(provide_reloader, use_cache=True),
            "metrics": Provide(provide_metrics, use_cache=True),
            "record": Provide(provide_record),
        },
        exception_handlers={
            RequestError: _request_error,
            HTTPException: _http_error,
            Exception: _internal_error,
        },
        plugins=[JsonBodyPlugin()],
        middleware=[release_held],  # what a request held is given back when it ends
        state=State(
            {METRICS: metrics, ACCESS_POLICY: security.policy, CLIENT_DIRECTORY: directory}
        ),
        lifespan=[lifespan],
        before_send=[replica_header(settings.replica())],
        guards=[_drain_guard(runtime), *security.guards_with(directory.current)],
        cors_config=security.cors,
        request_max_body_size=security.max_body_bytes,
        openapi_config=openapi_config(),
        logging_config=None,
    )
