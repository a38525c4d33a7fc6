"""The grammar and quality phases of `zest bench` (bench/_grammar_cost.py, bench/_quality.py):
what counts as an answer, the report lines and targets, and schemas inside zest's limits."""

from __future__ import annotations

import json
from typing import Any

import pytest

from zest.bench import DEFAULT_PHASES, PHASES
from zest.bench._grammar_cost import heavy_schema
from zest.bench._quality import CASES, _json_schema_counts, _tool_counts
from zest.bench._report import format_report, targets
from zest.router import check_json_schema

PERSON = CASES[0]


def reply(content: str | None, finish: str, calls: list[dict[str, Any]] | None = None) -> Any:
    message = {"content": content, "tool_calls": calls}
    return {"choices": [{"finish_reason": finish, "message": message}]}


def call(name: str, arguments: Any) -> dict[str, Any]:
    return {"function": {"name": name, "arguments": json.dumps(arguments)}}


GOOD = {"name": "Ada", "age": 36, "colour": "red"}


@pytest.mark.parametrize(
    ("answer", "counts"),
    [
        (reply(json.dumps(GOOD), "stop"), True),
        (reply(json.dumps({**GOOD, "age": 130}), "stop"), False),  # breaks maximum
        (reply(json.dumps(GOOD)[:-3], "stop"), False),  # not JSON
        (reply(json.dumps(GOOD), "length"), False),  # did not finish
    ],
)
def test_a_json_schema_answer_counts_when_it_finishes_and_validates(
    answer: Any, counts: bool
) -> None:
    assert _json_schema_counts(answer, PERSON) is counts


@pytest.mark.parametrize(
    ("answer", "counts"),
    [
        (reply(None, "tool_calls", [call("person", GOOD)]), True),
        (reply(None, "tool_calls", [call("person", {**GOOD, "colour": "pink"})]), False),
        (reply(None, "tool_calls", [call("other", GOOD)]), False),
        (reply(None, "tool_calls", [call("person", GOOD), call("person", GOOD)]), False),
        (reply("I would call it", "stop"), False),
    ],
)
def test_a_tool_answer_counts_when_its_one_call_validates(answer: Any, counts: bool) -> None:
    assert _tool_counts(answer, PERSON) is counts


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_case_is_a_schema_zest_accepts(case: Any) -> None:
    check_json_schema(case.schema)


def test_the_heavy_schema_is_the_worst_the_limits_accept() -> None:
    schema = heavy_schema()
    check_json_schema(schema)
    values = schema["properties"]["picks"]["items"]["enum"]
    assert len(values) == 1000
    assert len({v[:25] for v in values}) == 1
    assert len(json.dumps(values)) > 30_000


def test_grammar_runs_by_default_and_quality_when_named() -> None:
    assert "grammar" in DEFAULT_PHASES
    assert "quality" in PHASES
    assert "quality" not in DEFAULT_PHASES


def test_the_phases_are_reported_with_their_targets() -> None:
    forms = {
        "json_schema": {"answers": 48, "valid": 48, "share": 1.0, "by_case": {}},
        "tools": {"answers": 48, "valid": 47, "share": 47 / 48, "by_case": {}},
    }
    peer = {
        "json_schema": {"answers": 48, "valid": 40, "share": 40 / 48, "by_case": {}},
        "tools": {"answers": 48, "valid": 48, "share": 1.0, "by_case": {}},
    }
    report = {
        "quality": {
            "temperatures": [0.3, 0.7, 1.0],
            "seeds": 2,
            "cases": ["a"] * 8,
            "servers": {"zest": forms, "llama-server": peer},
        },
        "grammar": {
            "enum_values": 1000,
            "shared_prefix": 25,
            "alone_ms_p50": 200.0,
            "beside_ms_p50": 260.0,
            "ratio_p50": 1.3,
            "control_ratio_p50": 1.2,
            "heavy_decode_tps_p50": 50.0,
            "control_decode_tps_p50": 60.0,
            "step_factor": 1.2,
        },
    }
    lines = format_report(report).splitlines()
    assert (
        "structured outputs (8 schemas x temperatures 0.3, 0.7, 1.0 x 2 seeds): answers that "
        "finish and validate" in lines
    )
    assert "  zest           json_schema 48/48 (100%), tools 47/48 (98%)" in lines
    assert "  llama-server   json_schema 40/48 (83%), tools 48/48 (100%)" in lines
    assert (
        "grammar (enum of 1000 values sharing 25 characters): a 16-token chat 200 ms alone, "
        "260 ms beside it (1.30x; beside the same request without its schema 1.20x); the heavy "
        "request decodes 50.0 tok/s, without its schema 60.0 (1.20x per step)" in lines
    )
    met = {name: ok for name, _, _, ok in targets(report)}
    assert met == {
        "structured json_schema: valid share >= llama-server's": True,
        "structured tools: valid share >= llama-server's": False,
        "grammar: a neighbour beside the worst schema <= 1.5x alone": True,
    }
