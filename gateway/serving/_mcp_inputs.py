"""What an MCP tool call of a task sends (gateway/http/_mcp.py serves the tools): its
arguments by the task's kind, read into the request every endpoint builds. A chat task takes
messages, a completion task a prompt, an embedding task an input text; max_tokens and
temperature as on /v1/chat/completions."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from zest.gateway.serving._requests import INT64, ChatMessage, Number, SamplingFields
from zest.router import RouteConfig

__all__ = [
    "ChatToolInput",
    "EmbeddingToolInput",
    "PromptToolInput",
    "ToolInput",
    "input_schema",
    "tool_input_of",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")
    DOCS: ClassVar[str] = "docs/mcp.md"  # what a validation error points at


class ToolMessage(_Body):
    role: Literal["system", "user", "assistant"]
    content: str


class _Sampled(_Body):
    max_tokens: StrictInt | None = Field(
        default=None, ge=1, le=INT64, description="The most tokens to generate (the route caps it)."
    )
    temperature: Number | None = Field(
        default=None, ge=0.0, le=2.0, description="Sampling temperature (the route's by default)."
    )

    def sampling(self) -> SamplingFields:
        return SamplingFields(max_tokens=self.max_tokens, temperature=self.temperature)


class ChatToolInput(_Sampled):
    """A chat task's call: the conversation, the last message the user's."""

    messages: list[ToolMessage] = Field(
        min_length=1,
        description="The conversation, oldest first (the task's system prompt comes first).",
    )

    def chat(self) -> list[ChatMessage]:
        return [ChatMessage(role=m.role, content=m.content) for m in self.messages]


class PromptToolInput(_Sampled):
    """A completion task's call: the text to continue."""

    prompt: str = Field(min_length=1, description="The text the task continues.")


class EmbeddingToolInput(_Body):
    """An embedding task's call: the text to embed."""

    input: str = Field(min_length=1, description="The text to embed.")


ToolInput = ChatToolInput | PromptToolInput | EmbeddingToolInput
_BY_KIND: dict[str, type[ToolInput]] = {
    "chat": ChatToolInput,
    "completion": PromptToolInput,
    "embedding": EmbeddingToolInput,
}


def tool_input_of(route: RouteConfig) -> type[ToolInput]:
    """The arguments a task's tool takes, by its route's kind."""
    return _BY_KIND[route.kind]


def input_schema(route: RouteConfig) -> dict[str, Any]:
    """The JSON Schema of a task's tool arguments (pydantic's own, the validation's)."""
    schema = tool_input_of(route).model_json_schema()
    if "max_tokens" in schema["properties"]:
        schema["properties"]["max_tokens"]["maximum"] = route.max_tokens
    return schema
