"""A routes table checked against its model files before anything loads: what `zest check`,
a start and every reload run, so that none of them passes a file another would refuse.

Each model entry's files are read without loading the model (engines.inspect_model: GGUF
headers, genai_config.json; engines.check_model_data: a GGUF's tensor table against the file,
no weight read): the file must exist, be readable and hold what its header declares (as
llama.cpp checks it before a load), `context_length` must fit
what the model was trained or built for, every route must leave room for a prompt in the
context it will really get, a chat route needs a chat template, no route may place a model on
a device its options rule out, and a model pinned by `sha256:` must be that file (the digest is
cached, engines._digests: only a new or changed file is read whole). Every problem names the
file, the key path and the fix.

A model whose files would fail to load (missing, unreadable, cut short or damaged) refuses the
table when a route needs it alone, and is a warning when its routes fall back. One difference:
a GGUF whose header reads but whose data would not load refuses the table for `zest check`
(`refuse_unloadable`) while a start or a reload serves on with it, its routes unservable until
the file is replaced (GET /v1/ready names them), so that one broken file does not take down
what the rest of a replica serves.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from zest.engines import ModelFacts, check_model_data, engine_kind, inspect_model, verify_model
from zest.errors import ModelDigestMismatchError, RequestError, ServiceUnavailableError
from zest.gateway.serving._planning import plan_for
from zest.router import (
    Device,
    LoadedRoutes,
    ModelConfig,
    RemoteModel,
    RouteConfig,
    condition_routes,
    resolve_client_keys,
    rule_warnings,
)

__all__ = ["Preflight", "preflight"]


@dataclass(frozen=True)
class Preflight:
    """What the model files said (by model id), every problem found (the table is refused)
    and every warning (it serves, less well), one line each; `pins`: the SHA-256 of each
    pinned model whose files matched its pin."""

    facts: dict[str, ModelFacts] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    pins: dict[str, str] = field(default_factory=dict)


def preflight(
    routes: LoadedRoutes,
    devices: Mapping[str, Device] | None = None,
    *,
    pins: bool = True,
    refuse_unloadable: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Preflight:
    """Check `routes` against its model files (blocking: run it in a thread). With `devices`
    (this machine's inventory), routes whose device is auto are checked where they would run;
    `pins=False` leaves the `sha256:` pins to the loads (nothing but headers is read).
    `refuse_unloadable` (zest check): a model a route needs alone whose data would not load is
    a problem, not a warning. The clients' key_env variables are read from `environ` (default:
    this process's environment, where the server runs): one unset refuses the table."""
    facts, unreadable, problems = _inspect_models(routes)
    _, key_problems = resolve_client_keys(
        routes.config.clients, os.environ if environ is None else environ
    )
    problems += key_problems
    unloadable = _check_data(routes, facts)
    verified: dict[str, str] = {}
    if pins:
        verified, mismatches = _verify_pins(routes, facts, unreadable)
        problems += mismatches
    config = routes.config
    required = _required_models(routes)
    warnings = []
    by_rules = _rules_only_models(routes)
    for model_id, message in unreadable.items():
        line = f"models.{model_id}.source: {message}"
        if model_id in required:
            problems.append(line)
        elif model_id in by_rules:  # as a start: readiness says degraded, every route serves
            warnings.append(f"{line} ({by_rules[model_id]})")
        else:  # as a start: a route with a fallback serves on without it
            warnings.append(f"{line} (no route needs it alone: its routes fall back)")
    for model_id, message in unloadable.items():
        line = f"models.{model_id}.source: {message}"
        if model_id not in required:
            why = by_rules.get(model_id, "no route needs it alone: its routes fall back")
            warnings.append(f"{line} ({why})")
        elif refuse_unloadable:
            problems.append(line)
        else:
            warnings.append(
                f"{line} (the routes that need it cannot be served until the file is replaced)"
            )
    warnings += _exposure_warnings(routes)
    warnings += rule_warnings(config)  # a target's own rules, a target that would send data out
    for task, route in config.routes.items():
        problems += _route_problems(routes, task, route, facts)
        if devices is not None:
            problems += _placement_problems(routes, task, route, facts, devices)
    name = routes.path
    return Preflight(
        facts, [f"{name}: {p}" for p in problems], [f"{name}: {w}" for w in warnings], verified
    )


def _inspect_models(
    routes: LoadedRoutes,
) -> tuple[dict[str, ModelFacts], dict[str, str], list[str]]:
    """Each model's facts, why the unreadable ones could not be read, and the problems."""
    facts: dict[str, ModelFacts] = {}
    unreadable: dict[str, str] = {}
    problems: list[str] = []
    for model_id, config in routes.config.models.items():
        try:
            found = inspect_model(model_id, config, routes.base_dir)
        except RequestError as exc:  # missing, unreadable, not a model file
            unreadable[model_id] = exc.message
            continue
        if found is not None:
            facts[model_id] = found
            problems += _context_problems(model_id, config, found)
    return facts, unreadable, problems


def _check_data(routes: LoadedRoutes, facts: dict[str, ModelFacts]) -> dict[str, str]:
    """Why each model whose header read would still fail to load (its data not all there)."""
    unloadable = {}
    for model_id in facts:
        try:
            check_model_data(model_id, routes.config.models[model_id], routes.base_dir)
        except RequestError as exc:
            unloadable[model_id] = exc.message
    return unloadable


def _verify_pins(
    routes: LoadedRoutes, facts: dict[str, ModelFacts], unreadable: dict[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The digests of the readable pinned models that match, and a problem for each that does
    not: a wrong file is refused whether or not a route could fall back (unlike a missing
    one), since a replica serving other bytes than its peers is a broken deployment."""
    verified, problems = {}, []
    for model_id in facts:
        config = routes.config.models[model_id]
        if isinstance(config, RemoteModel) or config.sha256 is None:
            continue
        try:
            digest = verify_model(model_id, config, routes.base_dir)
        except ModelDigestMismatchError as exc:
            problems.append(f"models.{model_id}.sha256: {exc.message}")
            continue
        except RequestError as exc:  # unreadable after all
            unreadable[model_id] = exc.message
            continue
        if digest is not None:
            verified[model_id] = digest.sha256
    return verified, problems


def _exposure_warnings(routes: LoadedRoutes) -> list[str]:
    config = routes.config
    remote = sorted(m for m, model in config.models.items() if not model.local)
    if config.expose_models != "all" or not remote:
        return []
    return [
        f"expose_models: all lets any client send its prompts to the remote model(s) "
        f"{', '.join(remote)} by id, whatever the routes' privacy says: use expose_models: "
        "true (local models only) unless that is meant"
    ]


def _required_models(routes: LoadedRoutes) -> set[str]:
    """Models a start cannot do without (as its warm start judges them): listed in
    lifecycle.preload, or the own model of a route that has nothing to fall back on (but a
    route that only routing rules run: they have an on_error path)."""
    config = routes.config
    listed = () if config.lifecycle.preload == "routes" else config.lifecycle.preload
    by_rules = condition_routes(config)
    alone = {
        route.model
        for task, route in config.routes.items()
        if task not in by_rules and (not route.fallback or route.on_failure == "return_error")
    }
    return set(listed) | alone | routes.needed_by_broken  # those routes, once fixed


def _rules_only_models(routes: LoadedRoutes) -> dict[str, str]:
    """Models that only the routes of routing rules' conditions use, with what their loss
    means (readiness degraded, the rules taking their on_error path)."""
    config = routes.config
    by_rules = condition_routes(config)
    used: dict[str, set[str]] = {}
    for task, route in config.routes.items():
        for model in (route.model, *(entry.model for entry in route.fallback)):
            used.setdefault(model, set()).add(task)
    found = {}
    for model, tasks in used.items():
        if tasks <= set(by_rules):
            rules = [f"{task}.{rule}" for via in sorted(tasks) for task, rule in by_rules[via]]
            found[model] = (
                f"only routing rules run it ({', '.join(dict.fromkeys(rules))}): they take their "
                "on_error path and readiness says degraded"
            )
    return found


def _context_problems(model_id: str, config: ModelConfig, facts: ModelFacts) -> list[str]:
    wanted, most = config.context_length, facts.max_context
    if wanted is None or most is None or wanted <= most:
        return []
    return [
        f"models.{model_id}.context_length: {wanted} is more than the {most} tokens the model "
        f"takes ({facts.where}): lower it to {most} or less, or remove the key (default {most})"
    ]


def _attempts(task: str, route: RouteConfig) -> list[tuple[str, str]]:
    """(model id, key path) of a route's own attempt and each fallback entry."""
    own = [(route.model, f"routes.{task}")]
    return own + [(e.model, f"routes.{task}.fallback.{i}") for i, e in enumerate(route.fallback)]


def _route_problems(
    routes: LoadedRoutes, task: str, route: RouteConfig, facts: dict[str, ModelFacts]
) -> list[str]:
    problems = _speculation_problems(routes, task, route)
    for model_id, at in _attempts(task, route):
        found, config = facts.get(model_id), routes.config.models.get(model_id)
        if found is None or config is None:
            continue
        context = config.context_length or found.max_context
        # A declared context_length is checked with the file alone (router): here the real one.
        undeclared = config.context_length is None and context is not None
        if undeclared and route.kind != "embedding" and route.max_tokens >= (context or 0):
            problems.append(
                f"routes.{task}.max_tokens: {route.max_tokens} leaves no room for a prompt in "
                f"the {context} tokens of model {model_id!r} ({found.where}): lower max_tokens "
                f"below {context}"
            )
        if route.kind == "chat" and found.chat_template is False:
            problems.append(
                f"{at}.model: model {model_id!r} has no chat template ({found.where}), so it "
                "cannot serve a chat route: make the route kind: completion, or use a chat model"
            )
    return problems


def _speculation_problems(routes: LoadedRoutes, task: str, route: RouteConfig) -> list[str]:
    """Speculation is asked of the route's own model: its engine must do it (a fallback that
    does not just decodes a token a step: the answer is the same)."""
    model = routes.config.models.get(route.model)
    if route.speculative is None or model is None:
        return []
    if engine_kind(model.engine).capabilities.speculation:
        return []
    return [
        f"routes.{task}.speculative: model {route.model!r} runs on engine {model.engine!r}, "
        "which does not decode speculatively: remove the key, or route the task to a llamacpp "
        "model"
    ]


def _placement_problems(
    routes: LoadedRoutes,
    task: str,
    route: RouteConfig,
    facts: dict[str, ModelFacts],
    devices: Mapping[str, Device],
) -> list[str]:
    """Attempts the route's plan would place on a device their model's options rule out."""
    try:
        plan = plan_for(
            routes.config, devices, task, route, prompt_tokens=0, load=None, strict_privacy=False
        )
    except ServiceUnavailableError:  # nothing here can run it: the machine's, not the file's
        return []
    problems = []
    for attempt in plan.attempts:
        refused = facts[attempt.model].refused_devices if attempt.model in facts else {}
        for name in dict.fromkeys(d.name for d in attempt.placement.devices):
            if name in refused:
                problems.append(
                    f"routes.{task}: model {attempt.model!r} would run on {name}, but "
                    f"models.{attempt.model}.{refused[name]}"
                )
    return problems
