"""Quality sets for `zest eval`: reading a JSONL file of cases and checking answers (pure).

One case per line:

    {"name": "capital", "task": "chat",
     "messages": [{"role": "user", "content": "What is the capital of France?"}],
     "must_include": ["Paris"], "must_not_include": ["London"], "max_tokens": 32}

`messages` goes to /v1/chat/completions, `prompt` to /v1/completions, `input` to
/v1/tasks/{task}. A check is a string (found anywhere in the answer, ignoring case) or
{"regex": "..."} (re.search, as written: add (?i) to ignore case). Two more catch an answer that
copies its text instead of summing it up: `max_copied` (the most of the answer's word 8-grams
that may be found in the text it was given: the input, the prompt or the last user message) and
`max_length_ratio` (the answer's words over the text's).
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from zest.errors import EvalFileError

__all__ = [
    "Case",
    "CaseResult",
    "Check",
    "EvalFileError",
    "answer_text",
    "copied_share",
    "format_measures",
    "format_result",
    "format_summary",
    "gateway_problems",
    "length_ratio",
    "parse_cases",
    "read_cases",
    "request_for",
]

_ANSWER_SHOWN = 200  # characters of a failing answer shown
# Eight words in a row, the same as in the text, are a copied phrase, not a shared term or name
# (a summary may repeat "the city council voted on Monday", six words, but seldom eight).
COPY_NGRAM = 8
_WORD = re.compile(r"\w+(?:['\u2019]\w+)*")


def words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def copied_share(answer: str, text: str, n: int = COPY_NGRAM) -> float:
    """The share of the answer's word n-grams that are in `text` (0 for an answer shorter
    than n words: it has none to copy)."""
    said = _ngrams(words(answer), n)
    if not said:
        return 0.0
    given = set(_ngrams(words(text), n))
    return sum(gram in given for gram in said) / len(said)


def length_ratio(answer: str, text: str) -> float:
    """The answer's words over the text's."""
    return len(words(answer)) / max(len(words(text)), 1)


def _ngrams(tokens: list[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


@dataclass(frozen=True)
class Check:
    """One must_include / must_not_include item."""

    text: str
    regex: bool = False

    def found_in(self, answer: str) -> bool:
        if self.regex:
            return re.search(self.text, answer) is not None
        return self.text.casefold() in answer.casefold()

    def __str__(self) -> str:
        return f"regex {self.text!r}" if self.regex else repr(self.text)


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[dict[str, Any]]


class Case(BaseModel):
    """One line of the file, validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    line: int = 0
    name: str = ""
    task: str = Field(min_length=1)
    messages: list[_Message] | None = Field(default=None, min_length=1)
    prompt: str | None = None
    input: str | None = None
    must_include: tuple[Check, ...] = ()
    must_not_include: tuple[Check, ...] = ()
    max_copied: float | None = Field(default=None, ge=0.0, le=1.0)
    max_length_ratio: float | None = Field(default=None, gt=0.0)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)  # 0: greedy, the same every run

    @field_validator("must_include", "must_not_include", mode="before")
    @classmethod
    def _checks(cls, items: Any) -> tuple[Check, ...]:
        if not isinstance(items, list):
            raise ValueError('write a list of strings or {"regex": "..."} objects')
        return tuple(_check(item, index) for index, item in enumerate(items))

    @model_validator(mode="after")
    def _one_input_and_a_check(self) -> Case:
        given = [key for key in ("messages", "prompt", "input") if getattr(self, key) is not None]
        if len(given) != 1:
            found = f"got {' and '.join(given)}" if given else "got none"
            raise ValueError(f"give exactly one of messages, prompt or input ({found})")
        copying = (self.max_copied, self.max_length_ratio)
        if not self.must_include and not self.must_not_include and copying == (None, None):
            raise ValueError(
                "give must_include, must_not_include, max_copied or max_length_ratio: a case "
                "without checks"
            )
        return self

    @property
    def text(self) -> str:
        """What the answer is about: the input, the prompt, or the last user message."""
        if self.input is not None or self.prompt is not None:
            return self.input or self.prompt or ""
        users = [m.content for m in self.messages or () if m.role == "user"]
        content = users[-1] if users else ""
        if isinstance(content, str):
            return content
        return " ".join(str(part.get("text") or "") for part in content)

    def measures(self, answer: str) -> dict[str, float]:
        """The copying measures this case checks (copied share, length ratio), rounded."""
        measured = {}
        if self.max_copied is not None:
            measured["copied"] = round(copied_share(answer, self.text), 3)
        if self.max_length_ratio is not None:
            measured["length_ratio"] = round(length_ratio(answer, self.text), 3)
        return measured

    def checks(self, answer: str) -> list[str]:
        """The failed checks, each said in words; empty when the answer passes."""
        missing = [
            f"must_include {c}: not found" for c in self.must_include if not c.found_in(answer)
        ]
        found = [
            f"must_not_include {c}: found" for c in self.must_not_include if c.found_in(answer)
        ]
        return missing + found + self._copying(answer)

    def _copying(self, answer: str) -> list[str]:
        measured, failed = self.measures(answer), []
        if self.max_copied is not None and measured["copied"] > self.max_copied:
            failed.append(
                f"max_copied {self.max_copied}: {measured['copied']:.2f} of the answer's "
                f"{COPY_NGRAM}-word phrases are copied from the text"
            )
        if self.max_length_ratio is not None and measured["length_ratio"] > self.max_length_ratio:
            failed.append(
                f"max_length_ratio {self.max_length_ratio}: the answer is "
                f"{measured['length_ratio']:.2f} of the text's length in words"
            )
        return failed


def _check(item: Any, index: int) -> Check:
    if isinstance(item, str) and item:
        return Check(item)
    if isinstance(item, dict) and set(item) == {"regex"} and isinstance(item["regex"], str):
        try:
            re.compile(item["regex"])
        except re.error as exc:
            raise ValueError(f"item {index}: bad regex {item['regex']!r}: {exc}") from None
        return Check(item["regex"], regex=True)
    raise ValueError(f'item {index}: write a non-empty string or {{"regex": "..."}}, got {item!r}')


def read_cases(path: Path) -> list[Case]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalFileError([f"{path}: cannot read the eval file: {exc}"]) from None
    return parse_cases(text, str(path))


def parse_cases(text: str, origin: str) -> list[Case]:
    """Every case of a JSONL text; EvalFileError lists every bad line at once."""
    cases: list[Case] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            cases.append(_parse_line(line, number))
        except ValueError as exc:
            problems.extend(f"{origin}:{number}: {problem}" for problem in str(exc).splitlines())
    problems += _duplicate_names(cases, origin)
    if not cases and not problems:
        problems.append(f"{origin}: no cases: write one JSON object per line")
    if problems:
        raise EvalFileError(problems)
    return cases


def _parse_line(line: str, number: int) -> Case:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"write one JSON object per line, got {type(data).__name__}")
    if "model" in data and "task" not in data:
        data["task"] = data.pop("model")  # OpenAI clients call the task `model`
    try:
        return Case.model_validate({"name": f"line {number}", **data, "line": number})
    except ValidationError as exc:
        raise ValueError("\n".join(_describe(error) for error in exc.errors())) from None


def _describe(error: Any) -> str:
    where = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden" and len(error["loc"]) == 1:
        allowed = sorted(set(Case.model_fields) - {"line"} | {"model"})
        close = difflib.get_close_matches(where, allowed, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown field {where!r}: {hint}(allowed: {', '.join(allowed)})"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def _duplicate_names(cases: list[Case], origin: str) -> list[str]:
    first_line: dict[str, int] = {}
    problems = []
    for case in cases:
        if case.name in first_line:
            problems.append(
                f"{origin}:{case.line}: name {case.name!r} is already used on line "
                f"{first_line[case.name]}: give each case its own name"
            )
        first_line.setdefault(case.name, case.line)
    return problems


def gateway_problems(cases: list[Case], kinds: dict[str, str | None], origin: str) -> list[str]:
    """Cases the gateway cannot run: an unknown task, or messages/prompt for the wrong kind.

    `kinds` maps each task the gateway serves to its kind (chat, completion; None if unsaid).
    """
    problems = []
    served = ", ".join(sorted(kinds))
    for case in cases:
        where = f"{origin}:{case.line}: task {case.task!r}"
        kind = kinds.get(case.task)
        if case.task not in kinds:
            problems.append(f"{where} is not served by the gateway (tasks: {served})")
        elif case.messages is not None and kind == "completion":
            problems.append(f"{where} is a completion route: give prompt or input, not messages")
        elif case.prompt is not None and kind == "chat":
            problems.append(f"{where} is a chat route: give messages or input, not prompt")
    return problems


# Requests and answers


def request_for(case: Case) -> tuple[str, dict[str, Any]]:
    """The gateway path and JSON body for a case."""
    body: dict[str, Any] = {"temperature": case.temperature}
    if case.max_tokens is not None:
        body["max_tokens"] = case.max_tokens
    if case.messages is not None:
        messages = [m.model_dump() for m in case.messages]
        return "/v1/chat/completions", {"model": case.task, "messages": messages, **body}
    if case.prompt is not None:
        return "/v1/completions", {"model": case.task, "prompt": case.prompt, **body}
    return f"/v1/tasks/{case.task}", {"input": case.input, **body}


def answer_text(body: Any) -> str:
    """The generated text of a chat or completion answer."""
    choice = body["choices"][0]
    if "message" in choice:
        return str(choice["message"].get("content") or "")
    return str(choice.get("text") or "")


@dataclass(frozen=True)
class CaseResult:
    case: Case
    latency_s: float
    answer: str | None  # None: the request failed
    failures: list[str]  # failed checks, or why the request failed
    route: str | None = None  # x-zest-route: what served the answer

    @property
    def measures(self) -> dict[str, float]:
        return {} if self.answer is None else self.case.measures(self.answer)

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.case.name,
            "line": self.case.line,
            "task": self.case.task,
            "passed": self.passed,
            "latency_s": round(self.latency_s, 3),
            "failures": self.failures,
            "answer": self.answer,
            "route": self.route,
            **({"measures": self.measures} if self.measures else {}),
        }


def format_result(result: CaseResult) -> str:
    """PASS/FAIL, name and latency; for a failure, what failed and the (shortened) answer."""
    verdict = "PASS" if result.passed else "FAIL"
    served = _served_by(result.route) + _measured(result.measures)
    lines = [f"{verdict}  {result.case.name}  ({result.latency_s:.2f}s{served})"]
    lines += [f"      {failure}" for failure in result.failures]
    if result.failures and result.answer is not None:
        lines.append(f"      answer: {_shorten(result.answer)}")
    return "\n".join(lines)


def _served_by(route: str | None) -> str:
    """', smollm2 on cpu' from x-zest-route (task=chat; model=smollm2; device=cpu; ...)."""
    fields = dict(part.strip().partition("=")[::2] for part in (route or "").split(";"))
    if "model" not in fields or "device" not in fields:
        return ""
    return f", {fields['model']} on {fields['device']}"


def _measured(measures: dict[str, float]) -> str:
    """'; copied 0.12, length 0.31 of the text' for a case that checks copying."""
    said = []
    if "copied" in measures:
        said.append(f"copied {measures['copied']:.2f}")
    if "length_ratio" in measures:
        said.append(f"length {measures['length_ratio']:.2f} of the text")
    return f"; {', '.join(said)}" if said else ""


def _shorten(answer: str) -> str:
    shown = json.dumps(answer[:_ANSWER_SHOWN], ensure_ascii=False)
    return shown + (f" … ({len(answer)} characters)" if len(answer) > _ANSWER_SHOWN else "")


def format_measures(results: list[CaseResult]) -> str | None:
    """The copying measures over the cases that check them (mean and worst), or None."""
    said = []
    for key, name in (("copied", "copied"), ("length_ratio", "length")):
        values = [r.measures[key] for r in results if key in r.measures]
        if values:
            said.append(f"{name} mean {sum(values) / len(values):.2f}, worst {max(values):.2f}")
    measured = sum(bool(r.measures) for r in results)
    return f"copying over {measured} cases: {'; '.join(said)}" if said else None


def format_summary(results: list[CaseResult], elapsed_s: float) -> str:
    failed = sum(not result.passed for result in results)
    passed = len(results) - failed
    return f"{passed} passed, {failed} failed ({len(results)} cases in {elapsed_s:.1f}s)"
