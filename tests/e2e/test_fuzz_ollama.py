"""Ollama's endpoints fuzzed with schemathesis from their own body models, against the real
server of the hostile suite (routes capping max_tokens at 8).

zest's OpenAPI document describes /v1 (OpenAI's shape); Ollama's API has none of its own, so
the document here is built from the pydantic models that validate each body (the validation's
own JSON Schema, as http/_openapi.py builds /v1's). Requests that fit it and requests that
break it, a bounded number per operation, derandomized: each answer must be no 5xx but a
documented 503/504, an error in Ollama's shape, an accepted stream ending with its final line
or an error line, and a request that breaks the schema refused with a 4xx.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from schemathesis import BaseSchema, Case, GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection

from tests.e2e.answers import DOCUMENTED_5XX, INTERNAL
from tests.e2e.conftest import HOSTILE_ADMIN_KEY, Server
from zest.gateway.serving import (
    OllamaChatRequest,
    OllamaEmbeddingsRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
    OllamaModelRequest,
    OllamaPullRequest,
)

AUTH = {"authorization": f"Bearer {HOSTILE_ADMIN_KEY}"}
EXAMPLES = 15
BODIES: dict[tuple[str, str], type[BaseModel]] = {
    ("post", "/chat"): OllamaChatRequest,
    ("post", "/generate"): OllamaGenerateRequest,
    ("post", "/embed"): OllamaEmbedRequest,
    ("post", "/embeddings"): OllamaEmbeddingsRequest,
    ("post", "/show"): OllamaModelRequest,
    ("post", "/pull"): OllamaPullRequest,
}
TASK_OF = {"/chat": "chat", "/generate": "chat", "/embed": "embed", "/embeddings": "embed"}
_REF = "#/components/schemas/{model}"
_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}


def ollama_document() -> dict[str, Any]:
    """An OpenAPI 3.1 document of Ollama's API as zest serves it, from its body models."""
    models = sorted(set(BODIES.values()), key=lambda model: model.__name__)
    _, defs = models_json_schema([(m, "validation") for m in models], ref_template=_REF)
    answers = {
        "200": {
            "description": "the answer, or its NDJSON stream",
            "content": {"application/json": {"schema": {}}, "application/x-ndjson": {}},
        },
        "default": {
            "description": "an error in Ollama's shape",
            "content": {"application/json": {"schema": _ERROR}},
        },
    }
    paths: dict[str, Any] = {}
    for (method, path), model in BODIES.items():
        body = {"$ref": _REF.format(model=model.__name__)}
        paths.setdefault(path, {})[method] = {
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": answers,
        }
    for path in ("/tags", "/ps", "/version"):
        paths[path] = {"get": {"responses": answers}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "zest: Ollama's API", "version": "1"},
        "servers": [{"url": "/api"}],
        "paths": paths,
        "components": {"schemas": defs.get("$defs", {})},
    }


@pytest.fixture(scope="module")
def schema() -> BaseSchema:
    return schemathesis.openapi.from_dict(ollama_document())


def _aimed(drawn: tuple[Case, int]) -> Case:
    """The case, naming a task of the server unless `miss` is 0 (random names get 404s)."""
    case, miss = drawn
    task = TASK_OF.get(case.path)
    if miss and task is not None and isinstance(case.body, dict):
        case.body = {**case.body, "model": task, "options": {"num_predict": 4}}
    return case


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_ollama_operation_answers_generated_requests_cleanly(
    hostile: Server, schema: BaseSchema, mode: GenerationMode
) -> None:
    failures, sent = [], []
    for result in schema.get_all_operations():
        operation = result.ok()
        if mode is GenerationMode.NEGATIVE and operation.method == "get":
            continue  # nothing to break
        strategy = operation.as_strategy(generation_mode=mode)
        if mode is GenerationMode.POSITIVE:
            strategy = st.tuples(strategy, st.integers(0, 3)).map(_aimed)
        try:
            _fuzz(strategy, f"{hostile.base_url}/api", sent)
        except Exception as exc:  # every operation is fuzzed; all failures are reported
            failures.append(f"{operation.label}: {exc}")
    assert failures == [], "\n\n".join(failures)
    assert len(sent) >= (100 if mode is GenerationMode.POSITIVE else 60)


def _fuzz(strategy: Any, base_url: str, sent: list[int]) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Case) -> None:
        response = case.call(base_url=base_url, headers=AUTH, timeout=600)
        sent.append(response.status_code)
        case.validate_response(response, checks=[negative_data_rejection], headers=AUTH)
        status, content = response.status_code, response.content
        kind = response.headers.get("content-type", [""])[0]
        assert status < 500 or status in DOCUMENTED_5XX, content[:600]
        if status >= 400:
            body = json.loads(content)
            assert list(body) == ["error"], body
            assert isinstance(body["error"], str)
            assert not [word for word in INTERNAL if word in body["error"]], body
        elif kind.startswith("application/x-ndjson") and not response.stream_cut_short:
            lines = [json.loads(line) for line in content.splitlines() if line.strip()]
            assert lines[-1].get("done") is True or "error" in lines[-1] or "status" in lines[-1]

    run()
