"""Operations endpoints: the routes in force and reloading them, the loaded models and loading
or unloading them, readiness. Handlers marked `opt={"admin": True}` change the server's state
(the admin key guards them when keys are configured). Load and unload also take Lemonade's
shape (`model_name`, a task id) and answer with its `status` and `message` beside zest's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar import MediaType, Response, get, head, post
from pydantic import BaseModel, ConfigDict, model_validator

from zest.engines import LoadedEngine, describe
from zest.errors import BadRequestError, ModelBusyError, shown
from zest.gateway.http._answers import Readiness, answers
from zest.gateway.serving import Reloader, Runtime, describe_inventory
from zest.router import LoadedRoutes, Placement, parse_device, rules_summary

__all__ = ["OPS_HANDLERS", "describe_loaded", "lemonade_health"]

ADMIN = {"admin": True}


class ModelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # A model id of the routes file, or a task id (GET /v1/models): that task's model.
    model: str | None = None
    model_name: str | None = None  # Lemonade's name for `model`
    # cpu, gpu, npu or PREFILL->DECODE; default: where the task (else the model's first
    # route) places it.
    device: str | None = None

    @model_validator(mode="after")
    def _one_name(self) -> ModelRequest:
        if (self.model is None) == (self.model_name is None):
            raise ValueError(
                "send model (or Lemonade's model_name), once: a model or task id of the routes file"
            )
        return self

    def named(self) -> tuple[str, str]:
        """The name sent, and the key it was sent as (what an error names)."""
        if self.model is not None:
            return self.model, "model"
        return self.model_name or "", "model_name"


@dataclass(frozen=True)
class Target:
    """What a load or unload names: a model, or a task whose model it is."""

    model: str
    task: str | None


@get("/routes")
async def routes_in_force(runtime: Runtime, reloader: Reloader) -> dict[str, Any]:
    """The routes table serving now, when it was loaded, and the last reload that failed;
    `rules`: each route's rules in order, their conditions as text (the web page lists them)."""
    config = runtime.routes.config
    return {
        **reloader.status(),
        "config": config.model_dump(mode="json"),
        "rules": {task: rules_summary(route.rules) for task, route in config.routes.items()},
    }


@post("/admin/reload", status_code=200, opt=ADMIN)
async def admin_reload(reloader: Reloader) -> Response[Any]:
    outcome = await reloader.reload("admin")
    if outcome.ok:
        return Response({"reloaded": True, **reloader.status()})
    message = (
        f"{reloader.path} was rejected and the previous routes keep serving: fix these and "
        "reload again: " + "; ".join(outcome.problems)
    )
    error = {
        "message": message,
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_routes_file",
        "errors": list(outcome.problems),
    }
    return Response({"error": error}, status_code=422)


@get("/loaded")
async def loaded_models(runtime: Runtime) -> dict[str, Any]:
    # Generations in flight across every model, from arrival to their stream's close.
    return {
        "object": "list",
        "data": describe_loaded(runtime),
        "in_flight": runtime.drain.in_flight,
    }


@post("/load", status_code=200, opt=ADMIN)
async def load_model(data: ModelRequest, runtime: Runtime) -> dict[str, Any]:
    routes = runtime.routes
    target = _target(routes, data)
    placement = _placement(runtime, routes, target, data.device)
    lease = await runtime.acquire(routes, target.model, placement)
    lease.release()
    loaded = [entry for entry in runtime.pool.loaded() if entry.info is lease.info]
    return {
        "loaded": True,
        "data": describe_loaded(runtime, loaded),
        "status": "success",  # Lemonade's
        "message": f"Loaded model: {data.named()[0]}",
    }


@post("/unload", status_code=200, opt=ADMIN)
async def unload_model(data: ModelRequest, runtime: Runtime) -> dict[str, Any]:
    target = _target(runtime.routes, data)
    key = None
    if data.device is not None:
        key = _placement(runtime, runtime.routes, target, data.device).key
    entries = runtime.pool.find(target.model, key)
    busy = [entry for entry in entries if entry.busy]
    if busy:
        raise ModelBusyError(
            f"model {target.model!r} is serving {sum(e.leases for e in busy)} request(s) on "
            f"{', '.join(e.info.device for e in busy)}: retry when they end",
            code="model_busy",
        )
    listing = describe_loaded(runtime, entries)
    for entry in entries:
        await runtime.pool.unload(entry, "asked by POST /unload")
    return {"unloaded": listing, "status": "success", "message": "Model unloaded successfully"}


@get("/ready", responses=answers(Readiness))
async def ready(runtime: Runtime) -> Response[Any]:
    """200 once the warm start has loaded its models and every route can serve its own
    requests (`ready`; `degraded` while a route that only routing rules run cannot be served:
    `degraded_rules` names it, its models and its rules, which take their on_error path);
    503 while loading, when it failed, or while a route cannot serve its own requests
    (`unservable`: no device here runs it, its model files are broken, or its models failed
    to load). Routes the privacy in force forbids (ZEST_PRIVACY=strict, remote models only)
    are listed, not judged: nothing will ever serve them here. Liveness is /health."""
    inventory = describe_inventory(runtime.inventory)
    readiness = runtime.readiness()
    body = {
        "status": readiness.status,
        "ready": readiness.ready,
        "unservable_routes": readiness.unservable,
        "unservable_by_privacy": readiness.forbidden,
        "degraded_rules": readiness.rules_degraded,
        "limits_store": readiness.limits_store,
        "models": describe_loaded(runtime),
        "loading": [model for model, _, _ in runtime.pool.loading()],
        "preload_errors": runtime.preload_errors,
        "devices": [
            {key: device[key] for key in ("name", "emulated", "engines") if key in device}
            for device in inventory["devices"]
        ],
    }
    return Response(body, status_code=200 if readiness.ready else 503)


@head("/ready")
async def ready_head(runtime: Runtime) -> Response[None]:
    """GET /ready's status without its body: load balancers probe with HEAD."""
    status = 200 if runtime.readiness().ready else 503
    return Response(None, status_code=status, media_type=MediaType.TEXT)  # no body: length 0


def describe_loaded(
    runtime: Runtime, entries: list[LoadedEngine] | None = None
) -> list[dict[str, Any]]:
    """Loaded engines (default: all) as /v1/loaded, /v1/ready and system-info list them."""
    entries = runtime.pool.loaded() if entries is None else entries
    now = runtime.pool.clock()
    return [describe(entry, now, runtime.model_policy(entry.spec.model_id)) for entry in entries]


def lemonade_health(runtime: Runtime) -> dict[str, Any]:
    """Lemonade's fields of GET /health: the model used last, and every loaded one."""
    entries = runtime.pool.loaded()
    latest = max(entries, key=lambda entry: entry.last_used, default=None)
    return {
        "model_loaded": latest.info.model if latest else None,
        "all_models_loaded": [
            {"model_name": e.info.model, "device": e.info.device, "recipe": e.info.engine}
            for e in entries
        ],
    }


def _target(routes: LoadedRoutes, data: ModelRequest) -> Target:
    """The model a request names: a model id, else a task's (as GET /v1/models lists them)."""
    name, key = data.named()
    config = routes.config
    if name in config.models:
        return Target(name, None)
    if name in config.routes:
        return Target(config.routes[name].model, name)
    raise BadRequestError(
        f"{key}: unknown model {shown(name)}: use a model id ({', '.join(sorted(config.models))})"
        f" or a task id ({', '.join(sorted(config.routes))}) of the routes file",
        param=key,
    )


def _placement(
    runtime: Runtime, routes: LoadedRoutes, target: Target, device: str | None
) -> Placement:
    if device is None:
        tasks = [target.task] if target.task else list(routes.config.routes)
        for task in tasks:
            route = routes.config.routes[task]
            if route.model == target.model:
                return runtime.plan(routes, task, route, prompt_tokens=0).first.placement
        return runtime.default_placement(routes, target.model)
    names = parse_device(device) if device not in ("auto",) else None
    devices = runtime.devices
    if names is None or any(name not in devices for name in names):
        raise BadRequestError(
            f"device: {shown(device)} is not a device here: use one of "
            f"{', '.join(sorted(devices))} or PREFILL->DECODE",
            param="device",
        )
    return Placement(devices[names[0]], devices[names[1]])


OPS_HANDLERS = [
    routes_in_force,
    admin_reload,
    loaded_models,
    load_model,
    unload_model,
    ready,
    ready_head,
]
