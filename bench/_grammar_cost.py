"""The grammar phase of `zest bench`: the worst schema zest's limits accept, beside a neighbour.

The heavy request answers in a JSON Schema at the enum bound: 1,000 values sharing a
25-character prefix (about 30 KB of enum), eight picks, at temperature 0.7. Its neighbour is a
plain 16-token chat. Each round times the neighbour alone, then again while the heavy request
is decoding; rounds interleave, so the ratio (beside / alone, median over rounds) is read
within one run on a shared machine. Target (issue 32): the neighbour at most 1.5x slower
beside the heavy request. Each round also runs the neighbour beside a control, the same
request without its schema (as many tokens): what batching two sequences costs anyway, so the
grammar's own share is the first ratio over the second; the heavy request's decode speed is
reported beside the control's (the grammar's cost per step, as a factor).
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass
from typing import Any

import httpx

from zest.bench._servers import Server
from zest.bench._workload import Sample, chat_body, question, stream

__all__ = ["TARGET_RATIO", "grammar_cost", "heavy_schema", "report_lines"]

TARGET_RATIO = 1.5
PREFIX = "customer-account-category-"[:25]  # shared by every value
VALUES = 1_000
PICKS = 8


def heavy_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "picks": {
                "type": "array",
                "items": {"enum": [f"{PREFIX}{i}" for i in range(VALUES)]},
                "minItems": PICKS,
                "maxItems": PICKS,
            }
        },
        "required": ["picks"],
        "additionalProperties": False,
    }


def _heavy_body(model: str, constrained: bool = True, max_tokens: int = 400) -> dict[str, Any]:
    """The heavy request; unconstrained, the control: the same request without its schema."""
    schema = {"type": "json_schema", "json_schema": {"name": "picks", "schema": heavy_schema()}}
    return chat_body(
        model,
        f"{question()} Pick eight categories.",
        max_tokens,
        temperature=0.7,
        seed=7,
        stream_options={"include_usage": True},
        **({"response_format": schema} if constrained else {}),
    )


def _plain_body(model: str) -> dict[str, Any]:
    return chat_body(model, question(), 16, stream_options={"include_usage": True})


@dataclass
class _Round:
    alone: Sample
    beside: Sample  # the neighbour beside the heavy request
    heavy: Sample
    beside_control: Sample  # the neighbour beside the same request without its schema
    control: Sample


async def _beside(
    client: httpx.AsyncClient, url: str, model: str, body: dict[str, Any]
) -> tuple[Sample, Sample]:
    """The neighbour, sent once `body`'s request is decoding; both samples."""
    decoding = asyncio.Event()
    other = asyncio.create_task(_heavy(client, url, body, decoding))
    await decoding.wait()
    neighbour = await stream(client, url, _plain_body(model))
    return neighbour, await other


async def _round(client: httpx.AsyncClient, server: Server, tokens: int) -> _Round:
    url, model = f"{server.base}/chat/completions", server.model
    alone = await stream(client, url, _plain_body(model))
    beside, heavy = await _beside(client, url, model, _heavy_body(model))
    control_body = _heavy_body(model, constrained=False, max_tokens=tokens)
    beside_control, control = await _beside(client, url, model, control_body)
    return _Round(alone, beside, heavy, beside_control, control)


async def _heavy(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], decoding: asyncio.Event
) -> Sample:
    """The heavy request; `decoding` is set at its first token (it decodes from then on)."""
    try:
        return await stream(client, url, body, first_token=decoding)
    except RuntimeError:  # an empty answer: the round goes on, and reads as one
        return Sample(0.0, 0, 0.0)
    finally:
        decoding.set()


async def _rounds(server: Server, rounds: int) -> list[_Round]:
    async with httpx.AsyncClient(timeout=900) as client:
        url = f"{server.base}/chat/completions"
        warm = await stream(client, url, _heavy_body(server.model))  # untimed: the grammar check
        return [await _round(client, server, warm.tokens) for _ in range(rounds)]


def grammar_cost(server: Server, rounds: int) -> dict[str, Any]:
    """Rounds of: the neighbour alone, beside the heavy request, beside the control (the heavy
    request without its schema, as many tokens): the grammar's own share is the first ratio
    over the second."""
    measured = asyncio.run(_rounds(server, max(rounds, 3)))

    def median(values: list[float]) -> float:
        return statistics.median(values)

    ratios = [r.beside.total_ms / r.alone.total_ms for r in measured]
    controls = [r.beside_control.total_ms / r.alone.total_ms for r in measured]
    heavy_tps = median([r.heavy.decode_tps for r in measured])
    control_tps = median([r.control.decode_tps for r in measured])
    return {
        "enum_values": VALUES,
        "shared_prefix": len(PREFIX),
        "alone_ms_p50": median([r.alone.total_ms for r in measured]),
        "beside_ms_p50": median([r.beside.total_ms for r in measured]),
        "ratio_p50": median(ratios),
        "ratios": ratios,
        "control_ratio_p50": median(controls),
        "control_ratios": controls,
        "heavy_tokens": median([r.heavy.tokens for r in measured]),
        "heavy_decode_tps_p50": heavy_tps,
        "control_decode_tps_p50": control_tps,
        "step_factor": control_tps / heavy_tps if heavy_tps else None,
    }


def report_lines(report: dict[str, Any]) -> list[str]:
    found = report.get("grammar")
    if not found:
        return []
    factor = found["step_factor"]
    return [
        f"grammar (enum of {found['enum_values']} values sharing {found['shared_prefix']} "
        f"characters): a 16-token chat {found['alone_ms_p50']:.0f} ms alone, "
        f"{found['beside_ms_p50']:.0f} ms beside it ({found['ratio_p50']:.2f}x; beside the "
        f"same request without its schema {found['control_ratio_p50']:.2f}x); the heavy "
        f"request decodes {found['heavy_decode_tps_p50']:.1f} tok/s, without its schema "
        f"{found['control_decode_tps_p50']:.1f}" + (f" ({factor:.2f}x per step)" if factor else "")
    ]
