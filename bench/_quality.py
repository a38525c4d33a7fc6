"""The quality phase of `zest bench`: structured outputs against llama-server as the oracle.

Both servers run the same model file; each gets the same schemas, prompts, temperatures and
seeds, as a json_schema response format and as a tool's parameters (one tool, `required`, one
call). An answer counts when it finishes (`stop`, or `tool_calls` with the one call) and its
JSON validates against the schema with the `jsonschema` library. The share of answers that
count, per server and per form, is the figure; issue 32's target is zest's share at least
llama-server's, for both forms. A schema a server refuses (a 4xx) counts as not answered.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx
from jsonschema import Draft202012Validator

from zest.bench._servers import Server

__all__ = ["CASES", "TEMPERATURES", "quality", "report_lines", "targets"]

TEMPERATURES = (0.3, 0.7, 1.0)
MAX_TOKENS = 384
CONCURRENCY = 4
PREFIX = "catalogue-section-number-"  # 25 characters shared by the big enum's values


@dataclass(frozen=True)
class Case:
    name: str
    prompt: str
    schema: dict[str, Any]


def _object(properties: dict[str, Any], *optional: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": [n for n in properties if n not in optional],
        "additionalProperties": False,
    }


CASES = (
    Case(
        "person",
        "Invent a person.",
        _object(
            {
                "name": {"type": "string", "maxLength": 30},
                "age": {"type": "integer", "minimum": 0, "maximum": 120},
                "colour": {"enum": ["red", "green", "blue"]},
            }
        ),
    ),
    Case(
        "weather",
        "What is the weather in Paris, in celsius?",
        _object(
            {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "days",
        ),
    ),
    Case(
        "order",
        "Order two hammers and a saw.",
        _object(
            {
                "lines": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 3,
                    "items": _object(
                        {
                            "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                            "quantity": {"type": "integer", "minimum": 1, "maximum": 10},
                        }
                    ),
                },
                "total": {"type": "number", "minimum": 0, "maximum": 10000},
            }
        ),
    ),
    Case(
        "event",
        "Plan a team lunch next month.",
        _object(
            {
                "title": {"type": "string", "maxLength": 40},
                "date": {"type": "string", "format": "date"},
                "guests": {
                    "type": "array",
                    "items": {"type": "string", "maxLength": 20},
                    "maxItems": 4,
                },
            }
        ),
    ),
    Case(
        "label",
        "Classify: 'The package arrived broken and nobody answers my emails.'",
        _object(
            {
                "label": {"enum": ["praise", "complaint", "question", "spam", "other"]},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            }
        ),
    ),
    Case(
        "ticket",
        "File a ticket: the printer on floor 3 is jammed.",
        _object(
            {
                "summary": {"type": "string", "maxLength": 50},
                "priority": {"type": "integer", "minimum": 1, "maximum": 5},
                "note": {"anyOf": [{"type": "string", "maxLength": 30}, {"type": "null"}]},
            }
        ),
    ),
    Case(
        "catalogue",
        "Which catalogue sections hold garden tools?",
        _object(
            {
                "sections": {
                    "type": "array",
                    "items": {"enum": [f"{PREFIX}{i}" for i in range(200)]},
                    "minItems": 1,
                    "maxItems": 3,
                }
            }
        ),
    ),
    Case(
        "address",
        "Give a delivery address in Lyon.",
        _object(
            {
                "street": {"type": "string", "maxLength": 40},
                "city": {"type": "string", "maxLength": 30},
                "postcode": {"type": "string", "pattern": "^[0-9]{5}$"},
                "floor": {"type": ["integer", "null"], "minimum": -2, "maximum": 40},
            }
        ),
    ),
)


def _json_schema_body(server: Server, case: Case, temperature: float, seed: int) -> dict[str, Any]:
    return {
        "model": server.model,
        "messages": [{"role": "user", "content": case.prompt}],
        "max_tokens": MAX_TOKENS,
        "temperature": temperature,
        "seed": seed,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": case.name, "schema": case.schema, "strict": True},
        },
    }


def _tool_body(server: Server, case: Case, temperature: float, seed: int) -> dict[str, Any]:
    tool = {"type": "function", "function": {"name": case.name, "parameters": case.schema}}
    return {
        "model": server.model,
        "messages": [{"role": "user", "content": case.prompt}],
        "max_tokens": MAX_TOKENS,
        "temperature": temperature,
        "seed": seed,
        "tools": [tool],
        "tool_choice": "required",
        "parallel_tool_calls": False,
    }


def _valid(answer: Any, schema: dict[str, Any]) -> bool:
    checker = Draft202012Validator.FORMAT_CHECKER
    return not any(Draft202012Validator(schema, format_checker=checker).iter_errors(answer))


def _json_schema_counts(reply: dict[str, Any], case: Case) -> bool:
    choice = reply["choices"][0]
    if choice.get("finish_reason") != "stop":
        return False
    try:
        return _valid(json.loads(choice["message"].get("content") or ""), case.schema)
    except json.JSONDecodeError:
        return False


def _tool_counts(reply: dict[str, Any], case: Case) -> bool:
    choice = reply["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    if choice.get("finish_reason") != "tool_calls" or len(calls) != 1:
        return False
    if calls[0]["function"]["name"] != case.name:
        return False
    try:
        return _valid(json.loads(calls[0]["function"]["arguments"]), case.schema)
    except json.JSONDecodeError:
        return False


FORMS = {
    "json_schema": (_json_schema_body, _json_schema_counts),
    "tools": (_tool_body, _tool_counts),
}


async def _one(
    client: httpx.AsyncClient, server: Server, form: str, work: tuple[Case, float, int]
) -> tuple[str, bool]:
    body_of, counts = FORMS[form]
    case, temperature, seed = work
    reply = await client.post(
        f"{server.base}/chat/completions", json=body_of(server, case, temperature, seed)
    )
    if reply.status_code != 200:
        return case.name, False
    return case.name, counts(reply.json(), case)


async def _server(server: Server, seeds: int) -> dict[str, Any]:
    work = [(case, t, seed) for case in CASES for t in TEMPERATURES for seed in range(1, seeds + 1)]
    gate = asyncio.Semaphore(CONCURRENCY)
    found: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=900) as client:

        async def gated(form: str, item: tuple[Case, float, int]) -> tuple[str, bool]:
            async with gate:
                return await _one(client, server, form, item)

        for form in FORMS:
            results = await asyncio.gather(*(gated(form, item) for item in work))
            by_case = {c.name: [ok for name, ok in results if name == c.name] for c in CASES}
            found[form] = {
                "answers": len(results),
                "valid": sum(ok for _, ok in results),
                "share": sum(ok for _, ok in results) / len(results),
                "by_case": {name: sum(oks) / len(oks) for name, oks in by_case.items()},
            }
    return found


def quality(servers: list[Server], seeds: int) -> dict[str, Any]:
    """Each server in turn (their answers do not depend on load): the share of answers that
    finish and validate, per form and per schema."""
    return {
        "temperatures": list(TEMPERATURES),
        "seeds": seeds,
        "cases": [case.name for case in CASES],
        "servers": {server.name: asyncio.run(_server(server, seeds)) for server in servers},
    }


def targets(report: dict[str, Any], peer: str) -> list[tuple[str, float, str, bool]]:
    servers = (report.get("quality") or {}).get("servers", {})
    mine, theirs = servers.get("zest"), servers.get(peer)
    found = []
    for form in FORMS:
        if mine and theirs:
            gap = mine[form]["share"] - theirs[form]["share"]
            found.append(
                (f"structured {form}: valid share >= {peer}'s", gap, " (zest - peer)", gap >= 0)
            )
    return found


def report_lines(report: dict[str, Any]) -> list[str]:
    found = report.get("quality")
    if not found:
        return []
    lines = [
        f"structured outputs ({len(found['cases'])} schemas x temperatures "
        f"{', '.join(str(t) for t in found['temperatures'])} x {found['seeds']} seeds): "
        "answers that finish and validate"
    ]
    for name, forms in found["servers"].items():
        shares = ", ".join(
            f"{form} {figures['valid']}/{figures['answers']} ({figures['share']:.0%})"
            for form, figures in forms.items()
        )
        lines.append(f"  {name:<14} {shares}")
    return lines
