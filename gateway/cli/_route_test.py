"""`zest route test CASES.jsonl`: replay requests through the routing decision, for CI.

One case per line:

    {"name": "private stays local", "task": "chat",
     "request": {"messages": [{"role": "user", "content": "hi"}],
                 "metadata": {"consent": "denied"}},
     "expect": {"rule": "private-stays-local", "route": "chat-local",
                "outputs": {"reason": "privacy"}}}

`request` is the body a client sends (messages: /v1/chat/completions, prompt: /v1/completions,
input: /v1/responses); `expect.rule` is a rule's id or `default`; `outputs`, if given, must
equal the decision's. `waiting` ({ROUTE: N}, optional) sets how many requests wait for a
route's model, for `queued_over` rules. Each request goes through the server's own decision
code (serving.decide_request): deterministic conditions load no model (a token count reads a
tokenizer), and a model-backed one loads the route it names, in this process, only when a case
reaches it.

A model-backed condition that fails (its model missing or broken, or no answer within the
replay's budget) is an error, not a condition that does not hold: a case that reached it is an
ERROR, and the report names each cause once (its key path and why), with the number of cases
it touched. A case that means to test the failure path says `"expect": {..., "on_error": true}`:
then its conditions run with their own timeout_s, as served, and it passes only if one of them
failed and the decision is the one expected. Otherwise each condition may take up to the
replay's budget (--condition-budget, its model's load included): a replay judges what a
condition decides, not how fast.

Exit status: 0 every case decided as expected, 1 one did not (or errored), 2 the cases file or
the routes file is unusable (said before any case runs).
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from zest.errors import ConfigError, RequestError
from zest.gateway.cli._init import ROUTES_HELP, routes_file
from zest.gateway.cli._settings import settings_from
from zest.gateway.cli._tables import print_table
from zest.gateway.serving import Runtime, decide_request
from zest.router import Decision, LoadedRoutes, RoutesFile, load_routes, walk_conditions

__all__ = ["add_route_command"]

EXIT_FAILED, EXIT_UNUSABLE = 1, 2
# How long a model-backed condition may take in a replay, its model's load included: generous,
# since the machine running CI may be slow and busy (a classify at load once took over 20 s).
CONDITION_BUDGET_S = 300.0
_MODEL_BACKED = ("similar_to", "classify")


class Expect(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rule: str = Field(min_length=1)  # a rule's id, or "default"
    route: str = Field(min_length=1)
    outputs: dict[str, Any] | None = None
    # The decision takes a model-backed condition's on_error path (it failed, as served).
    on_error: bool = False


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    task: str = Field(min_length=1)
    request: dict[str, Any]
    expect: Expect
    waiting: dict[str, int] = Field(default_factory=dict)


@dataclass
class Outcome:
    case: Case
    decision: Decision | None = None
    error: str | None = None
    # The model-backed conditions that failed on the way: (key path, why), in trace order.
    failures: list[tuple[str, str]] = field(default_factory=list)

    @property
    def result(self) -> str:
        if self.error is not None or (self.failures and not self.case.expect.on_error):
            return "ERROR"
        return "FAIL" if self.mismatches() else "pass"

    @property
    def passed(self) -> bool:
        return self.result == "pass"

    def mismatches(self) -> list[str]:
        if self.decision is None:
            return []
        expect, got = self.case.expect, self.decision
        wrong = []
        if got.rule_label != expect.rule:
            wrong.append("rule")
        if got.route_to != expect.route:
            wrong.append("route")
        if expect.outputs is not None and dict(got.outputs) != expect.outputs:
            wrong.append("outputs")
        if expect.on_error and not self.failures:
            wrong.append("on_error (no condition failed)")
        return wrong


def add_route_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    route = commands.add_parser("route", help="test the routes file's routing rules")
    actions = route.add_subparsers(required=True, metavar="ACTION")
    test = actions.add_parser(
        "test",
        help="replay a JSONL file of requests through the routing decision; exit 1 on a mismatch",
    )
    test.add_argument("cases", type=Path, help="JSONL file: {name, task, request, expect} a line")
    test.add_argument("--routes", type=Path, help=ROUTES_HELP)
    test.add_argument("--trace", action="store_true", help="print every case's trace")
    test.add_argument(
        "--condition-budget",
        type=_seconds,
        default=CONDITION_BUDGET_S,
        metavar="SECONDS",
        help="how long each model-backed condition may take, its model's load included "
        f"(default {CONDITION_BUDGET_S:g}; a case expecting on_error uses the condition's own "
        "timeout_s)",
    )
    test.set_defaults(func=_route_test)


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds above 0")
    return seconds


def _route_test(args: argparse.Namespace) -> int:
    settings = settings_from(routes=args.routes)
    try:
        routes = load_routes(routes_file(settings.routes))
        cases = read_cases(args.cases, routes.config)
    except ConfigError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return EXIT_UNUSABLE
    from zest.engines import detect_inventory

    runtime = _ReplayRuntime(
        routes,
        detect_inventory(settings.emulate_devices),
        strict_privacy=settings.privacy == "strict",
    )
    runtime.oracle.replaying = True
    outcomes = asyncio.run(_replay(runtime, cases, args.condition_budget))
    _report(outcomes, args.trace, args.condition_budget)
    return 0 if all(outcome.passed for outcome in outcomes) else EXIT_FAILED


@dataclass
class _ReplayRuntime(Runtime):
    """The server's runtime, never started (nothing loads until a condition asks), whose
    queues hold what the case says."""

    waiting: dict[str, int] = field(default_factory=dict)

    def waiting_for(self, routes: LoadedRoutes, task: str) -> int:
        return self.waiting.get(task, 0)


async def _replay(runtime: _ReplayRuntime, cases: list[Case], budget_s: float) -> list[Outcome]:
    """Each case decided by the server's code, in order; a model loads when a case first
    reaches a condition that needs it (a case decided before one loads nothing)."""
    outcomes = []
    where = _model_backed_paths(runtime.routes.config)
    try:
        for case in cases:
            runtime.waiting = dict(case.waiting)
            # A case testing the failure path runs its conditions as served.
            runtime.oracle.min_timeout_s = 0.0 if case.expect.on_error else budget_s
            try:
                _, routed = await decide_request(runtime, case.task, case.request)
            except RequestError as exc:
                outcomes.append(Outcome(case, error=exc.message))
                continue
            decision = routed.decision
            failures = [
                (where.get((case.task, entry.condition), entry.kind), entry.error)
                for entry in (decision.trace if decision else ())
                if entry.error is not None
            ]
            outcomes.append(Outcome(case, decision, failures=failures))
    finally:
        await runtime.close()
    return outcomes


def _model_backed_paths(config: RoutesFile) -> dict[tuple[str, str], str]:
    """(task, a model-backed condition's trace text): its key path, for a report."""
    paths = {}
    for task, route in config.routes.items():
        for number, rule in enumerate(route.rules):
            at = f"routes.{task}.rules.{number}.when"
            for condition, path in walk_conditions(rule.when, at):
                for kind, value, text in condition.parts():
                    if kind in _MODEL_BACKED:
                        paths[(task, text)] = f"{path}.{kind} (via {value.via})"
    return paths


def read_cases(path: Path, config: RoutesFile) -> list[Case]:
    """The file's cases; ConfigError naming each bad line (file:line: problem)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"zest route test: cannot read {path}: {exc}"]) from None
    cases, problems = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            case = Case.model_validate(json.loads(line))
        except json.JSONDecodeError as exc:
            problems.append(f"{path}:{number}: not JSON: {exc.msg}")
            continue
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "the line"
            problems.append(f"{path}:{number}: {where}: {error['msg']}")
            continue
        problems += [f"{path}:{number}: {p}" for p in _case_problems(case, config)]
        cases.append(case)
    if not cases and not problems:
        problems.append(f"{path}: no cases: write one JSON object a line")
    if problems:
        raise ConfigError(problems)
    return cases


def _case_problems(case: Case, config: RoutesFile) -> list[str]:
    """Names the routes file does not know: a typo would otherwise read as a mismatch."""
    problems = []
    for where, name in (("task", case.task), ("expect.route", case.expect.route)):
        if name not in config.routes:
            problems.append(f"{where}: no route {name!r}{_close(name, list(config.routes))}")
    for name in case.waiting:
        if name not in config.routes:
            problems.append(f"waiting: no route {name!r}{_close(name, list(config.routes))}")
    route = config.routes.get(case.task)
    rules = ["default", *(rule.id for rule in route.rules)] if route else []
    if route and case.expect.rule not in rules:
        problems.append(
            f"expect.rule: route {case.task!r} has no rule {case.expect.rule!r}"
            f"{_close(case.expect.rule, rules)}"
        )
    return problems


def _close(name: str, known: list[str]) -> str:
    found = difflib.get_close_matches(name, known, n=1)
    return f": did you mean {found[0]!r}?" if found else f" (known: {', '.join(known)})"


def _report(outcomes: list[Outcome], trace: bool, budget_s: float) -> None:
    rows = [(o.case.name, o.case.task, o.result, _expected(o.case), _got(o)) for o in outcomes]
    print_table(("CASE", "TASK", "RESULT", "EXPECTED", "GOT"), rows)
    for outcome in outcomes:
        # An errored case's cause is told once below, not with each case that met it.
        if trace or outcome.result == "FAIL" or outcome.error is not None:
            print(f"\n{outcome.case.name}: {_why(outcome)}")
            for entry in outcome.decision.trace if outcome.decision else ():
                print(f"  {json.dumps(entry.as_dict(), ensure_ascii=False)}")
    _report_failures(outcomes)
    if any(o.failures or _reached_model(o) for o in outcomes):
        print(
            f"\nmodel-backed conditions: up to {budget_s:g} s each, their model's load "
            "included (--condition-budget); a case expecting on_error: their own timeout_s"
        )
    counts = {result: sum(o.result == result for o in outcomes) for result in ("FAIL", "ERROR")}
    errors = f", {counts['ERROR']} errors" if counts["ERROR"] else ""
    print(f"\n{len(outcomes) - sum(counts.values())} passed, {counts['FAIL']} failed{errors}")


def _report_failures(outcomes: list[Outcome]) -> None:
    """Each model-backed condition that failed, once per cause, with the cases it touched."""
    causes: dict[tuple[str, str], int] = {}
    for outcome in outcomes:
        if outcome.case.expect.on_error:
            continue  # expected: not a problem of the setup
        for cause in dict.fromkeys(outcome.failures):
            causes[cause] = causes.get(cause, 0) + 1
    if not causes:
        return
    print(
        "\nmodel-backed conditions that failed (an error, not a condition that does not "
        'hold: fix the cause, or mark a case "on_error": true to expect it):'
    )
    for (where, why), count in causes.items():
        print(f"  {where}, {count} case{'' if count == 1 else 's'}: {why}")


def _reached_model(outcome: Outcome) -> bool:
    trace = outcome.decision.trace if outcome.decision else ()
    return any(entry.kind in _MODEL_BACKED for entry in trace)


def _expected(case: Case) -> str:
    expect = case.expect
    outputs = "" if expect.outputs is None else f" {json.dumps(expect.outputs)}"
    on_error = " (on_error)" if expect.on_error else ""
    return f"{expect.rule} -> {expect.route}{outputs}{on_error}"


def _got(outcome: Outcome) -> str:
    got = outcome.decision
    if got is None:
        return f"error: {outcome.error}"
    outputs = f" {json.dumps(dict(got.outputs))}" if outcome.case.expect.outputs is not None else ""
    failed = " (a condition failed)" if outcome.failures else ""
    return f"{got.rule_label} -> {got.route_to}{outputs}{failed}"


def _why(outcome: Outcome) -> str:
    if outcome.error is not None:
        return f"failed: {outcome.error}"
    wrong = outcome.mismatches()
    return f"{', '.join(wrong)} differ; trace:" if wrong else "trace:"
