"""What a replica of a fleet says about a request: the affinity key it was routed by
(x-zest-affinity, see zest.affinity) and which replica served it (x-zest-replica)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

from litestar.datastructures import MutableScopeHeaders
from litestar.types import Message, Scope

from zest.affinity import AFFINITY_HEADER, SESSION_HEADER, affinity_key, client_key
from zest.gateway.serving import ChatMessage

__all__ = ["AFFINITY_STATE", "REPLICA_HEADER", "replica_header", "request_affinity"]

REPLICA_HEADER = "x-zest-replica"
AFFINITY_STATE = "zest_affinity"  # request.state key: the key, once computed


def request_affinity(
    headers: Mapping[str, str],
    route: str,
    messages: Sequence[ChatMessage] | None = None,
    prompt: str | None = None,
) -> str:
    """The key a generation request is routed by: the client's x-session-id or x-zest-affinity,
    else the one computed from its route and the stable start of its prompt."""
    chosen = client_key(headers.get(SESSION_HEADER), headers.get(AFFINITY_HEADER))
    if chosen is not None:
        return chosen
    if messages is None:
        return affinity_key(prompt or "", route)
    return affinity_key([{"role": m.role, "content": m.text()} for m in messages], route)


def replica_header(replica: str) -> Callable[[Message, Scope], Awaitable[None]]:
    """A hook on every answer the app sends (errors, probes and the web page included) that
    names this replica, so that a client behind a balancer can see which one served it."""
    value = " ".join(replica.split()).encode("ascii", "replace").decode("ascii")

    async def name_the_replica(message: Message, _: Scope) -> None:
        if message["type"] == "http.response.start":
            MutableScopeHeaders.from_message(message)[REPLICA_HEADER] = value

    return name_the_replica
