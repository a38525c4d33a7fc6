"""A routes table checked against its model files before anything loads: what `zest check`,
a start and every reload run, so that none of them passes a file another would refuse.

Each model entry's files are read without loading the model (engines.inspect_model: GGUF
headers, genai_config.json): the file must exist and be readable, `context_length` must fit
what the model was trained or built for, every route must leave room for a prompt in the
context it will really get, a chat route needs a chat template, and no route may place a model
on a device its options rule out. Every problem names the file, the key path and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from zest.engines import ModelFacts, inspect_model
from zest.errors import RequestError, ServiceUnavailableError
from zest.gateway.serving._planning import plan_for
from zest.router import Device, LoadedRoutes, ModelConfig, RouteConfig

__all__ = ["Preflight", "preflight"]


@dataclass(frozen=True)
class Preflight:
    """What the model files said (by model id) and every problem found, one line each."""

    facts: dict[str, ModelFacts] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def preflight(routes: LoadedRoutes, devices: Mapping[str, Device] | None = None) -> Preflight:
    """Check `routes` against its model files (blocking: run it in a thread). With `devices`
    (this machine's inventory), routes whose device is auto are checked where they would run."""
    facts, problems = _inspect_models(routes)
    config = routes.config
    for task, route in config.routes.items():
        problems += _route_problems(routes, task, route, facts)
        if devices is not None:
            problems += _placement_problems(routes, task, route, facts, devices)
    return Preflight(facts, [f"{routes.path}: {problem}" for problem in problems])


def _inspect_models(routes: LoadedRoutes) -> tuple[dict[str, ModelFacts], list[str]]:
    facts: dict[str, ModelFacts] = {}
    problems: list[str] = []
    for model_id, config in routes.config.models.items():
        try:
            found = inspect_model(model_id, config, routes.base_dir)
        except RequestError as exc:  # missing, unreadable, not a model file
            problems.append(f"models.{model_id}.source: {exc.message}")
            continue
        if found is not None:
            facts[model_id] = found
            problems += _context_problems(model_id, config, found)
    return facts, problems


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
    problems = []
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
