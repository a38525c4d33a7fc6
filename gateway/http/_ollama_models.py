"""Ollama's model endpoints: /api/tags, /api/show, /api/ps, /api/version, /api/pull and
/api/delete (admin routes, as POST /v1/load and /v1/unload are), and a 501 that says what to
do instead for the endpoints that build or move models (create, copy, push, blobs)."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
from typing import Any

from litestar import Request, Response, get, head, post

from zest.errors import RequestError
from zest.gateway.http._dialect import DIALECT
from zest.gateway.http._ollama import OLLAMA
from zest.gateway.serving import (
    ModelCard,
    OllamaModelRequest,
    Runtime,
    model_card,
    model_cards,
    running_cards,
)

__all__ = ["OLLAMA_MODELS", "OLLAMA_VERSION"]

# The Ollama API version whose fields zest speaks (tool_name, think, format as a schema).
OLLAMA_VERSION = "0.12.0"
OPT = {DIALECT: OLLAMA}
ADMIN_OPT = {DIALECT: OLLAMA, "admin": True}
_FOREVER = dt.timedelta(days=365 * 100)


class NotImplementedHereError(RequestError):
    """An Ollama endpoint that builds or moves models: zest's models are routes.yaml's."""

    status_code = 501
    error_type = "not_implemented"
    outcome = "not_implemented"


@get("/tags", opt=OPT)
async def ollama_tags(runtime: Runtime) -> dict[str, Any]:
    """The tasks (and models callable by id), as Ollama lists its models."""
    return {"models": [card.listing() for card in await model_cards(runtime)]}


@post("/show", status_code=200, opt=OPT)
async def ollama_show(data: OllamaModelRequest, runtime: Runtime) -> dict[str, Any]:
    card = await model_card(runtime, data.task())
    return _shown(card)


def _shown(card: ModelCard) -> dict[str, Any]:
    route, arch = card.route, card.details()["family"] or "unknown"
    sampling = route.sampling
    parameters = [
        f"temperature {sampling.temperature:g}",
        f"top_p {sampling.top_p:g}",
        f"top_k {sampling.top_k}",
        f"repeat_penalty {sampling.repeat_penalty:g}",
        f"num_predict {route.max_tokens}",
        *(f'stop "{stop}"' for stop in sampling.stop),
    ]
    info: dict[str, Any] = {"general.architecture": arch}
    if (context := card.context_length()) is not None:
        info[f"{arch}.context_length"] = context
    if isinstance(count := card.metadata.get("general.parameter_count"), int):
        info["general.parameter_count"] = count
    return {
        "modelfile": f"# zest task {card.task}: model {card.model_id} (routes.yaml)\n",
        "parameters": "\n".join(parameters),
        "template": str(card.metadata.get("tokenizer.chat_template") or ""),
        "system": route.system_prompt or "",
        "details": card.details(),
        "model_info": info,
        "capabilities": card.capabilities(),
        "modified_at": card.modified_at,
    }


@get("/ps", opt=OPT)
async def ollama_ps(runtime: Runtime) -> dict[str, Any]:
    """The tasks whose model is loaded, with when it unloads if left idle."""
    now, clock = dt.datetime.now(dt.UTC), runtime.pool.clock()
    models = []
    for card, entry, keep in await running_cards(runtime):
        idle = 0.0 if entry.busy else clock - entry.last_used
        left = _FOREVER if keep is None else dt.timedelta(seconds=max(keep - idle, 0.0))
        models.append(
            {
                **card.listing(),
                "expires_at": (now + left).isoformat().replace("+00:00", "Z"),
                "size_vram": 0,  # zest's devices here hold no separate video memory
                "context_length": card.context_length(),
                "zest": {"device": entry.info.device, "engine": entry.info.engine},
            }
        )
    return {"models": models}


@get("/version", opt=OPT)
async def ollama_version() -> dict[str, Any]:
    return {"version": OLLAMA_VERSION, "zest": importlib.metadata.version("zest-gateway")}


def _not_here(what: str) -> NotImplementedHereError:
    return NotImplementedHereError(
        f"{what} is not something zest does: its models are the routes file's; add a model "
        "to routes.yaml (zest models pull fetches its file) and reload"
    )


@post(["/create", "/copy", "/push", "/blobs/{digest:str}"], opt=OPT)
async def ollama_not_implemented(request: Request[Any, Any, Any]) -> Response[Any]:
    raise _not_here(f"POST {request.url.path}")


@head("/blobs/{digest:str}", opt=OPT)
async def ollama_blob_head(digest: str) -> Response[None]:
    raise _not_here("HEAD /api/blobs")


OLLAMA_MODELS = [
    ollama_tags,
    ollama_show,
    ollama_ps,
    ollama_version,
    ollama_not_implemented,
    ollama_blob_head,
]
