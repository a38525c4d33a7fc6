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
tokenizer), a model-backed one loads the route it names, in this process.

Exit status: 0 every case decided as expected, 1 one did not (or failed), 2 the cases file or
the routes file is unusable (said before any case runs).
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
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


class Expect(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rule: str = Field(min_length=1)  # a rule's id, or "default"
    route: str = Field(min_length=1)
    outputs: dict[str, Any] | None = None


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

    @property
    def passed(self) -> bool:
        return self.error is None and not self.mismatches()

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
    test.set_defaults(func=_route_test)


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
    outcomes = asyncio.run(_replay(runtime, cases))
    _report(outcomes, args.trace)
    return 0 if all(outcome.passed for outcome in outcomes) else EXIT_FAILED


@dataclass
class _ReplayRuntime(Runtime):
    """The server's runtime, never started (nothing loads until a condition asks), whose
    queues hold what the case says."""

    waiting: dict[str, int] = field(default_factory=dict)

    def waiting_for(self, routes: LoadedRoutes, task: str) -> int:
        return self.waiting.get(task, 0)


async def _replay(runtime: _ReplayRuntime, cases: list[Case]) -> list[Outcome]:
    outcomes = []
    try:
        await _warm(runtime, {case.task for case in cases})
        for case in cases:
            runtime.waiting = dict(case.waiting)
            try:
                _, routed = await decide_request(runtime, case.task, case.request)
            except RequestError as exc:
                outcomes.append(Outcome(case, error=exc.message))
                continue
            outcomes.append(Outcome(case, routed.decision))
    finally:
        await runtime.close()
    return outcomes


async def _warm(runtime: _ReplayRuntime, tasks: set[str]) -> None:
    """Load the routes the cases' model-backed conditions name, as a server's warm start
    does, so that a condition's timeout counts its answer, not its model's load."""
    routes = runtime.routes
    config = routes.config
    vias = {
        condition.via
        for task in sorted(tasks)
        for rule in config.routes[task].rules
        for found, _ in walk_conditions(rule.when, "")
        for condition in (found.similar_to, found.classify)
        if condition is not None
    }
    for via in sorted(vias):
        try:
            first = runtime.plan(routes, via, config.routes[via], prompt_tokens=0).first
            if not first.remote:
                (await runtime.acquire(routes, first.model, first.placement)).release()
        except RequestError:
            continue  # the condition will fail as it would when served, and its trace says why


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


def _report(outcomes: list[Outcome], trace: bool) -> None:
    rows = [
        (o.case.name, o.case.task, "pass" if o.passed else "FAIL", _expected(o.case), _got(o))
        for o in outcomes
    ]
    print_table(("CASE", "TASK", "RESULT", "EXPECTED", "GOT"), rows)
    for outcome in outcomes:
        if trace or not outcome.passed:
            print(f"\n{outcome.case.name}: {_why(outcome)}")
            for entry in outcome.decision.trace if outcome.decision else ():
                print(f"  {json.dumps(entry.as_dict(), ensure_ascii=False)}")
    failed = sum(not outcome.passed for outcome in outcomes)
    print(f"\n{len(outcomes) - failed} passed, {failed} failed")


def _expected(case: Case) -> str:
    expect = case.expect
    outputs = "" if expect.outputs is None else f" {json.dumps(expect.outputs)}"
    return f"{expect.rule} -> {expect.route}{outputs}"


def _got(outcome: Outcome) -> str:
    got = outcome.decision
    if got is None:
        return f"error: {outcome.error}"
    outputs = f" {json.dumps(dict(got.outputs))}" if outcome.case.expect.outputs is not None else ""
    return f"{got.rule_label} -> {got.route_to}{outputs}"


def _why(outcome: Outcome) -> str:
    if outcome.error is not None:
        return f"failed: {outcome.error}"
    wrong = outcome.mismatches()
    return f"{', '.join(wrong)} differ; trace:" if wrong else "trace:"
