"""The grammar checker's child process, for real: llama-cpp-python's converter and llama.cpp's
parser run in it, so a grammar that crashes the parser, fills the memory or takes too long
costs that child (a 400 for the request) and never the process that serves."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from zest.engines._grammar_check import GrammarChecker, GrammarLimits
from zest.errors import BadRequestError

STRING = {"type": "string", "maxLength": 8}


def grammar(checker: GrammarChecker, schema: dict[str, Any]) -> str:
    return asyncio.run(checker.grammar(schema))


def refusal(checker: GrammarChecker, schema: dict[str, Any]) -> str:
    with pytest.raises(BadRequestError) as caught:
        grammar(checker, schema)
    assert caught.value.param == "response_format"
    return caught.value.message


@pytest.fixture
def checker() -> Any:
    checker = GrammarChecker()
    yield checker
    checker.close()


def test_a_schema_becomes_a_grammar_that_keeps_strings_json(checker: GrammarChecker) -> None:
    made = grammar(checker, STRING)
    assert made.startswith("char ::= ")
    assert '[^"\\\\\\x7F\\x00-\\x1F]' in made  # no raw control characters in a JSON string
    assert "root ::=" in made


def test_answers_are_cached_by_schema(checker: GrammarChecker) -> None:
    first = grammar(checker, STRING)
    checker.close()  # no child left: a second answer can only come from the cache
    assert grammar(checker, dict(STRING)) == first
    assert checker._child is None


def test_a_parser_crash_kills_only_the_child() -> None:
    # 1,000 nested groups overflow a 64 KiB stack in llama.cpp's recursive parser (SIGSEGV):
    # the serving process must only hear of it.
    checker = GrammarChecker(GrammarLimits(stack_bytes=64 * 1024))
    try:
        message = refusal(checker, {"type": "string", "maxLength": 1000})
        assert message == (
            "response_format: llama.cpp cannot constrain the output to this JSON Schema "
            "(llama.cpp could not parse the grammar made of it (the check crashed)): remove or "
            "simplify that part of the schema (zest's limits: docs/structured-outputs.md)"
        )
        assert checker.restarts == 1
        assert grammar(checker, STRING)  # a new child answers the next schema
    finally:
        checker.close()


def test_a_grammar_llama_cpp_refuses_is_a_400(checker: GrammarChecker) -> None:
    # Past ~1,000 nested groups llama.cpp's parser gives up (no crash on a full-size stack).
    message = refusal(checker, {"type": "string", "maxLength": 1024})
    assert "(llama.cpp could not parse the grammar made of it)" in message
    assert checker.restarts == 0


def test_the_converter_running_out_of_memory_is_a_400() -> None:
    checker = GrammarChecker(GrammarLimits(memory_bytes=64 << 20))
    try:
        message = refusal(
            checker, {"type": "array", "items": {"type": "integer"}, "minItems": 10**7}
        )
        assert "(its grammar needs more than 64 MiB to build)" in message
        assert grammar(checker, STRING)  # the same child goes on
        assert checker.restarts == 0
    finally:
        checker.close()


def test_a_grammar_over_the_size_limit_is_a_400() -> None:
    checker = GrammarChecker(GrammarLimits(grammar_bytes=1000))
    try:
        message = refusal(checker, {"enum": [f"value-{i}" for i in range(200)]})
        # A trie: the values' shared "value-" and tens are written once (3,700 bytes as
        # 200 alternatives).
        assert "(its grammar is 1775 bytes, over zest's limit of 1000)" in message
    finally:
        checker.close()


def test_a_check_past_its_time_is_a_400_and_a_new_child() -> None:
    checker = GrammarChecker(GrammarLimits(timeout_s=0.001))
    try:
        # 20,000 values take the child ~90 ms (174 KB of grammar, inside the size limit): far
        # past the 1 ms, even when this thread is held off the CPU between the ask and the wait
        # (1,000 values took ~8 ms, and a busy 2-core machine once answered within the limit).
        message = refusal(checker, {"enum": [f"value-{i}" for i in range(20_000)]})
        assert "(its grammar took over 0.001 s to build and check)" in message
        assert checker.restarts == 1
    finally:
        checker.close()


def test_a_schema_the_converter_cannot_take_names_why(checker: GrammarChecker) -> None:
    message = refusal(checker, {"$ref": "#/$defs/missing"})
    assert message.startswith(
        "response_format: llama.cpp cannot constrain the output to this JSON Schema ("
    )
