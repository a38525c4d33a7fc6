"""`zest route test CASES.jsonl`, run as the command: the example's cases pass through the
server's own decision with the real models, a mismatch exits 1 with its table and trace, and
a file of deterministic rules is decided without loading any model."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.e2e.conftest import REPO, run_zest

EXAMPLE = REPO / "examples" / "routes" / "routing.yaml"
CASES = REPO / "examples" / "routes" / "routing.cases.jsonl"


def zest(*args: str) -> subprocess.CompletedProcess[str]:
    return run_zest(*args, env={**os.environ, "ZEST_EMULATE_DEVICES": ""}, timeout=300)


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **extra}


def cells(line: str) -> list[str]:
    """A row of the report's table: its columns are two spaces apart at least."""
    return re.split(r"\s{2,}", line.strip())


def write_cases(path: Path, *cases: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(case) + "\n" for case in cases))
    return path


def test_the_examples_cases_pass() -> None:
    result = zest("route", "test", str(CASES), "--routes", str(EXAMPLE))
    assert result.returncode == 0, result.stdout + result.stderr
    count = len(CASES.read_text().splitlines())
    assert result.stdout.splitlines()[-1] == f"{count} passed, 0 failed"
    rows = [line.split() for line in result.stdout.splitlines()[1 : count + 1]]
    assert all("pass" in row for row in rows)
    assert "classify: a math question" in result.stdout  # a model-backed case, decided


# A file whose rules read the request alone, and whose model is no model at all: deciding
# must never load it (or read its tokenizer).
DETERMINISTIC = """\
version: 1
models:
  junk: {engine: llamacpp, source: junk.gguf}
routes:
  chat:
    kind: chat
    model: junk
    rules:
      - id: private
        when: {metadata: {key: consent, any: [denied, withdrawn]}}
        to: chat-local
        outputs: {reason: privacy}
      - id: code
        when: {any: [{keywords_any: ["def "]}, {regex: '\\bError\\b'}]}
        to: chat-coder
  chat-local: {kind: chat, model: junk}
  chat-coder: {kind: chat, model: junk}
"""


def deterministic_routes(folder: Path) -> Path:
    (folder / "junk.gguf").write_bytes(b"not a model")
    path = folder / "routes.yaml"
    path.write_text(DETERMINISTIC)
    return path


def test_deterministic_rules_load_no_model(tmp_path: Path) -> None:
    cases = write_cases(
        tmp_path / "cases.jsonl",
        {
            "name": "one of the tokens",
            "task": "chat",
            "request": chat("hello", metadata={"consent": "granted, withdrawn"}),
            "expect": {"rule": "private", "route": "chat-local", "outputs": {"reason": "privacy"}},
        },
        {
            "name": "regex",
            "task": "chat",
            "request": {"input": "it printed Error and stopped"},
            "expect": {"rule": "code", "route": "chat-coder"},
        },
        {
            "name": "nothing matches",
            "task": "chat",
            "request": {"messages": [{"role": "user", "content": "hi"}], "user": "u1"},
            "expect": {"rule": "default", "route": "chat"},
        },
    )
    result = zest("route", "test", str(cases), "--routes", str(deterministic_routes(tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "3 passed, 0 failed"
    assert result.stderr == ""  # nothing loaded, nothing logged


# Model-backed conditions whose models are not there: a similar_to and a classify, behind a
# deterministic rule.
BROKEN = """\
version: 1
models:
  junk: {engine: llamacpp, source: junk.gguf}
  gone-embedder: {engine: llamacpp, source: gone-embedder.gguf, options: {embedding: true}}
  gone-classifier: {engine: llamacpp, source: gone-classifier.gguf}
phrases: {code: [my function raises an exception]}
routes:
  chat:
    kind: chat
    model: junk
    rules:
      - id: private
        when: {metadata: {key: consent, equals: denied}}
        to: chat-local
      - id: code
        when: {similar_to: {via: embed, label: code, min_score: 0.6}}
        to: chat-coder
      - id: math
        when:
          classify: {via: classifier, labels: [math, other], label: math, prompt: "Subject?"}
        to: chat-local
  chat-local: {kind: chat, model: junk}
  chat-coder: {kind: chat, model: junk}
  embed: {kind: embedding, model: gone-embedder}
  classifier: {kind: chat, model: gone-classifier}
"""


def broken_routes(folder: Path) -> Path:
    (folder / "junk.gguf").write_bytes(b"not a model")
    path = folder / "routes.yaml"
    path.write_text(BROKEN)
    return path


def test_a_condition_whose_model_is_missing_fails_the_run_once_per_cause(tmp_path: Path) -> None:
    """Cases that expect the default, which the failed conditions let through, are errors, not
    passes; each cause is told once (not once per case, nor in the log), with its key path."""
    cases = write_cases(
        tmp_path / "cases.jsonl",
        *(
            {
                "name": f"expects the default {n}",
                "task": "chat",
                "request": chat(f"Who was emperor in year {n}?"),
                "expect": {"rule": "default", "route": "chat"},
            }
            for n in range(3)
        ),
        {
            "name": "decided before any model",
            "task": "chat",
            "request": chat("hi", metadata={"consent": "denied"}),
            "expect": {"rule": "private", "route": "chat-local"},
        },
    )
    routes = broken_routes(tmp_path)
    result = zest("route", "test", str(cases), "--routes", str(routes))
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert [cells(line) for line in lines[:5]] == [
        ["CASE", "TASK", "RESULT", "EXPECTED", "GOT"],
        *(
            [f"expects the default {n}", "chat", "ERROR", "default -> chat",
             "default -> chat (a condition failed)"]
            for n in range(3)
        ),
        ["decided before any model", "chat", "pass", "private -> chat-local",
         "private -> chat-local"],
    ]  # fmt: skip
    assert lines[5:] == [
        "",
        "model-backed conditions that failed (an error, not a condition that does not hold: "
        'fix the cause, or mark a case "on_error": true to expect it):',
        "  routes.chat.rules.1.when.similar_to (via embed), 3 cases: model file not found: "
        f"{tmp_path}/gone-embedder.gguf: copy the model there or fix the source path",
        "  routes.chat.rules.2.when.classify (via classifier), 3 cases: model file not found: "
        f"{tmp_path}/gone-classifier.gguf: copy the model there or fix the source path",
        "",
        "model-backed conditions: up to 300 s each, their model's load included "
        "(--condition-budget); a case expecting on_error: their own timeout_s",
        "",
        "1 passed, 0 failed, 3 errors",
    ]


def test_a_case_may_expect_the_on_error_path(tmp_path: Path) -> None:
    cases = write_cases(
        tmp_path / "cases.jsonl",
        {
            "name": "the classifier is down",
            "task": "chat",
            "request": chat("What is 6 times 7?"),
            "expect": {"rule": "default", "route": "chat", "on_error": True},
        },
        {
            "name": "no condition failed",
            "task": "chat",
            "request": chat("hi", metadata={"consent": "denied"}),
            "expect": {"rule": "private", "route": "chat-local", "on_error": True},
        },
    )
    result = zest("route", "test", str(cases), "--routes", str(broken_routes(tmp_path)))
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [cells(line) for line in lines[1:3]] == [
        ["the classifier is down", "chat", "pass", "default -> chat (on_error)",
         "default -> chat (a condition failed)"],
        ["no condition failed", "chat", "FAIL", "private -> chat-local (on_error)",
         "private -> chat-local"],
    ]  # fmt: skip
    assert "no condition failed: on_error (no condition failed) differ; trace:" in lines
    assert "model-backed conditions that failed" not in result.stdout  # expected, not a cause
    assert lines[-1] == "1 passed, 1 failed"


def test_a_mismatch_exits_1_with_the_table_and_the_trace(tmp_path: Path) -> None:
    cases = write_cases(
        tmp_path / "cases.jsonl",
        {
            "name": "right",
            "task": "chat",
            "request": chat("def f(): pass"),
            "expect": {"rule": "code", "route": "chat-coder"},
        },
        {
            "name": "wrong",
            "task": "chat",
            "request": chat("def f(): pass"),
            "expect": {"rule": "private", "route": "chat-local", "outputs": {"reason": "x"}},
        },
    )
    result = zest("route", "test", str(cases), "--routes", str(deterministic_routes(tmp_path)))
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["CASE", "TASK", "RESULT", "EXPECTED", "GOT"]
    got = ["code", "->", "chat-coder"]
    assert lines[1].split() == ["right", "chat", "pass", *got, *got]
    assert lines[2].split() == [
        "wrong",
        "chat",
        "FAIL",
        "private",
        "->",
        "chat-local",
        '{"reason":',
        '"x"}',
        "code",
        "->",
        "chat-coder",
        "{}",
    ]
    assert lines[3:] == [
        "",
        "wrong: rule, route, outputs differ; trace:",
        '  {"condition": "metadata: {\\"key\\": \\"consent\\", \\"any\\": [\\"denied\\", '
        '\\"withdrawn\\"]}", "kind": "metadata", "result": false}',
        '  {"condition": "keywords_any: [\\"def \\"]", "kind": "keywords_any", "result": true}',
        "",
        "1 passed, 1 failed",
    ]


def test_a_case_that_fails_to_decide_is_a_failure_with_the_reason(tmp_path: Path) -> None:
    cases = write_cases(
        tmp_path / "cases.jsonl",
        {
            "name": "bad request",
            "task": "chat",
            "request": {"messages": [], "metadata": {"k": "v"}},
            "expect": {"rule": "default", "route": "chat"},
        },
    )
    result = zest("route", "test", str(cases), "--routes", str(deterministic_routes(tmp_path)))
    assert result.returncode == 1
    assert (
        "bad request: failed: request.messages: Value error, messages must hold at least one "
        "message (as /v1/chat/completions reads it)"
    ) in result.stdout


def test_a_file_naming_what_the_routes_lack_is_refused_before_any_case(tmp_path: Path) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        json.dumps(
            {
                "name": "typo",
                "task": "chta",
                "request": chat("hi"),
                "expect": {"rule": "default", "route": "chat"},
            }
        )
        + "\n"
        + json.dumps(
            {
                "name": "rule typo",
                "task": "chat",
                "request": chat("hi"),
                "expect": {"rule": "privat", "route": "chat-local"},
            }
        )
        + "\nnot json\n"
    )
    result = zest("route", "test", str(cases), "--routes", str(deterministic_routes(tmp_path)))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{cases}:1: task: no route 'chta': did you mean 'chat'?",
        f"{cases}:2: expect.rule: route 'chat' has no rule 'privat': did you mean 'private'?",
        f"{cases}:3: not JSON: Expecting value",
    ]


def test_explain_a_request_shows_its_decision_then_the_chosen_routes_plan(tmp_path: Path) -> None:
    body = tmp_path / "body.json"
    body.write_text(json.dumps(chat("It says Error: disk full", metadata={"consent": "ok"})))
    routes = deterministic_routes(tmp_path)
    result = zest("explain", "chat", "--request", str(body), "--routes", str(routes))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:4] == [
        "decision: task chat -> route chat-coder, rule code",
        '  metadata: {"key": "consent", "any": ["denied", "withdrawn"]}: false',
        '  keywords_any: ["def "]: false',
        "  regex: '\\bError\\b': true",  # as the file writes it
    ]
    assert lines[4].startswith("task chat-coder: chat route, model junk (llamacpp)")
    assert lines[-3].startswith("attempt 1: junk on cpu: ")
    assert lines[-2].endswith("its model's file could not be read: the attempt will not load)")
    assert lines[-1] == "answer: 200 from attempt 1, junk on cpu"  # if every engine loads
    as_json = zest("explain", "chat", "--request", str(body), "--routes", str(routes), "--json")
    explained = json.loads(as_json.stdout)
    assert explained["decision"]["route_to"] == explained["task"] == "chat-coder"
    assert explained["endpoint"] == "/v1/chat/completions"


def test_explain_names_a_request_it_cannot_read(tmp_path: Path) -> None:
    body = tmp_path / "body.json"
    body.write_text('{"messages": []}')
    routes = deterministic_routes(tmp_path)
    result = zest("explain", "chat", "--request", str(body), "--routes", str(routes))
    assert result.returncode == 1
    assert result.stderr == (
        f"zest: {body}: request.messages: Value error, messages must hold at least one "
        "message (as /v1/chat/completions reads it)\n"
    )
