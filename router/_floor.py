"""A route as one named client gets it: held to the client's privacy floor, its priority moved
by the client's offset. Privacy only tightens: a client never loosens a route."""

from __future__ import annotations

from typing import Any

from zest.router._clients import ClientConfig
from zest.router._schema import RouteConfig

__all__ = ["PRIORITY_RANGE", "route_for_client"]

PRIORITY_RANGE = (-200, 200)  # a route's priority (-100..100) plus a client's offset


def route_for_client(
    route: RouteConfig, name: str, client: ClientConfig | None, *, priority: bool = True
) -> RouteConfig:
    """`route` for client `name`: local_only when the client is (its plan then says the
    client kept the request local), and (`priority`) at the route's priority plus the
    client's; `route` itself when the client changes neither (no copy: most requests)."""
    if client is None:
        return route
    update: dict[str, Any] = {}
    # A route the file lets reach remote models, even if a rule's caller tightened it since.
    loosened = route.privacy != "local_only" or route.privacy_kept_from is not None
    floor = client.privacy == "local_only" and loosened and route.privacy_floor_of != name
    if floor:
        update["privacy"] = "local_only"
    if priority and client.priority:
        low, high = PRIORITY_RANGE
        update["priority"] = max(low, min(high, route.priority + client.priority))
    if not update:
        return route
    held = route.model_copy(update=update)
    held._privacy_kept_from = route.privacy_kept_from
    held._privacy_floor_of = name if floor else route.privacy_floor_of
    return held
