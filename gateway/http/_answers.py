"""What the endpoints answer, as models for the OpenAPI document (Litestar turns each into the
schema of its 200): the fields every answer carries. Answers may carry more (zest's own
extensions: `zest`, usage's `pipeline`), so no model forbids other fields; GET /v1/openapi.json
fuzzing (tests/e2e/test_fuzz.py) checks that every answer fits its model.
"""

from __future__ import annotations

from typing import Any, Literal

from litestar.openapi import ResponseSpec
from pydantic import BaseModel

__all__ = [
    "ChatCompletion",
    "Completion",
    "EmbeddingList",
    "Health",
    "ModelEntry",
    "ModelList",
    "Readiness",
    "ResponseObject",
    "answers",
]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: str | None
    logprobs: dict[str, Any] | None


class ChatCompletion(BaseModel):
    """OpenAI's chat completion (with "stream": true, server-sent chunks instead)."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: str | None
    logprobs: dict[str, Any] | None


class Completion(BaseModel):
    """OpenAI's (legacy) text completion."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class Embedding(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str  # str: base64 of little-endian float32 (encoding_format)


class EmbeddingList(BaseModel):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class ResponsesUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    total_tokens: int


class ResponseObject(BaseModel):
    """OpenAI's Responses API response (with "stream": true, its events instead)."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "incomplete", "in_progress"]
    model: str
    output: list[dict[str, Any]]
    usage: ResponsesUsage


class ModelEntry(BaseModel):
    """A task (or a model exposed by id), as OpenAI lists models."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelEntry]


class Health(BaseModel):
    status: Literal["ok"]
    state: str
    models_loaded: list[str]


class Readiness(BaseModel):
    status: str
    ready: bool
    unservable_routes: dict[str, str]  # task: why nothing can serve it now
    unservable_by_privacy: dict[str, str]
    # A route only routing rules run, that nothing can serve now: why, its models, its rules.
    degraded_rules: dict[str, dict[str, Any]]
    # Why the store of the clients' limits cannot be reached (null: it answers).
    limits_store: str | None = None
    models: list[dict[str, Any]]


def answers(model: Any, description: str = "the answer") -> dict[int, ResponseSpec]:
    """A handler's `responses`: its 200 is `model`, a model or a union of models (the errors
    are added to every handler's by zest.gateway.http._openapi)."""
    return {200: ResponseSpec(model, generate_examples=False, description=description)}
