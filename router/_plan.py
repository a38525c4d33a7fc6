"""Resolving a request into a Plan: which model runs on which device(s), in which order, and why.

Pure: devices and queue depths come in as data (see router._placement for the cost model).

The order of attempts: the route's own model on its device (auto or pinned), then the CPU when
the route allows it and `on_failure` is next, then each `fallback` entry, placed with the same
device logic (a missing pinned device gives way to the CPU where allowed). Remote models run on
the pseudo-device `remote`. A candidate that cannot be placed is left out with its reason, both
in `removed` (for explain) and in the next attempt's `skipped` (so the response that attempt
serves lists it among the fallbacks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from zest.errors import BadRequestError, DeviceUnavailableError, UnknownTaskError, shown
from zest.router._capabilities import Capabilities, Needs
from zest.router._floor import PRIORITY_RANGE
from zest.router._placement import (
    DEVICE_ORDER,
    REMOTE_DEVICE,
    Device,
    Placement,
    describe_devices,
    parse_device,
)
from zest.router._schema import REMOTE_ENGINE, RouteConfig, RoutesFile

__all__ = ["Attempt", "ModelTraits", "Plan", "find_route", "peak_priority", "plan_route"]

Kind = Literal["chat", "completion", "embedding"]
_ENDPOINT = {
    "chat": "/v1/chat/completions",
    "completion": "/v1/completions",
    "embedding": "/v1/embeddings",
}
STRICT_REASON = "ZEST_PRIVACY=strict: no remote engine may be reached"


@dataclass(frozen=True)
class ModelTraits:
    """What the planner needs to know about a model: its engine kind and what that honours."""

    engine: str
    capabilities: Capabilities = field(default_factory=Capabilities)
    # About what one load holds on its device (weights and KV cache; None: not known): a
    # device reporting less free memory is not chosen for it.
    device_bytes: int | None = None

    @property
    def can_split(self) -> bool:
        return self.capabilities.split


@dataclass(frozen=True)
class Attempt:
    """One way to serve the request: a model on a placement, and why it was chosen."""

    model: str
    placement: Placement
    reason: str
    engine: str = ""
    # Candidates left out between the previous attempt and this one, each with its reason.
    skipped: tuple[str, ...] = ()

    @property
    def device(self) -> str:
        return self.placement.label

    @property
    def remote(self) -> bool:
        return self.engine == REMOTE_ENGINE


@dataclass(frozen=True)
class Plan:
    task: str
    route: RouteConfig
    attempts: tuple[Attempt, ...]
    removed: tuple[str, ...] = ()
    devices_found: str = ""

    @property
    def first(self) -> Attempt:
        return self.attempts[0]


def peak_priority(routes: RoutesFile, model_id: str) -> int | None:
    """The highest priority a request that may run on `model_id` (a route's model or one of
    its fallbacks) can carry: its route's, raised by the largest offset of a named client that
    may call it (docs/teams.md); None: no route runs there. A batching engine keeps lower
    work's steps short while a request at it may arrive (engines/_step_plan.py)."""
    found = [
        _raised(route.priority, _largest_offset(routes, name))
        for name, route in routes.routes.items()
        if route.model == model_id or any(entry.model == model_id for entry in route.fallback)
    ]
    return max(found, default=None)


def _largest_offset(routes: RoutesFile, task: str) -> int:
    """The largest priority offset among the clients that may call `task` (0 at least: the
    admin key, and anonymous callers where no client is named, move nothing)."""
    offsets = [
        client.priority
        for client in routes.clients.values()
        if client.tasks == "*" or task in client.tasks
    ]
    return max([0, *offsets])


def _raised(priority: int, offset: int) -> int:
    low, high = PRIORITY_RANGE
    return max(low, min(high, priority + offset))


def find_route(name: str, kind: Kind | None, routes: RoutesFile) -> RouteConfig:
    """The route for a task name (or a model id when exposed); `kind` is the endpoint's."""
    route = routes.routes.get(name)
    if route is None and routes.exposes(name):
        # A client naming a remote model by id (expose_models: all) chose to send it there.
        remote = routes.models[name].engine == REMOTE_ENGINE
        route = RouteConfig(
            kind=kind or "chat", model=name, privacy="allow_remote" if remote else "local_only"
        )
    if route is None and routes.expose_models and name in routes.models:
        raise UnknownTaskError(
            f"model {name!r} is remote, and expose_models: true lets clients name local models "
            "only: route a task to it (privacy: allow_remote), or set expose_models: all"
        )
    if route is None:
        exposed = sorted(m for m in routes.models if routes.exposes(m))
        known = sorted(routes.routes) + exposed
        raise UnknownTaskError(
            f"unknown task {shown(name)}: use one of {', '.join(known)} (GET /v1/models lists them)"
        )
    if kind is not None and route.kind != kind:
        raise BadRequestError(
            f"task {name!r} is {'an' if route.kind == 'embedding' else 'a'} {route.kind} "
            f"route: call {_ENDPOINT[route.kind]} "
            f"or POST /v1/tasks/{name} instead",
            param="model",
        )
    return route


@dataclass
class _Planner:
    """Places one candidate (a model and a device spec) at a time; collects what it left out."""

    task: str
    route: RouteConfig
    devices: Mapping[str, Device]
    found: str
    load: Mapping[str, int]
    prompt_tokens: int
    strict: bool
    needs: Needs = field(default_factory=Needs)
    attempts: list[Attempt] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    # The candidate being placed.
    model: str = ""
    traits: ModelTraits = ModelTraits("")
    prefix: str = ""
    unplaced: bool = False  # the candidate was left out (not merely a duplicate)

    @property
    def usable(self) -> dict[str, Device]:
        engine = self.traits.engine
        return {name: dev for name, dev in self.devices.items() if engine in dev.engines}

    # Candidates left out because their engine cannot honour the request: (model, engine,
    # the request fields it cannot honour).
    incapable: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)

    def start(self, model: str, traits: ModelTraits, prefix: str) -> bool:
        """Take the next candidate; False (and left out, with why) when its engine cannot
        honour what the request asks."""
        self.model, self.traits, self.prefix = model, traits, prefix
        self.unplaced = False
        missing = self.needs.missing(traits.capabilities)
        if missing:
            self.incapable.append((model, traits.engine, missing))
            asked = " and ".join(missing)
            self.leave_out(
                "any device", f"engine {traits.engine!r} cannot honour {asked}", "capability"
            )
        return not missing

    def add(self, prefill: str, decode: str, reason: str) -> None:
        usable = self.usable
        self.add_placement(Placement(usable[prefill], usable[decode]), reason)

    def add_placement(self, placement: Placement, reason: str) -> None:
        duplicate = next(
            (
                n
                for n, a in enumerate(self.attempts, 1)
                if (a.model, a.placement.key) == (self.model, placement.key)
            ),
            None,
        )
        if duplicate is not None:
            self.removed.append(f"{self.prefix}{placement.label}: already attempt {duplicate}")
            return
        attempt = Attempt(
            self.model,
            placement,
            self.prefix + reason,
            self.traits.engine,
            tuple(self.skipped),
        )
        self.attempts.append(attempt)
        self.skipped.clear()

    def leave_out(self, spec: str, why: str, kind: str = "device unavailable") -> None:
        """A candidate that cannot run: explain says why; the next attempt carries it too, in
        the form of a failed attempt (`MODEL on DEVICE: KIND: WHY`)."""
        self.removed.append(f"{self.prefix}{spec}: {why}")
        self.skipped.append(f"{self.model} on {spec}: {kind}: {why}")
        self.unplaced = True

    def queue(self, name: str) -> int:
        return self.load.get(name, 0)

    def lacks_room(self, name: str) -> str | None:
        """Why device `name` has no room for the candidate, by the free memory the device
        reported (ggml's registry); None when it fits or nothing reports either figure."""
        device, needed = self.devices.get(name), self.traits.device_bytes
        if device is None or needed is None or device.memory_free is None:
            return None
        if device.emulated or needed <= device.memory_free:
            return None
        return (
            f"{self.model!r} needs about {needed / 1e6:.0f} MB (weights and KV cache) and "
            f"{device.label} reports {device.memory_free / 1e6:.0f} MB free"
        )


def plan_route(
    task: str,
    route: RouteConfig,
    *,
    engine: str,
    devices: Mapping[str, Device],
    load: Mapping[str, int] | None = None,
    prompt_tokens: int = 0,
    can_split: bool = True,
    models: Mapping[str, ModelTraits] | None = None,
    strict_privacy: bool = False,
    needs: Needs | None = None,
) -> Plan:
    """Order the attempts for one request; raise 503 when no allowed device can serve it, 400
    when no attempt's engine can honour what it asks (`needs`).

    `engine`/`can_split` describe the route's own model unless `models` has it; `models` the
    fallback entries' ones. `strict_privacy` (ZEST_PRIVACY=strict) leaves every remote
    attempt out.
    """
    own = ModelTraits(engine, Capabilities(split=can_split))
    traits = {route.model: own, **(models or {})}
    p = _Planner(
        task,
        route,
        devices,
        describe_devices(devices),
        load or {},
        prompt_tokens,
        strict_privacy,
        needs or Needs(),
    )
    if p.start(route.model, traits[route.model], "") and _place_remote(p) is None:
        _place_local(p, route.device)
        _plan_cpu_fallback(p)
    for number, entry in enumerate(route.fallback, 1):
        prefix = f"fallback {number} ({entry.model}): "
        if p.start(entry.model, traits[entry.model], prefix) and _place_remote(p) is None:
            _place_local(p, entry.device or "auto")
            if p.unplaced:
                _substitute_cpu(p, entry.device or "auto")
    if not p.attempts:
        raise _no_attempt_error(p)
    return Plan(task, route, tuple(p.attempts), tuple(p.removed), p.found)


def _no_attempt_error(p: _Planner) -> BadRequestError | DeviceUnavailableError:
    """Every candidate lacking a capability the request asks for is the client's to change
    (400); otherwise the devices are the reason (503)."""
    candidates = 1 + len(p.route.fallback)
    if len(p.incapable) < candidates:
        return _no_device_error(p)
    asked = dict.fromkeys(field for _, _, missing in p.incapable for field in missing)
    lacking = "; ".join(
        f"{model} ({engine}) cannot honour {' and '.join(missing)}"
        for model, engine, missing in p.incapable
    )
    return BadRequestError(
        f"task {p.task!r} has no attempt that can honour {' and '.join(asked)}: {lacking}: "
        f"remove {' and '.join(asked)} from the request, or route the task to a model whose "
        "engine honours it (docs/policies.md, Engines and their capabilities)",
        param=next(iter(asked)),
    )


def _place_remote(p: _Planner) -> bool | None:
    """Place a remote model on the pseudo-device; None when the model is local."""
    if p.traits.engine != REMOTE_ENGINE:
        return None
    if p.strict:
        p.leave_out("remote", STRICT_REASON, "privacy")
        return False
    if p.route.privacy != "allow_remote":
        p.leave_out("remote", _local_only_reason(p), "privacy")
        return False
    p.add_placement(
        Placement(REMOTE_DEVICE, REMOTE_DEVICE), "remote model: an OpenAI-compatible upstream"
    )
    return True


def _local_only_reason(p: _Planner) -> str:
    """Why the route may not reach a remote model: its own privacy, or the local_only one of
    the route whose rule (or condition) sent the request here, which it keeps."""
    if (client := p.route.privacy_floor_of) is not None:
        return (
            f"client {client!r} is local_only (clients.{client}.privacy): none of its requests "
            f"leaves the machine, whatever route {p.task!r} allows"
        )
    caller = p.route.privacy_kept_from
    if caller is None:
        return f"route {p.task!r} is local_only"
    sender = f"route {caller!r}, which is local_only, and" if caller else "a local_only route and"
    return (
        f"the request came from {sender} keeps that privacy here (route {p.task!r} allows "
        "remote attempts; privacy only tightens along a rule)"
    )


def _place_local(p: _Planner, device: str) -> None:
    wanted = parse_device(device)
    if wanted is None:
        _plan_auto(p)
    else:
        _plan_pinned(p, device, wanted)


def _plan_auto(p: _Planner) -> None:
    threshold, usable = p.route.hybrid_min_prompt_tokens, _with_room(p)
    if p.prompt_tokens >= threshold and {"npu", "gpu"} <= usable.keys() and p.traits.can_split:
        p.add(
            "npu",
            "gpu",
            f"auto: prompt of {p.prompt_tokens} tokens >= {threshold}, npu and gpu "
            "found: prefill on npu, decode on gpu",
        )
        return
    allowed = [d for d in DEVICE_ORDER if d in usable and (d != "cpu" or p.route.allow_cpu)]
    if "cpu" in usable and not p.route.allow_cpu:
        p.removed.append(f"{p.prefix}cpu: allow_cpu is false for route {p.task!r}")
    if not allowed:
        p.leave_out("auto", f"no allowed device can run {p.model!r} here (found: {p.found})")
        return
    best = min(allowed, key=lambda d: (p.queue(d), DEVICE_ORDER.index(d)))
    queues = ", ".join(f"{d} {p.queue(d)}" for d in allowed)
    why = (
        f"prompt of {p.prompt_tokens} tokens < {threshold}"
        if "npu" in allowed and "gpu" in allowed
        else f"found {', '.join(allowed)}"
    )
    p.add(best, best, f"auto: {why}; shortest queue, fastest first (queued: {queues})")


def _with_room(p: _Planner) -> dict[str, Device]:
    """The usable devices with room for the candidate; the others noted for explain."""
    usable = {}
    for name, device in p.usable.items():
        if (why := p.lacks_room(name)) is None:
            usable[name] = device
        else:
            p.removed.append(f"{p.prefix}{device.label}: {why}")
    return usable


def _plan_pinned(p: _Planner, device: str, wanted: tuple[str, str]) -> None:
    names = dict.fromkeys(wanted)
    missing = [d for d in names if d not in p.usable]
    no_room = [why for d in names if d not in missing and (why := p.lacks_room(d))]
    if "cpu" in names and not p.route.allow_cpu:
        p.leave_out(device, "runs on cpu but allow_cpu is false", "policy")
    elif missing:
        p.leave_out(device, _why_unusable(p, missing))
    elif no_room:
        p.leave_out(device, no_room[0])
    else:  # a pinned split goes to the engine even when auto would not split for it
        who = "the route" if not p.prefix else "the fallback entry"
        p.add(wanted[0], wanted[1], f"device {device} pinned by {who}")


def _why_unusable(p: _Planner, missing: list[str]) -> str:
    """A device this machine lacks, or one it has that cannot run this model's engine (an
    emulated device runs only the engines that run on CPU threads)."""
    present = [p.devices[d] for d in missing if d in p.devices]
    if not present:
        verb = "is" if len(missing) == 1 else "are"
        return f"{' and '.join(missing)} {verb} not available (found: {p.found})"
    device = present[0]
    runs = ", ".join(sorted(device.engines)) or "no engine"
    why = f"{device.label} cannot run engine {p.traits.engine!r} (it runs {runs})"
    if device.emulated:
        why += ": an emulated device runs only engines that work on CPU threads"
    return why


def _plan_cpu_fallback(p: _Planner) -> None:
    if any(a.placement.key == "cpu" for a in p.attempts) or "cpu" not in p.usable:
        return
    if not p.route.allow_cpu:
        return
    if not p.attempts:
        _substitute_cpu(p, p.route.device)
    elif p.route.on_failure == "next":
        p.add(
            "cpu",
            "cpu",
            f"fallback to cpu if {p.attempts[0].device} fails before the first "
            "token (on_failure: next, allow_cpu: true)",
        )
    else:
        p.removed.append("cpu fallback: on_failure is return_error")


def _substitute_cpu(p: _Planner, device: str) -> None:
    """The candidate's device is missing: run it on the CPU instead, where allowed."""
    if "cpu" not in p.usable or not p.route.allow_cpu:
        return
    last = p.removed[-1].removeprefix(p.prefix) if p.removed else ""
    # The pinned device left out stays in `skipped`: the answer's x-zest-fallbacks names it.
    p.add(
        "cpu",
        "cpu",
        f"fallback to cpu: {last}; allow_cpu is true"
        if last
        else "fallback to cpu: allow_cpu is true",
    )


def _no_device_error(p: _Planner) -> DeviceUnavailableError:
    route, task = p.route, p.task
    if p.traits.engine == REMOTE_ENGINE and not route.fallback:
        caller = route.privacy_kept_from
        other_fix = f", or set routes.{caller}.privacy: allow_remote" if caller else ""
        return DeviceUnavailableError(
            f"route {task!r} runs only on the remote model {route.model!r}, which is left out: "
            f"{'; '.join(p.removed)}: add a local model to routes.{task}.fallback{other_fix}",
            tuple(p.removed),
        )
    if route.fallback:
        return DeviceUnavailableError(
            f"route {task!r}: no attempt can run here (found: {p.found}): "
            f"{'; '.join(p.removed)}: change routes.{task}.device or routes.{task}.fallback",
            tuple(p.removed),
        )
    if route.allow_cpu:
        policy = "and no other device that can run this model is allowed"
    else:
        policy = f"and the fallback to cpu is forbidden by routes.{task}.allow_cpu: false"
    wanted = parse_device(route.device) or ()
    no_room = [why for name in dict.fromkeys(wanted) if (why := p.lacks_room(name))]
    if wanted and no_room and all(name in p.usable for name in wanted):  # there, but full
        return DeviceUnavailableError(
            f"route {task!r} needs device {route.device!r}, which has no room for it here "
            f"({'; '.join(no_room)}), {policy}: lower models.{route.model}.context_length or "
            f".options.parallel, or free the device",
            tuple(p.removed),
        )
    if wanted and all(name in p.devices for name in wanted):  # there, but not for this engine
        return DeviceUnavailableError(
            f"route {task!r} needs device {route.device!r}, which cannot run engine "
            f"{p.traits.engine!r} here ({'; '.join(p.removed)}), {policy}: route the model to a "
            f"device that runs it (routes.{task}.device) or use a model of an engine the device "
            "runs",
            tuple(p.removed),
        )
    return DeviceUnavailableError(
        f"route {task!r} needs device {route.device!r}, which is not usable here "
        f"(found: {p.found}), {policy}: declare the device (ZEST_EMULATE_DEVICES, e.g. "
        f"npu=cpu:1, for an emulated one) or change routes.{task}.device",
        tuple(p.removed),
    )
