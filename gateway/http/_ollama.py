"""Ollama's API at /api (beside /api/v1, whose paths it never shares): /api/chat,
/api/generate, /api/embed and /api/embeddings through the one request path, the model
listings and lifecycle in _ollama_models.py.

Each body becomes the request the OpenAI endpoints build (chat messages, the sampling fields,
tools, the answer's format) and goes through `start_choices` / `embed_inputs` as theirs do:
routing rules, budgets, fallbacks, privacy, admission and metrics apply unchanged, and the
dialect is only the label its handlers carry (errors in Ollama's `{"error": "..."}` shape).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from litestar import Request, Response, post

from zest.errors import BadRequestError, RequestError
from zest.gateway.http._auth import credential_of
from zest.gateway.http._body import IGNORED
from zest.gateway.http._callers import CLIENT_DIRECTORY, caller_of
from zest.gateway.http._dialect import DIALECT, Dialect
from zest.gateway.http._exchange import (
    event_stream,
    metadata_read,
    request_headers,
    request_id_of,
    unless_disconnected,
)
from zest.gateway.http._metrics import RequestRecord
from zest.gateway.http._ollama_shapes import NDJSON, OllamaAnswer, ndjson_line, now_stamp
from zest.gateway.http._responses import embedding_headers, route_headers
from zest.gateway.serving import (
    Generation,
    KeepAlive,
    OllamaChatRequest,
    OllamaEmbeddingsRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
    Runtime,
    apply_keep_alive,
    close_all,
    embed_inputs,
    load_task,
    start_choices,
    unload_task,
)

__all__ = ["OLLAMA", "OLLAMA_GENERATION", "ollama_error"]

# app.state key: the AccessPolicy, which says whether a request may unload a model.
ACCESS_POLICY = "zest_access_policy"
Shape = Literal["chat", "generate"]
# What a message of zest's names, said for Ollama's clients.
_FOR_OLLAMA = (
    ("docs/http-api.md", "docs/ollama.md"),
    ("GET /v1/models lists them", "GET /api/tags lists them"),
)


def ollama_error(status: int, body: dict[str, Any]) -> tuple[int, Any]:
    """An error in Ollama's shape: `{"error": "the message"}`, the status kept."""
    error = body.get("error")
    message = str(error.get("message", "error")) if isinstance(error, dict) else str(error)
    for zests, ollamas in _FOR_OLLAMA:
        message = message.replace(zests, ollamas)
    return status, {"error": message}


OLLAMA = Dialect("ollama", error_shape=ollama_error)
OPT = {DIALECT: OLLAMA}


def note_ignored(request: Request[Any, Any, Any], names: list[str]) -> None:
    """Fields sent that change nothing here: x-zest-ignored names them."""
    if names:
        request.state[IGNORED] = [*(request.state.get(IGNORED) or []), *names]


def _may_unload(request: Request[Any, Any, Any]) -> bool:
    """Whether the caller may unload models (POST /v1/unload's rule: the admin key, or an
    open loopback server): keep_alive asks for what that route does."""
    policy = request.app.state.get(ACCESS_POLICY)
    if policy is None:
        return True
    try:
        policy.authorize(credential_of(request.headers), admin=True, **_clients(request))
    except RequestError:
        return False
    return True


def _clients(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """The named clients' keys, as the guard compares them (a client's key is an API key)."""
    directory = request.app.state.get(CLIENT_DIRECTORY)
    if directory is None:
        return {}
    keys, entries = directory.current()
    return {"clients": keys, "entries": entries}


def _keep_alive(request: Request[Any, Any, Any], kept: KeepAlive | None) -> KeepAlive | None:
    """The request's keep_alive where it may have its way, else named as ignored."""
    if kept is None:
        return None
    if _may_unload(request):
        return kept
    note_ignored(request, ["keep_alive"])
    return None


def _kind_of(runtime: Runtime, task: str) -> str:
    route = runtime.routes.config.routes.get(task)
    return route.kind if route is not None else "chat"  # a model by id: a chat


@post("/chat", status_code=200, opt=OPT)
async def ollama_chat(
    data: OllamaChatRequest,
    request: Request[Any, Any, Any],
    runtime: Runtime,
    record: RequestRecord,
) -> Response[Any]:
    started = time.perf_counter()
    note_ignored(request, data.ignored())
    keep = _keep_alive(request, data.kept())
    if not data.messages:  # Ollama's way to load (or unload) a model
        asked = (data.task(), data.model, data.kept(), data.stream)
        return await _load_answer(request, runtime, record, asked, keep=keep, shape="chat")
    start = start_choices(
        runtime,
        data.task(),
        kind="chat",
        body=data.sampling(),
        request_id=request_id_of(request),
        events=record,
        caller=caller_of(request),
        messages=data.chat_messages(),
        tools=data.tool_use(),
    )
    gens = await unless_disconnected(request, start)
    shown: tuple[Shape, str, bool] = ("chat", data.model, data.stream)
    return await _answer(request, runtime, gens[0], shown, started=started, keep=keep)


@post("/generate", status_code=200, opt=OPT)
async def ollama_generate(
    data: OllamaGenerateRequest,
    request: Request[Any, Any, Any],
    runtime: Runtime,
    record: RequestRecord,
) -> Response[Any]:
    started = time.perf_counter()
    note_ignored(request, data.ignored())
    task, keep = data.task(), _keep_alive(request, data.kept())
    if data.loads_only():
        asked = (task, data.model, data.kept(), data.stream)
        return await _load_answer(request, runtime, record, asked, keep=keep, shape="generate")
    kind = _kind_of(runtime, task)
    inputs = _generate_inputs(data, task, kind)
    start = start_choices(
        runtime,
        task,
        kind="completion" if kind == "completion" else "chat",
        body=data.sampling(),
        request_id=request_id_of(request),
        events=record,
        caller=caller_of(request),
        **inputs,
    )
    gens = await unless_disconnected(request, start)
    shown: tuple[Shape, str, bool] = ("generate", data.model, data.stream)
    return await _answer(request, runtime, gens[0], shown, started=started, keep=keep)


def _generate_inputs(data: OllamaGenerateRequest, task: str, kind: str) -> dict[str, Any]:
    """A chat route reads the prompt as a user turn (system first); a completion route, or
    raw: true, takes the prompt as it is, its control-token text staying text."""
    if kind == "completion" and data.system:
        raise BadRequestError(
            f"task {task!r} is a completion route: it has no system turn: put the text in the "
            "prompt, or call a chat task",
            param="system",
        )
    if kind == "completion" or data.raw:
        return {"prompt": data.prompt, "suffix": data.suffix}
    if data.suffix is not None:
        raise BadRequestError(
            f"suffix fills in the middle of a completion route's text, and task {task!r} is a "
            "chat route: call a completion task, or leave suffix out",
            param="suffix",
        )
    return {"messages": data.chat_messages()}


async def _answer(
    request: Request[Any, Any, Any],
    runtime: Runtime,
    gen: Generation,
    shown: tuple[Shape, str, bool],
    *,
    started: float,
    keep: KeepAlive | None,
) -> Response[Any]:
    """The answer in Ollama's shape (`shown`: chat or generate, the model as named, whether
    it streams); the request's keep_alive applied once it is over."""
    shape, model, streams = shown
    metadata_read(request, gen)
    after: Callable[[], Awaitable[None]] | None = None
    if keep is not None:

        def after() -> Awaitable[None]:
            return apply_keep_alive(runtime, gen.info, keep)

    answer = OllamaAnswer(gen, shape, model, started, after)
    headers = {**route_headers(gen), **request_headers(request, request_id_of(request))}
    if streams:
        return event_stream(answer.lines(), headers, NDJSON)
    try:
        payload = await unless_disconnected(request, answer.body())
    except RequestError as exc:  # after the first token (a total timeout): say what served it
        exc.headers = {**headers, **exc.headers}
        raise
    finally:
        await close_all([gen])  # answered, failed or abandoned: its slot is given back
    return Response(payload, headers=headers)


async def _load_answer(
    request: Request[Any, Any, Any],
    runtime: Runtime,
    record: RequestRecord,
    asked: tuple[str, str, KeepAlive | None, bool],
    *,
    keep: KeepAlive | None,
    shape: Shape,
) -> Response[Any]:
    """An empty prompt (or no messages): load the task's model, or with keep_alive 0 unload
    it (the unload's rule applies: a caller who may not is refused); answered with Ollama's
    done_reason "load" or "unload". `asked`: the task, the model as named, its keep_alive,
    whether it streams (one NDJSON line, else one JSON body)."""
    task, model, kept, streams = asked
    record.task_named(task)
    runtime.clients.check_task(caller_of(request), task)  # a client loads only its tasks
    if kept is not None and kept.unload:
        _require_unload(request)
        await unload_task(runtime, task)
        reason = "unload"
    else:
        info = await unless_disconnected(request, load_task(runtime, task))
        if keep is not None:
            await apply_keep_alive(runtime, info, keep)
        reason = "load"
    record.finish("ok")
    body: dict[str, Any] = {"model": model, "created_at": now_stamp()}
    if shape == "chat":
        body["message"] = {"role": "assistant", "content": ""}
    else:
        body["response"] = ""
    body |= {"done": True, "done_reason": reason}
    headers = request_headers(request, request_id_of(request))
    if streams:
        return Response(ndjson_line(body), media_type=NDJSON, headers=headers)
    return Response(body, headers=headers)


def _require_unload(request: Request[Any, Any, Any]) -> None:
    """Raise the unload route's 401 or 403 unless the caller may unload models."""
    policy = request.app.state.get(ACCESS_POLICY)
    try:
        if policy is not None:
            policy.authorize(credential_of(request.headers), admin=True, **_clients(request))
    except RequestError as exc:
        exc.message = f"keep_alive 0 unloads the model, as POST /v1/unload does: {exc.message}"
        raise
    if request.state.get(IGNORED):  # it is not ignored: it is done
        request.state[IGNORED] = [n for n in request.state[IGNORED] if n != "keep_alive"]


@post("/embed", status_code=200, opt=OPT)
async def ollama_embed(
    data: OllamaEmbedRequest,
    request: Request[Any, Any, Any],
    runtime: Runtime,
    record: RequestRecord,
) -> Response[Any]:
    started = time.perf_counter()
    note_ignored(request, data.ignored())
    keep = _keep_alive(request, data.kept())
    work = embed_inputs(
        runtime, data.task(), list(data.texts()), events=record, caller=caller_of(request)
    )
    done = await unless_disconnected(request, work)
    record.finish("ok")
    if keep is not None:
        await apply_keep_alive(runtime, done.info, keep)
    body = {
        "model": data.model,
        "embeddings": [list(vector) for vector in done.result.vectors],
        "total_duration": int((time.perf_counter() - started) * 1e9),
        "load_duration": 0,
        "prompt_eval_count": done.result.prompt_tokens,
    }
    headers = {**embedding_headers(done), **request_headers(request, request_id_of(request))}
    return Response(body, headers=headers)


@post("/embeddings", status_code=200, opt=OPT)
async def ollama_embeddings(
    data: OllamaEmbeddingsRequest,
    request: Request[Any, Any, Any],
    runtime: Runtime,
    record: RequestRecord,
) -> Response[Any]:
    """The older endpoint: one prompt, one vector (`{"embedding": [...]}`)."""
    note_ignored(request, ["options"] if data.options is not None else [])
    keep = _keep_alive(request, data.kept())
    work = embed_inputs(
        runtime, data.task(), [data.prompt], events=record, caller=caller_of(request)
    )
    done = await unless_disconnected(request, work)
    record.finish("ok")
    if keep is not None:
        await apply_keep_alive(runtime, done.info, keep)
    headers = {**embedding_headers(done), **request_headers(request, request_id_of(request))}
    return Response({"embedding": list(done.result.vectors[0])}, headers=headers)


OLLAMA_GENERATION = [ollama_chat, ollama_generate, ollama_embed, ollama_embeddings]
