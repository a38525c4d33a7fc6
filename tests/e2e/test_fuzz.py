"""Every endpoint fuzzed from its own OpenAPI document (GET /v1/openapi.json) with schemathesis,
against the real server of the hostile suite (routes capping max_tokens at 8).

Requests that fit the schema (positive) and requests that break it (negative), a bounded
number of each per operation, derandomized so a run repeats. Each answer must be: no 5xx but
a documented 503/504; an error in OpenAI's shape; an accepted stream closed by [DONE] (or an
error event); the content type and, for errors, the body the document declares; and a request
that breaks the schema refused with a 4xx.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import BaseSchema, Case, GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.e2e.answers import check_error, check_stream
from tests.e2e.conftest import HOSTILE_ADMIN_KEY, Server

AUTH = {"authorization": f"Bearer {HOSTILE_ADMIN_KEY}"}
# Examples per operation and mode (21 operations, 9 of them with something to break):
# about 750 requests in all, most refused in milliseconds, the rest 8 tokens at most.
EXAMPLES = 25
# The task each endpoint's requests name when aimed (tests/e2e/routes/hostile.yaml).
TASK_OF = {
    "/chat/completions": "chat",
    "/responses": "chat",
    "/completions": "autocomplete",
    "/embeddings": "embed",
    "/tasks": "chat",
    "/messages": "chat",
    "/messages/count_tokens": "chat",
}
CHECKS = [
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture(scope="module")
def schema(hostile: Server) -> BaseSchema:
    return schemathesis.openapi.from_url(f"{hostile.v1}/openapi.json", headers=AUTH)


def test_the_document_covers_every_operation(schema: BaseSchema) -> None:
    labels = {result.ok().label for result in schema.get_all_operations()}
    assert len(labels) >= 20
    assert "POST /chat/completions" in labels


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_operation_answers_generated_requests_cleanly(
    hostile: Server, schema: BaseSchema, mode: GenerationMode
) -> None:
    failures, sent = [], []
    for result in schema.get_all_operations():
        operation = result.ok()
        if mode is GenerationMode.NEGATIVE and not _has_inputs(operation.label, schema):
            continue  # nothing to break: no body, no query (any path segment is a string)
        strategy = operation.as_strategy(generation_mode=mode)
        if mode is GenerationMode.POSITIVE:  # most valid requests name a real task
            strategy = st.tuples(strategy, st.integers(0, 3)).map(_aimed)
        try:
            _fuzz(strategy, hostile.v1, sent)
        except Exception as exc:  # every operation is fuzzed; all failures are reported
            failures.append(f"{operation.label}: {exc}")
    assert failures == [], "\n\n".join(failures)
    print(f"{mode}: {len(sent)} requests")  # shown with -s
    assert len(sent) >= (250 if mode is GenerationMode.POSITIVE else 150)


def _aimed(drawn: tuple[Case, int]) -> Case:
    """The case, naming a task of the server unless `miss` is 0 (random names get 404s)."""
    case, miss = drawn
    if miss:
        if "task" in (case.path_parameters or {}):
            case.path_parameters = {**(case.path_parameters or {}), "task": TASK_OF["/tasks"]}
        if "model_id" in (case.path_parameters or {}):
            case.path_parameters = {**(case.path_parameters or {}), "model_id": "chat"}
        task = TASK_OF.get(case.path)
        if task is not None and isinstance(case.body, dict):
            case.body = {**case.body, "model": task}
    return case


def _has_inputs(label: str, schema: BaseSchema) -> bool:
    method, path = label.split(" ", 1)
    operation = schema.raw_schema["paths"][path][method.lower()]
    query = [p for p in operation.get("parameters", []) if p["in"] != "path"]
    return "requestBody" in operation or bool(query)


def _fuzz(strategy: Any, base_url: str, sent: list[int]) -> None:
    """Up to EXAMPLES requests from `strategy`, each answer checked; `sent` gets each status."""

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as found
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Case) -> None:
        response = case.call(base_url=base_url, headers=AUTH, timeout=600)
        sent.append(response.status_code)
        case.validate_response(response, checks=CHECKS, headers=AUTH)
        headers = {name.lower(): values[0] for name, values in response.headers.items()}
        content_type = headers.get("content-type", "")
        if case.method == "HEAD":
            assert response.content == b""
        elif response.status_code >= 400 and not case.path.endswith("/ready"):
            check_error(response.status_code, headers, response.content)
        elif content_type.startswith("text/event-stream") and not response.stream_cut_short:
            check_stream(response.content)

    run()
