"""Structured outputs on both local engines: decoding constrained to a JSON Schema (llama.cpp's
grammar sampler, ONNX Runtime GenAI's guidance), so even the 135M model answers valid JSON."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from tests.engines.conftest import collect, job_for, text_of
from zest.engines import Engine
from zest.errors import BadRequestError
from zest.router import ResponseFormat

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "colour": {"enum": ["red", "green", "blue"]},
    },
    "required": ["name", "age", "colour"],
    "additionalProperties": False,
}


def answer(
    engine: Engine, question: str, response_format: dict[str, Any], *, complete: bool = True
) -> str:
    fmt = ResponseFormat.model_validate(response_format)
    job = dataclasses.replace(job_for(engine, question, max_tokens=96), response_format=fmt)
    deltas = collect(engine, job)
    if complete:
        assert deltas[-1].finish_reason == "stop", "the grammar ends the answer with the JSON"
    return text_of(deltas)


def test_a_json_schema_answer_parses_and_follows_the_schema(engine: Engine) -> None:
    text = answer(
        engine,
        "Invent a person.",
        {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
    )
    person = json.loads(text)
    assert set(person) == {"name", "age", "colour"}
    assert isinstance(person["name"], str)
    assert isinstance(person["age"], int)
    assert person["colour"] in {"red", "green", "blue"}


def test_json_object_answers_a_json_object(engine: Engine) -> None:
    text = answer(engine, "Name a fruit, in JSON.", {"type": "json_object"}, complete=False)
    unconstrained = text_of(collect(engine, job_for(engine, "Name a fruit, in JSON.")))
    assert not unconstrained.lstrip().startswith("{")
    if engine.name == "llamacpp":
        assert isinstance(json.loads(text), dict)
    else:  # the int4 ONNX model nests objects until max_tokens: the start shows the guidance
        assert text.startswith("{")
        assert '"' in text


def test_unconstrained_the_model_does_not_answer_json(engine: Engine) -> None:
    """The tests above prove the constraint: left alone, this model answers prose."""
    text = text_of(collect(engine, job_for(engine, "Invent a person.", max_tokens=48)))
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


# Past the router's keyword checks (router/_schema_keywords.py), a pattern neither engine's
# regular expressions read: a lookahead.
LOOKAHEAD = {"type": "string", "pattern": "^(?=a)[a-z]+$"}


def test_a_schema_the_engine_cannot_constrain_to_is_a_400(engine: Engine) -> None:
    fmt = ResponseFormat.model_validate(
        {"type": "json_schema", "json_schema": {"name": "x", "schema": LOOKAHEAD}}
    )
    job = dataclasses.replace(job_for(engine, "Hi", max_tokens=8), response_format=fmt)
    with pytest.raises(BadRequestError) as refused:
        collect(engine, job)
    assert refused.value.param == "response_format"
    assert "JSON Schema" in refused.value.message
