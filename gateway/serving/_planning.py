"""Planning one request: the router's plan, given every model's engine traits as the engines
package registered them (the runtime plans here; explain shows what this returns)."""

from __future__ import annotations

from collections.abc import Mapping

from zest.engines import engine_kind
from zest.router import Device, ModelTraits, Needs, Plan, RouteConfig, RoutesFile, plan_route

__all__ = ["plan_for"]


def plan_for(
    routes: RoutesFile,
    devices: Mapping[str, Device],
    task: str,
    route: RouteConfig,
    *,
    prompt_tokens: int,
    load: Mapping[str, int] | None,
    strict_privacy: bool,
    needs: Needs | None = None,
    device_bytes: Mapping[str, int | None] | None = None,
) -> Plan:
    """The plan of one request, with every model's engine traits (the chain's included):
    attempts whose engine cannot honour what the request `needs` are left out, and devices
    reporting less free memory than a model needs (`device_bytes`, by model id) are not
    chosen for it."""
    sizes = device_bytes or {}
    traits = {
        model_id: ModelTraits(
            model.engine, engine_kind(model.engine).capabilities, sizes.get(model_id)
        )
        for model_id, model in routes.models.items()
    }
    own = traits[route.model]
    return plan_route(
        task,
        route,
        engine=own.engine,
        can_split=own.can_split,
        devices=devices,
        load=load,
        prompt_tokens=prompt_tokens,
        models=traits,
        strict_privacy=strict_privacy,
        needs=needs,
    )
