"""Structured outputs at the temperatures users send: generated JSON Schemas inside zest's
documented limits (tests/schemas.py), sent to the real server and model as a json_schema
response format and as a tool's parameters, at temperatures 0.3 to 1.0 with several seeds.
Every schema bounds its answer, and max_tokens covers the longest one, so every answer must
finish with `stop` (or `tool_calls`) and validate with the `jsonschema` library.

On 744dfcb these fail at the first example above temperature 0 (the sampler's candidates kept
stale ids after top-k sorted them, so constrained answers were noise that broke their schema).

Bounded for CI: 20 examples of two requests each, derandomized (the same examples every run),
about 3 minutes on a quiet 2-core machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from tests.e2e.conftest import Server
from tests.schemas import longest, root_objects

pytestmark = pytest.mark.e2e

MAX_TOKENS = 512  # the default chat route's cap
ENVELOPE = 60  # the tool-call JSON around a call's arguments
EXAMPLES = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
temperatures = st.sampled_from([0.3, 0.5, 0.7, 1.0])
seeds = st.integers(0, 2**31 - 1)
bounded = root_objects().filter(lambda s: longest(s) + ENVELOPE <= MAX_TOKENS)


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.v1, timeout=600) as client:
        yield client


def assert_valid(answer: Any, schema: dict[str, Any], what: str) -> None:
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(answer)]
    assert not errors, f"{what}: {json.dumps(answer)} breaks {json.dumps(schema)}: {errors}"


def chat(http: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    reply = http.post("/chat/completions", json={"model": "chat", "max_tokens": MAX_TOKENS, **body})
    assert reply.status_code == 200, reply.text
    choice: dict[str, Any] = reply.json()["choices"][0]
    return choice


@EXAMPLES
@given(schema=bounded, temperature=temperatures, seed=seeds)
def test_json_schema_answers_finish_and_validate(
    http: httpx.Client, schema: dict[str, Any], temperature: float, seed: int
) -> None:
    choice = chat(
        http,
        {
            "messages": [{"role": "user", "content": "Fill in an example, in JSON."}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "example", "schema": schema, "strict": True},
            },
            "temperature": temperature,
            "seed": seed,
        },
    )
    what = f"temperature {temperature}, seed {seed}"
    assert choice["finish_reason"] == "stop", f"{what}: {choice}"
    assert_valid(json.loads(choice["message"]["content"]), schema, what)


@EXAMPLES
@given(schema=bounded, temperature=temperatures, seed=seeds)
def test_tool_arguments_finish_and_validate(
    http: httpx.Client, schema: dict[str, Any], temperature: float, seed: int
) -> None:
    tool = {"type": "function", "function": {"name": "record", "parameters": schema}}
    choice = chat(
        http,
        {
            "messages": [{"role": "user", "content": "Record an example."}],
            "tools": [tool],
            "tool_choice": {"type": "function", "function": {"name": "record"}},
            "parallel_tool_calls": False,
            "temperature": temperature,
            "seed": seed,
        },
    )
    what = f"temperature {temperature}, seed {seed}"
    assert choice["finish_reason"] == "tool_calls", f"{what}: {choice}"
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "record"
    assert_valid(json.loads(call["function"]["arguments"]), schema, what)
