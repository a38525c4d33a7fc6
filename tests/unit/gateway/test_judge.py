"""What explain says a plan does with a prompt (serving/_judge.py): the walk's two functions,
fit_attempt and give_up_or_record, run attempt after attempt without an engine. The server
itself is the oracle in tests/e2e/test_explain_serves.py; here, the walk's rules."""

from __future__ import annotations

from zest.gateway.serving._judge import PromptToJudge, judge_plan
from zest.gateway.serving._planning import plan_for
from zest.router import Device, Plan, parse_routes

CPU = {"cpu": Device("cpu", frozenset({"llamacpp", "remote"}), "test")}
ROUTES = """\
version: 1
models:
  small: {engine: llamacpp, source: small.gguf, context_length: 256}
  large: {engine: llamacpp, source: large.gguf, context_length: 2048}
routes:
  overflow:
    kind: chat
    model: small
    device: cpu
    max_tokens: 16
    context: {on_overflow: fallback}
    fallback: [{model: large, device: cpu}]
  answered:
    kind: chat
    model: small
    device: cpu
    max_tokens: 16
    fallback: [{model: large, device: cpu}]  # on_overflow: reject (the default)
"""
CONTEXTS = {"small": 256, "large": 2048}


def plan(task: str) -> Plan:
    routes = parse_routes(ROUTES, "routes.yaml")
    route = routes.routes[task]
    return plan_for(routes, CPU, task, route, prompt_tokens=0, load=None, strict_privacy=False)


def overflow_line(model: str, context: int, tokens: int) -> str:
    return (
        f"{model} on cpu: context overflow: this model's maximum context length is {context} "
        f"tokens, but the prompt is {tokens} tokens ({model!r}): shorten the messages or the prompt"
    )


def test_an_overflow_moves_on_to_the_next_attempt_which_serves() -> None:
    verdicts, outcome = judge_plan(plan("overflow"), PromptToJudge.of_size(600), CONTEXTS)
    assert [v.moves_on for v in verdicts] == ["context overflow", None]
    assert verdicts[0].text() == (
        "moves on to the next attempt (context overflow): this model's maximum context length "
        "is 256 tokens, but the prompt is 600 tokens ('small'): shorten the messages or the prompt"
    )
    assert outcome.as_dict() == {
        "status": 200,
        "task": "overflow",
        "attempt": 2,
        "model": "large",
        "device": "cpu",
        "engine": "llamacpp",
        "prompt_tokens": 600,
        "max_tokens": 16,
        "trimmed": None,
        "fallbacks": [overflow_line("small", 256, 600)],
    }


def test_the_last_attempt_s_failure_is_answered_with_every_attempt_tried() -> None:
    """As the server's x-zest-fallbacks on an error: every attempt, the last one included."""
    _, outcome = judge_plan(plan("overflow"), PromptToJudge.of_size(3000), CONTEXTS)
    assert outcome.status == 400
    assert outcome.as_dict()["error"]["code"] == "context_length_exceeded"
    assert outcome.fallbacks == (
        overflow_line("small", 256, 3000),
        overflow_line("large", 2048, 3000),
    )


def test_on_overflow_reject_answers_the_first_overflow() -> None:
    verdicts, outcome = judge_plan(plan("answered"), PromptToJudge.of_size(600), CONTEXTS)
    assert verdicts[0].text().startswith("rejected (400 context_length_exceeded): ")
    assert (outcome.status, outcome.fallbacks) == (400, (overflow_line("small", 256, 600),))


def test_judging_twice_gives_the_same_answer() -> None:
    """give_up_or_record writes on the error it is given: the judge hands it copies."""
    judged = plan("overflow")
    first = judge_plan(judged, PromptToJudge.of_size(3000), CONTEXTS)[1].as_dict()
    assert judge_plan(judged, PromptToJudge.of_size(3000), CONTEXTS)[1].as_dict() == first
