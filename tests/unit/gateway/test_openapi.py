"""GET /v1/openapi.json: the document Litestar generates from create_app's routes, with the
pydantic models that read each body and the models of the answers; and HEAD on the probes.
The app is not started (no model loads): the runtime stays in its `starting` state."""

from __future__ import annotations

from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from tests.unit.gateway.generations import CPU
from tests.unit.gateway.test_metrics import ROUTES
from zest.engines import Inventory
from zest.gateway.http import create_app
from zest.gateway.serving import Runtime, Settings
from zest.router import load_routes

# Litestar 2.25 warns, building create_app's routes, of what Litestar 3 will need (dependencies
# and path parameters marked explicitly): not this test's subject.
pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)

BODIES = {
    ("/chat/completions", "post"): "ChatRequest",
    ("/completions", "post"): "CompletionRequest",
    ("/tasks/{task}", "post"): "TaskRequest",
    ("/responses", "post"): "ResponsesRequest",
    ("/embeddings", "post"): "EmbeddingRequest",
    ("/routes/{task}/explain", "post"): "TaskRequest",
    ("/load", "post"): "ModelRequest",
    ("/unload", "post"): "ModelRequest",
}


def app_with(**settings: Any) -> Litestar:
    runtime = Runtime(load_routes(ROUTES), Inventory({"cpu": CPU}, ()))
    # TestClient's Host is testserver.local: not a loopback name, so it is allowed here.
    return create_app(runtime, Settings(**{"allowed_hosts": "testserver.local", **settings}))


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    # Not entered: the lifespan (the warm start) never runs.
    client = TestClient(app_with())
    reply = client.get("/v1/openapi.json")
    assert reply.status_code == 200
    assert client.get("/api/v1/openapi.json").json() == reply.json()
    return dict(reply.json())


def test_every_endpoint_is_described_once_for_both_prefixes(document: dict[str, Any]) -> None:
    assert document["openapi"] == "3.1.0"
    assert document["servers"] == [{"url": "/v1"}, {"url": "/api/v1"}]
    operations = {(path, method) for path, item in document["paths"].items() for method in item}
    assert operations >= set(BODIES) | {
        ("/models", "get"),
        ("/models/{model_id}", "get"),
        ("/routes/{task}/explain", "get"),
        ("/health", "get"),
        ("/health", "head"),
        ("/ready", "get"),
        ("/ready", "head"),
        ("/openapi.json", "get"),
        ("/metrics", "get"),
        ("/admin/reload", "post"),
    }
    ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def test_each_body_is_the_schema_of_the_model_that_reads_it(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    for (path, method), model in BODIES.items():
        body = document["paths"][path][method]["requestBody"]
        assert body["content"]["application/json"]["schema"] == {
            "$ref": f"#/components/schemas/{model}"
        }
        assert schemas[model]["additionalProperties"] is False  # unknown fields are 400s
    chat = schemas["ChatRequest"]
    assert chat["required"] == ["model", "messages"]
    assert chat["properties"]["stream"] == {"default": False, "title": "Stream", "type": "boolean"}
    assert "store" in chat["properties"]  # accepted and ignored, so documented
    assert "'ge'" not in str(schemas)  # constraints in JSON Schema's words (minimum, maximum)


def test_errors_are_described_in_openai_shape(document: dict[str, Any]) -> None:
    chat = document["paths"]["/chat/completions"]["post"]
    error = {"$ref": "#/components/schemas/Error"}
    for status in ("400", "401", "413", "415", "429", "503", "504", "default"):
        assert chat["responses"][status]["content"]["application/json"]["schema"] == error
    assert set(chat["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    explain = document["paths"]["/routes/{task}/explain"]["get"]["parameters"]
    assert (
        explain[1].items()
        >= {
            "name": "prompt_tokens",
            "in": "query",
            "required": False,
            "schema": {"type": "integer", "default": 0},
        }.items()
    )
    assert "status_code" not in str(document["paths"])  # no Litestar-shaped error left


ANSWERS = {
    ("/chat/completions", "post"): "ChatCompletion",
    ("/completions", "post"): "Completion",
    ("/responses", "post"): "ResponseObject",
    ("/embeddings", "post"): "EmbeddingList",
    ("/models", "get"): "ModelList",
    ("/models/{model_id}", "get"): "ModelEntry",
    ("/health", "get"): "Health",
    ("/ready", "get"): "Readiness",
}


def test_the_main_answers_are_typed(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    for (path, method), model in ANSWERS.items():
        ok = document["paths"][path][method]["responses"]["200"]["content"]["application/json"]
        assert ok["schema"] == {"$ref": f"#/components/schemas/{model}"}
        assert schemas[model]["type"] == "object"
    chat = schemas["ChatCompletion"]
    assert chat["properties"]["object"]["const"] == "chat.completion"
    assert set(chat["required"]) >= {"id", "choices", "usage"}
    task = document["paths"]["/tasks/{task}"]["post"]["responses"]["200"]["content"]
    assert len(task["application/json"]["schema"]["oneOf"]) == 3  # chat, completion, embedding


def test_the_probes_need_no_key_and_the_document_does(document: dict[str, Any]) -> None:
    assert document["paths"]["/health"]["get"]["security"] == []
    assert "security" not in document["paths"]["/openapi.json"]["get"]  # the document's own
    client = TestClient(app_with(api_keys="sk-a"))
    assert client.get("/v1/openapi.json").status_code == 401
    assert client.get("/v1/openapi.json", headers={"authorization": "Bearer sk-a"}).is_success


@pytest.fixture
def probes() -> TestClient[Litestar]:
    return TestClient(app_with(api_keys="sk-a"))


@pytest.mark.parametrize("prefix", ["/v1", "/api/v1"])
def test_head_on_the_probes_answers_like_get_without_a_body(
    probes: TestClient[Litestar], prefix: str
) -> None:
    health = probes.head(f"{prefix}/health")
    assert (health.status_code, health.content) == (200, b"")
    ready = probes.head(f"{prefix}/ready")  # the warm start has not run: not ready
    assert (ready.status_code, ready.content) == (probes.get(f"{prefix}/ready").status_code, b"")
    assert ready.status_code == 503
