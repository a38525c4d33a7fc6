"""`zest eval FILE.jsonl`: run a quality set against a running gateway.

Exit status: 0 every case passed, 1 a case failed, 2 the file or the gateway is unusable (said
before any case runs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from zest.errors import EvalFileError
from zest.gateway.cli._client import add_gateway_options, gateway_of
from zest.gateway.cli._eval_cases import (
    Case,
    CaseResult,
    answer_text,
    format_measures,
    format_result,
    format_summary,
    gateway_problems,
    read_cases,
    request_for,
)

__all__ = ["add_eval_command"]

EXIT_FAILED, EXIT_UNUSABLE = 1, 2


def add_eval_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    command = commands.add_parser(
        "eval", help="run a JSONL quality set against a running gateway (exit 1 on a failure)"
    )
    command.add_argument("file", type=Path, help="JSONL file, one case per line")
    add_gateway_options(command)
    command.add_argument("--concurrency", type=int, default=1, metavar="N", help="cases at once")
    command.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    command.add_argument("--json", type=Path, metavar="REPORT", help="also write a JSON report")
    command.set_defaults(func=_eval)


def _eval(args: argparse.Namespace) -> int:
    try:
        cases = read_cases(args.file)
    except EvalFileError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return EXIT_UNUSABLE
    gateway = gateway_of(args)
    url = gateway.url
    with gateway.client(timeout=args.timeout) as client:
        problem = _unusable_gateway(client, url, cases, str(args.file))
        if problem:
            print(problem, file=sys.stderr)
            return EXIT_UNUSABLE
        started = time.monotonic()
        results = []
        with ThreadPoolExecutor(max(args.concurrency, 1)) as pool:
            for result in pool.map(lambda case: _run_case(client, case), cases):
                print(format_result(result), flush=True)
                results.append(result)
    elapsed = time.monotonic() - started
    measures = format_measures(results)
    print(f"\n{measures}" if measures else "")
    print(f"{format_summary(results, elapsed)} against {url}")
    if args.json:
        report = {"file": str(args.file), "url": url, "elapsed_s": round(elapsed, 3)}
        cases_json = [result.as_json() for result in results]
        args.json.write_text(json.dumps({**report, "cases": cases_json}, indent=2) + "\n")
    return 0 if all(result.passed for result in results) else EXIT_FAILED


def _unusable_gateway(client: httpx.Client, url: str, cases: list[Case], origin: str) -> str | None:
    """Why the gateway cannot run these cases (unreachable, key refused, unknown task), or None."""
    try:
        response = client.get("/v1/models")
    except httpx.TransportError as exc:
        return (
            f"zest eval: cannot reach the gateway at {url} ({exc}): start it with `zest serve`, "
            "or pass --url (or set ZEST_URL)"
        )
    if response.status_code in (401, 403):
        return (
            f"zest eval: the gateway at {url} refused the request ({response.status_code}): "
            "pass its API key with --api-key or ZEST_API_KEY"
        )
    not_zest = (
        f"zest eval: {url}/v1/models answered {response.status_code}: is --url a zest gateway?"
    )
    if response.status_code != 200:
        return not_zest
    try:
        kinds = {
            model["id"]: (model.get("zest") or {}).get("kind")
            for model in response.json().get("data", [])
        }
    except (ValueError, LookupError, TypeError, AttributeError):
        return not_zest
    return "\n".join(gateway_problems(cases, kinds, origin)) or None


def _run_case(client: httpx.Client, case: Case) -> CaseResult:
    path, body = request_for(case)
    started = time.monotonic()
    try:
        response = client.post(path, json=body)
    except httpx.TransportError as exc:
        return CaseResult(
            case, time.monotonic() - started, None, [f"request failed: {type(exc).__name__}: {exc}"]
        )
    latency = time.monotonic() - started
    route = response.headers.get("x-zest-route")
    if response.status_code != 200:
        return CaseResult(case, latency, None, [_http_failure(response)], route)
    try:
        answer = answer_text(response.json())
    except (ValueError, LookupError, TypeError, AttributeError):
        failure = f"the answer is not a completion: {response.text[:200]!r}"
        return CaseResult(case, latency, None, [failure], route)
    return CaseResult(case, latency, answer, case.checks(answer), route)


def _http_failure(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        detail = f"{error.get('code') or error.get('type')}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        detail = response.text[:200]
    return f"request failed: HTTP {response.status_code}: {detail}"
