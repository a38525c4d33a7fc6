"""Plans and devices as plain data, for `explain` and `system-info` (HTTP and CLI alike)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from zest.engines import Inventory
from zest.errors import BadRequestError, DeviceUnavailableError
from zest.gateway.serving._judge import PromptToJudge, judge_plan
from zest.gateway.serving._planning import plan_for
from zest.router import (
    STRICT_REASON,
    Device,
    Needs,
    Placement,
    RouteConfig,
    RoutesFile,
    Slo,
    find_route,
    format_duration,
)

__all__ = ["describe_inventory", "explain_task", "format_explanation"]


def _placement(placement: Placement) -> dict[str, Any]:
    return {
        "device": placement.label,
        "prefill_device": placement.prefill.label,
        "decode_device": placement.decode.label,
        "emulated": any(d.emulated for d in placement.devices),
    }


def explain_task(
    routes: RoutesFile,
    inventory: Inventory,
    task: str,
    prompt_tokens: int,
    load: Mapping[str, int] | None = None,
    *,
    strict_privacy: bool = False,
    contexts: Mapping[str, int | None] | None = None,
    route: RouteConfig | None = None,
    needs: Needs | None = None,
    device_bytes: Mapping[str, int | None] | None = None,
    prompt: PromptToJudge | None = None,
) -> dict[str, Any]:
    """The plan for `task` without running it; an impossible plan is shown with its error.
    Each attempt says what its budget does to the prompt, as serving judges it
    (serving/_judge.py), and `outcome` what the request is answered if every engine loads:
    `prompt` is the request's, measured by each attempt's model (default: one message of
    `prompt_tokens` tokens), with the model's context from `contexts` (by model id; default:
    the declared context_length). `route`: the task's route as a routing rule hands it over
    (its privacy tightened); `needs`: what the request asks of an engine (logprobs, images,
    ...), as serving plans it; `device_bytes`: what one load of each model holds on its
    device (by model id)."""
    route = route or find_route(task, None, routes)
    result: dict[str, Any] = {
        "task": task,
        "prompt_tokens": prompt_tokens,
        "prompt_sized": prompt is None or prompt.sized,
        "route": route.model_dump(
            include={
                "kind",
                "model",
                "device",
                "allow_cpu",
                "on_failure",
                "hybrid_min_prompt_tokens",
                "privacy",
                "context",
                "fallback",
                "timeouts",
            }
        ),
        "engine": routes.models[route.model].engine,
        "slo": _slo_entry(routes.slo_of(task)),
        "privacy_mode": "strict" if strict_privacy else "standard",
        "devices_found": [device_entry(d) for _, d in sorted(inventory.devices.items())],
        "queue_depths": dict(load or {}),
    }
    try:
        plan = plan_for(
            routes,
            inventory.devices,
            task,
            route,
            prompt_tokens=prompt_tokens,
            load=load,
            strict_privacy=strict_privacy,
            needs=needs,
            device_bytes=device_bytes,
        )
    except (DeviceUnavailableError, BadRequestError) as exc:  # no device, or no capable engine
        error = exc.to_body()["error"]
        return {
            **result,
            "attempts": [],
            "removed": list(getattr(exc, "removed", ())),
            "error": error,
            "outcome": {"status": exc.status_code, "task": task, "error": error, "fallbacks": []},
        }
    known = {m: model.context_length for m, model in routes.models.items()} | dict(contexts or {})
    if route.kind == "embedding":  # each input is its own sequence: no prompt to judge
        verdicts, outcome = None, None
    else:
        verdicts, outcome = judge_plan(plan, prompt or PromptToJudge.of_size(prompt_tokens), known)
    attempts = [
        {
            "model": a.model,
            "engine": a.engine,
            **_placement(a.placement),
            "reason": a.reason,
            "budget": _embedding_budget(known.get(a.model))
            if verdicts is None
            else verdicts[number].text(),
            **({} if verdicts is None else {"fit": verdicts[number].as_dict()}),
        }
        for number, a in enumerate(plan.attempts)
    ]
    budget = attempts[0]["budget"] if attempts else None
    explained = {**result, "budget": budget, "attempts": attempts, "removed": list(plan.removed)}
    if outcome is not None:
        explained["outcome"] = outcome.as_dict()
    return explained


def _embedding_budget(context: int | None) -> str:
    within = f"the model's context of {context} tokens" if context else "the model's context"
    return f"each input is embedded on its own, within {within}"


def _slo_entry(slo: Slo | None) -> dict[str, Any] | None:
    """The objectives the task is judged by (its own or the file's), with the window's text."""
    if slo is None:
        return None
    return {**slo.model_dump(), "window_text": format_duration(slo.window)}


def device_entry(device: Device) -> dict[str, Any]:
    return {
        "name": device.name,
        "label": device.label,
        "emulated": device.emulated,
        "software": device.software,
        "detected_by": device.detected_by,
        "detail": device.detail,
        "engines": sorted(device.engines),
        "usable": bool(device.engines),
        "threads": device.threads,
        "memory_total": device.memory_total,
        "memory_free": device.memory_free,
    }


def describe_inventory(inventory: Inventory) -> dict[str, Any]:
    ggml = inventory.ggml
    return {
        "devices": [device_entry(d) for _, d in sorted(inventory.devices.items())],
        "probes": [{"source": p.source, "result": p.result} for p in inventory.probes],
        # What llama.cpp's build runs on, as ggml's backend registry reports it.
        "ggml_devices": [d.as_dict() for d in ggml.devices] if ggml else [],
    }


def format_explanation(explained: dict[str, Any]) -> str:
    """The human-readable form `zest explain` prints."""
    route = explained["route"]
    lines = [
        *_decision_lines(explained),
        f"task {explained['task']}: {route['kind']} route, model {route['model']} "
        f"({explained['engine']}), device {route['device']}, allow_cpu {route['allow_cpu']}, "
        f"on_failure {route['on_failure']}; prompt of {explained['prompt_tokens']} tokens",
        "devices: " + ", ".join(_device_summary(d) for d in explained["devices_found"]),
        *_policy_lines(explained),
    ]
    for number, attempt in enumerate(explained["attempts"], 1):
        lines.append(
            f"attempt {number}: {attempt['model']} on {attempt['device']}: {attempt['reason']}"
        )
        lines.append(f"  budget: {attempt['budget']}")
    lines += [f"removed: {reason}" for reason in explained["removed"]]
    if "error" in explained:
        lines.append(f"error ({explained['error']['code']}): {explained['error']['message']}")
    elif explained.get("outcome") is not None:
        lines.append(_answer_line(explained["outcome"]))
    return "\n".join(lines)


def _answer_line(outcome: dict[str, Any]) -> str:
    """What the server answers if every engine loads and answers (the walk's verdict)."""
    if outcome["status"] != 200:
        error = outcome["error"]
        return f"answer: {outcome['status']} {error['code'] or error['type']}: {error['message']}"
    line = (
        f"answer: 200 from attempt {outcome['attempt']}, {outcome['model']} on {outcome['device']}"
    )
    if outcome["trimmed"] is not None:
        line += f", {outcome['trimmed']['tokens']} prompt tokens trimmed"
    return line


def _decision_lines(explained: dict[str, Any]) -> list[str]:
    """A request's routing decision (explain --request), its trace, one line per condition."""
    decision = explained.get("decision")
    if decision is None:
        return []
    rule = decision["matched_rule"] or "default (no rule matched)"
    lines = [
        f"decision: task {explained['requested_task']} -> route {decision['route_to']}, "
        f"rule {rule}"
        + (f", outputs {json.dumps(decision['outputs'])}" if decision["outputs"] else "")
    ]
    for entry in decision.get("trace", []):
        extra = [f"{k} {entry[k]}" for k in ("score", "label", "cached", "error") if k in entry]
        shown = f" ({', '.join(extra)})" if extra else ""
        lines.append(f"  {entry['condition']}: {str(entry['result']).lower()}{shown}")
    return lines


def _policy_lines(explained: dict[str, Any]) -> list[str]:
    """The route's policies when any differs from the defaults, and strict privacy."""
    route, lines = explained["route"], []
    defaults = RouteConfig(kind=route["kind"], model=route["model"]).model_dump()
    if any(route[key] != defaults[key] for key in ("privacy", "context", "fallback", "timeouts")):
        parts = [f"privacy {route['privacy']}"]
        context = {k: v for k, v in route["context"].items() if v != defaults["context"][k]}
        timeouts = {k: f"{v:g}" for k, v in route["timeouts"].items() if v is not None}
        chain = [
            e["model"] + (f" on {e['device']}" if e["device"] else "") for e in route["fallback"]
        ]
        for name, values in (("context", context), ("timeouts", timeouts)):
            if values:
                parts.append(f"{name}: " + ", ".join(f"{k} {v}" for k, v in values.items()))
        if chain:
            parts.append("fallback: " + ", ".join(chain))
        lines.append("policies: " + "; ".join(parts))
    if explained["privacy_mode"] == "strict":
        lines.append(f"privacy: {STRICT_REASON}")
    if explained["slo"] is not None:
        lines.append(f"slo: {_describe_slo(explained['slo'])}")
    return lines


def _describe_slo(slo: dict[str, Any]) -> str:
    """e.g. `ttft p95 <= 5 s, decode >= 10 tokens/s, over the last 5m`."""
    parts = []
    if slo["ttft_p95_s"] is not None:
        parts.append(f"ttft p95 <= {slo['ttft_p95_s']:g} s")
    if slo["min_tokens_per_s"] is not None:
        parts.append(f"decode >= {slo['min_tokens_per_s']:g} tokens/s")
    return ", ".join(parts) + f", over the last {slo['window_text']}"


def _device_summary(device: dict[str, Any]) -> str:
    users = ", ".join(device["engines"])
    return f"{device['label']} ({'usable by ' + users if users else 'unusable'})"
