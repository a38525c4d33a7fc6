"""A request's way in, before any model work: its caller's admission (a task the client may not
call is a 403, a limit reached a 429: serving/_clients.py), then its route's response cache
(serving/_answer_cache.py). What the door opens on follows the request to its end: the ticket
is settled and the answer kept through the events of each choice."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel

from zest.gateway.serving._answer_cache import CacheKey, KeptAnswer, Recorder, replay
from zest.gateway.serving._clients import Caller, Ticket
from zest.gateway.serving._events import RequestEvents
from zest.router import find_route

if TYPE_CHECKING:
    from zest.gateway.serving._runtime import Runtime

__all__ = ["Door", "open_door"]

G = TypeVar("G")

Kind = Literal["chat", "completion", "embedding"]


@dataclass
class Door:
    """What admitted a request: its ticket, and its cache key (None: nothing is kept) with the
    answer kept for it (a hit) or the recorder that keeps the answer it gets (a miss)."""

    caller: Caller
    ticket: Ticket
    key: CacheKey | None = None
    kept: KeptAnswer | None = None
    recorder: Recorder | None = None

    def observer(self, events: RequestEvents | None, choice: int = 0) -> RequestEvents:
        """The events of one choice: `events`, then the recorder, then the ticket."""
        observed = events or RequestEvents()
        if self.recorder is not None:
            observed = self.recorder.observer(observed, choice)
        return self.ticket.observer(observed)

    @property
    def cache(self) -> Literal["hit", "miss"] | None:
        if self.kept is not None:
            return "hit"
        return "miss" if self.key is not None else None

    def abandon(self) -> None:
        """The request failed before its answer began: the ticket is released at once."""
        self.ticket.release()

    def replayed(
        self, name: str, events: RequestEvents | None, generation: Callable[..., G]
    ) -> list[G]:
        """The kept answer as the request's generations: one per choice, its deltas those the
        engine gave, served by the device `cache`. `generation`: serving/_generation.py's
        Generation, handed in (the front door imports this module, not the reverse)."""
        kept = self.kept
        assert kept is not None
        info = dataclasses.replace(kept.info, device="cache")
        gens = []
        for choice, deltas in enumerate(kept.choices):
            observed = self.observer(events if choice == 0 else None, choice)
            gen = generation(
                kept.plan,
                kept.attempt,
                info=info,
                first=deltas[0],
                rest=replay(deltas[1:]),
                events=observed,
                cache="hit",
                headers=self.ticket.headers,
                **kept.extras,
            )
            observed.task_named(name)
            observed.attempt(kept.model, info.device)
            observed.first_token(gen)
            gens.append(gen)
        return gens


async def open_door(
    runtime: Runtime,
    caller: Caller,
    name: str,
    *,
    kind: Kind,
    body: BaseModel,
    inputs: dict[str, Any],
    prompts: int = 1,
) -> Door:
    """Admit `caller`'s request of `name` (403 before the task is even looked up: a client
    learns nothing of tasks it may not call; then 404, then 429), and look its answer up.
    `prompts`: a completions batch's, each answered by the body's n choices (admitted, its
    tokens reserved for every answer; never answered from the cache)."""
    gate = runtime.clients
    gate.check_task(caller, name)
    routes = runtime.routes
    route = find_route(name, kind, routes.config)
    choices = int(getattr(body, "n", 1) or 1) * prompts
    reserve = 0
    if kind != "embedding":
        asked = getattr(body, "requested_max_tokens", lambda: None)()
        reserve = min(asked or route.max_tokens, route.max_tokens) * choices
    door = Door(caller, await gate.admit(caller, name, reserve=reserve))
    if kind == "embedding" or prompts > 1:  # a batch is not kept: a replay would give every
        return door  # prompt the first one's counts (a kept answer has one prompt's extras)
    try:
        key = runtime.answers.key(
            routes,
            name,
            route,
            local_only=caller.local_only,
            kind=kind,
            body=body,
            inputs=inputs,
        )
        if key is not None:
            door.key = key
            door.kept = runtime.answers.find(key, runtime.loaded_digest)
            if door.kept is None:
                door.recorder = Recorder(runtime.answers, key, choices, runtime.loaded_digest)
    except BaseException:
        door.abandon()
        raise
    return door
