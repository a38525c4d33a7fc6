"""zest eval's pure parts: reading a JSONL quality set, checking answers, shaping requests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from zest.errors import EvalFileError
from zest.gateway.cli._eval_cases import (
    Case,
    CaseResult,
    answer_text,
    copied_share,
    format_measures,
    format_result,
    gateway_problems,
    length_ratio,
    parse_cases,
    request_for,
)

CHAT = {"task": "chat", "messages": [{"role": "user", "content": "hi"}], "must_include": ["x"]}


def jsonl(*lines: dict[str, Any] | str) -> str:
    return "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)


def problems_of(text: str) -> list[str]:
    with pytest.raises(EvalFileError) as info:
        parse_cases(text, "set.jsonl")
    return info.value.problems


def one_case(**fields: Any) -> Case:
    return parse_cases(jsonl({**CHAT, **fields}), "set.jsonl")[0]


def test_cases_keep_their_line_and_default_to_a_greedy_request() -> None:
    cases = parse_cases(jsonl({**CHAT, "name": "a"}, "", {**CHAT, "name": "b"}), "set.jsonl")
    assert [(case.name, case.line, case.temperature) for case in cases] == [
        ("a", 1, 0.0),
        ("b", 3, 0.0),
    ]


def test_a_case_without_a_name_is_named_after_its_line() -> None:
    assert one_case().name == "line 1"


def test_model_is_accepted_for_task() -> None:
    line = {"model": "autocomplete", "prompt": "def f(", "must_include": ["x"]}
    assert parse_cases(jsonl(line), "set.jsonl")[0].task == "autocomplete"


def test_every_bad_line_is_reported_with_its_number() -> None:
    text = jsonl(
        CHAT,
        "not json",
        "[1, 2]",
        {**CHAT, "must_includes": ["x"]},
        {**CHAT, "messages": [{"role": "robot", "content": "hi"}]},
        {**CHAT, "max_tokens": 0},
    )
    assert problems_of(text) == [
        "set.jsonl:2: not valid JSON: Expecting value (column 1)",
        "set.jsonl:3: write one JSON object per line, got list",
        "set.jsonl:4: unknown field 'must_includes': did you mean 'must_include'? (allowed: "
        "input, max_copied, max_length_ratio, max_tokens, messages, model, must_include, "
        "must_not_include, name, prompt, task, temperature)",
        "set.jsonl:5: messages.0.role: Input should be 'system', 'developer', 'user' or "
        "'assistant'",
        "set.jsonl:6: max_tokens: Input should be greater than or equal to 1",
    ]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            {"prompt": "p"},
            "give exactly one of messages, prompt or input (got messages and prompt)",
        ),
        (
            {"messages": None},
            "give exactly one of messages, prompt or input (got none)",
        ),
        (
            {"must_include": []},
            "give must_include, must_not_include, max_copied or max_length_ratio: a case "
            "without checks",
        ),
        (
            {"must_include": "Paris"},
            'must_include: write a list of strings or {"regex": "..."} objects',
        ),
        (
            {"must_include": [""]},
            'must_include: item 0: write a non-empty string or {"regex": "..."}, got \'\'',
        ),
        (
            {"must_not_include": [{"regex": "("}]},
            "must_not_include: item 0: bad regex '(': missing ), unterminated subpattern at "
            "position 0",
        ),
    ],
)
def test_a_bad_case_says_what_to_fix(fields: dict[str, Any], problem: str) -> None:
    line = {key: value for key, value in {**CHAT, **fields}.items() if value is not None}
    assert problems_of(jsonl(line)) == [f"set.jsonl:1: {problem}"]


def test_names_must_be_unique() -> None:
    text = jsonl({**CHAT, "name": "a"}, {**CHAT, "name": "a"})
    assert problems_of(text) == [
        "set.jsonl:2: name 'a' is already used on line 1: give each case its own name"
    ]


def test_an_empty_file_is_an_error() -> None:
    assert problems_of("\n\n") == ["set.jsonl: no cases: write one JSON object per line"]


def test_substrings_ignore_case_and_regexes_are_as_written() -> None:
    case = one_case(must_include=["paris", {"regex": r"\bParis\b"}], must_not_include=["London"])
    assert case.checks("It is PARIS, Paris.") == []
    assert case.checks("It is PARIS.") == ["must_include regex '\\\\bParis\\\\b': not found"]
    assert case.checks("Paris, not london") == ["must_not_include 'London': found"]


TEXT = (
    "The city council voted on Monday to close the old bridge for repairs. Traffic will be "
    "sent over the new ring road for six months, and buses will run every ten minutes."
)


def test_copied_share_counts_the_answer_s_8_word_phrases_found_in_the_text() -> None:
    copied = "The council will close the old bridge for repairs. Traffic will be sent elsewhere."
    # 14 words: 7 eight-word phrases; "close the old bridge for repairs traffic will" and the
    # two after it are the text's (punctuation and case aside).
    assert copied_share(copied, TEXT) == 3 / 7
    assert copied_share(TEXT, TEXT) == 1.0
    assert copied_share("The bridge closes for six months.", TEXT) == 0.0  # under 8 words
    assert length_ratio("The bridge closes for six months.", TEXT) == 6 / 32


def test_copying_checks_name_the_measure_and_the_limit() -> None:
    case = parse_cases(
        jsonl({"task": "summarization", "input": TEXT, "max_copied": 0.3, "max_length_ratio": 0.5}),
        "set.jsonl",
    )[0]
    assert case.checks("The old bridge closes for repairs; buses fill the gap.") == []
    assert case.checks(TEXT) == [
        "max_copied 0.3: 1.00 of the answer's 8-word phrases are copied from the text",
        "max_length_ratio 0.5: the answer is 1.00 of the text's length in words",
    ]
    result = CaseResult(case, 1.5, TEXT, case.checks(TEXT), "task=s; model=smollm2; device=cpu")
    assert format_result(result).splitlines()[0] == (
        "FAIL  line 1  (1.50s, smollm2 on cpu; copied 1.00, length 1.00 of the text)"
    )
    assert result.as_json()["measures"] == {"copied": 1.0, "length_ratio": 1.0}


def test_the_copying_measures_are_summed_up_over_the_cases_that_check_them() -> None:
    summary, chat = parse_cases(
        jsonl({"task": "summarization", "input": TEXT, "max_copied": 0.3}, CHAT), "set.jsonl"
    )
    answers = [TEXT, "The old bridge closes for repairs; buses fill the gap."]
    results = [CaseResult(summary, 1.0, a, summary.checks(a)) for a in answers]
    assert format_measures(results) == "copying over 2 cases: copied mean 0.50, worst 1.00"
    assert format_measures([CaseResult(chat, 1.0, "x", [])]) is None


def test_the_text_of_a_chat_case_is_its_last_user_message() -> None:
    messages = [
        {"role": "system", "content": "Summarize."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": TEXT}]},
    ]
    case = one_case(messages=messages, must_include=[], max_copied=0.2)
    assert case.text == TEXT
    assert case.measures(TEXT) == {"copied": 1.0}


def test_requests_follow_the_input_kind() -> None:
    assert request_for(one_case(max_tokens=8)) == (
        "/v1/chat/completions",
        {
            "model": "chat",
            "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0.0,
            "max_tokens": 8,
        },
    )
    prompt = {"task": "autocomplete", "prompt": "def f(", "must_include": ["x"]}
    assert request_for(parse_cases(jsonl(prompt), "s")[0]) == (
        "/v1/completions",
        {"model": "autocomplete", "prompt": "def f(", "temperature": 0.0},
    )
    task = {"task": "summarization", "input": "text", "must_include": ["x"], "temperature": 0.5}
    assert request_for(parse_cases(jsonl(task), "s")[0]) == (
        "/v1/tasks/summarization",
        {"input": "text", "temperature": 0.5},
    )


def test_answers_of_either_shape_are_read() -> None:
    assert answer_text({"choices": [{"message": {"content": "hello"}}]}) == "hello"
    assert answer_text({"choices": [{"text": " world"}]}) == " world"


def test_the_gateway_must_serve_each_task_with_the_right_kind() -> None:
    prompt = {"task": "chat", "prompt": "p", "must_include": ["x"]}
    elsewhere = {**CHAT, "task": "autocomplete"}
    unknown = {**CHAT, "task": "nope"}
    cases = parse_cases(jsonl(CHAT, prompt, elsewhere, unknown), "set.jsonl")
    kinds: dict[str, str | None] = {"chat": "chat", "autocomplete": "completion"}
    assert gateway_problems(cases, kinds, "set.jsonl") == [
        "set.jsonl:2: task 'chat' is a chat route: give messages or input, not prompt",
        "set.jsonl:3: task 'autocomplete' is a completion route: give prompt or input, "
        "not messages",
        "set.jsonl:4: task 'nope' is not served by the gateway (tasks: autocomplete, chat)",
    ]


def test_a_failure_shows_the_failed_checks_and_the_answer() -> None:
    case = one_case(name="capital", must_include=["Paris"])
    route = "task=chat; model=smollm2; device=cpu; engine=llamacpp"
    failed = CaseResult(case, 0.5, "It is Lyon.\nSurely.", case.checks("It is Lyon."), route)
    assert format_result(failed).splitlines() == [
        "FAIL  capital  (0.50s, smollm2 on cpu)",
        "      must_include 'Paris': not found",
        '      answer: "It is Lyon.\\nSurely."',
    ]
    assert format_result(CaseResult(case, 0.25, "Paris", [], None)) == "PASS  capital  (0.25s)"
