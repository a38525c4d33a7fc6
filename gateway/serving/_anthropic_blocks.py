"""Anthropic's content blocks (text, image, tool_use, tool_result) and messages, read into the
chat turns every endpoint builds: a tool_use is an assistant turn's tool call, a tool_result a
tool turn answering it, an image an image_url part (routed by has_images, as on
/v1/chat/completions). A block of any other type is refused, naming it."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, Tag, model_validator
from pydantic.json_schema import SkipJsonSchema

from zest.errors import shown
from zest.gateway.serving._requests import (
    TEXT_OR_PARTS,
    ChatMessage,
    ImagePart,
    Refused,
    TextPart,
    parts_of,
)
from zest.gateway.serving._tools import ToolCall

__all__ = [
    "BLOCKS_TAKEN",
    "AnthropicMessage",
    "Block",
    "CacheControl",
    "ImageBlock",
    "TextBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "chat_turns",
]

BLOCKS_TAKEN = "send text, image, tool_use and tool_result blocks"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CacheControl(_Body):
    """Anthropic's prompt-caching mark: zest's prefix cache needs none (x-zest-ignored)."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class TextBlock(_Body):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None
    # Citations of an earlier answer's text, sent back: they change nothing of the prompt.
    citations: list[Any] | None = None


class Base64Source(_Body):
    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str = Field(min_length=1)  # forwarded as sent: never decoded here


class UrlSource(_Body):
    type: Literal["url"]
    url: str = Field(min_length=1)


class UnknownSource(Refused):
    says = (
        "an image source of type %s is not one zest takes (it keeps no files): send "
        '{"type": "base64", "media_type": ..., "data": ...} or {"type": "url", "url": ...}'
    )


ImageSource = Annotated[
    Annotated[Base64Source, Tag("Base64")]
    | Annotated[UrlSource, Tag("Url")]
    | Annotated[UnknownSource, Tag("Unknown"), SkipJsonSchema()],
    parts_of(
        {"base64": "Base64", "url": "Url"}, '{"type": "base64", "media_type": ..., "data": ...}'
    ),
]


class ImageBlock(_Body):
    """An image: zest's own engines read text only, so a task's rules route it to a route
    whose (remote) model takes images, where it is forwarded as an image_url part."""

    type: Literal["image"]
    source: ImageSource
    cache_control: CacheControl | None = None

    def as_part(self) -> ImagePart:
        source = self.source
        if isinstance(source, Base64Source):
            url = f"data:{source.media_type};base64,{source.data}"
        else:
            url = source.url  # type: ignore[union-attr]  # UnknownSource refuses
        return ImagePart.model_validate({"type": "image_url", "image_url": {"url": url}})


class ToolUseBlock(_Body):
    """A call an earlier answer made (an assistant turn's), sent back with the history."""

    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]
    cache_control: CacheControl | None = None

    def as_call(self) -> ToolCall:
        arguments = json.dumps(self.input, ensure_ascii=False)
        return ToolCall.model_validate(
            {"id": self.id, "function": {"name": self.name, "arguments": arguments}}
        )


class ResultText(_Body):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None
    citations: list[Any] | None = None


class UnknownResultPart(Refused):
    says = (
        "a tool_result's content part of type %s is not one zest takes: send the tool's "
        "result as a string or as text blocks"
    )


ResultPart = Annotated[
    Annotated[ResultText, Tag("Text")]
    | Annotated[UnknownResultPart, Tag("Unknown"), SkipJsonSchema()],
    parts_of({"text": "Text"}, '{"type": "text", "text": "..."}'),
]


class ToolResultBlock(_Body):
    """A tool's result (in a user turn), answering the tool_use of the same id."""

    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[ResultPart] | None = None
    is_error: StrictBool | None = None
    cache_control: CacheControl | None = None

    def text(self) -> str:
        content = self.content
        said = (
            content
            if isinstance(content, str)
            else "".join(p.text for p in content or () if isinstance(p, ResultText))
        )
        # The model reads that the call failed as the client said, never as a plain result.
        return f"Error: {said}" if self.is_error else said


class UnknownBlock(Refused):
    says = f"a content block of type %s is not one zest takes: {BLOCKS_TAKEN}"


_BLOCK_TAGS = {"text": "Text", "image": "Image", "tool_use": "ToolUse", "tool_result": "ToolResult"}
Block = Annotated[
    Annotated[TextBlock, Tag("Text")]
    | Annotated[ImageBlock, Tag("Image")]
    | Annotated[ToolUseBlock, Tag("ToolUse")]
    | Annotated[ToolResultBlock, Tag("ToolResult")]
    | Annotated[UnknownBlock, Tag("Unknown"), SkipJsonSchema()],
    parts_of(_BLOCK_TAGS, '{"type": "text", "text": "..."}'),
]
Content = Annotated[Annotated[str, Tag("str")] | Annotated[list[Block], Tag("list")], TEXT_OR_PARTS]
# Which role may send which block (Anthropic's own rules).
_ALLOWED = {
    "user": (TextBlock, ImageBlock, ToolResultBlock),
    "assistant": (TextBlock, ToolUseBlock),
    "system": (TextBlock,),
}


class AnthropicMessage(_Body):
    role: Literal["user", "assistant", "system"]
    content: Content

    @model_validator(mode="after")
    def _blocks_of_the_role(self) -> AnthropicMessage:
        if isinstance(self.content, str):
            return self
        if not self.content:
            raise ValueError("content holds no block: send a string or at least one block")
        for index, block in enumerate(self.content):
            if not isinstance(block, _ALLOWED[self.role]):
                raise ValueError(
                    f"content.{index}: {block.type} blocks are not sent in {self.role} "
                    f"messages: {_where(block.type)}"
                )
        results = [isinstance(block, ToolResultBlock) for block in self.content]
        if any(results) and results != sorted(results, reverse=True):
            raise ValueError(
                "tool_result blocks come first in a user message, before its text: move them "
                "to the front"
            )
        return self

    def blocks(self) -> list[Any]:
        if isinstance(self.content, str):
            return [TextBlock(type="text", text=self.content)]
        return list(self.content)

    def text(self) -> str:
        return "".join(b.text for b in self.blocks() if isinstance(b, TextBlock))

    def has_images(self) -> bool:
        return any(isinstance(block, ImageBlock) for block in self.blocks())


def _where(kind: str) -> str:
    return {
        "image": "images go in user messages",
        "tool_use": "tool_use blocks are an assistant message's (the calls it made)",
        "tool_result": "tool_result blocks go in the user message after the tool_use",
    }.get(kind, "send text blocks")


def chat_turns(messages: list[AnthropicMessage]) -> list[ChatMessage]:
    """The conversation as chat turns. An assistant message's text and its calls are two
    turns (the calls as the model answers them); a user message's results come first, each a
    tool turn naming its call, then its text and images. Raises ValueError for a result that
    answers no earlier call."""
    names: dict[str, str] = {}  # tool_use id -> the tool's name
    turns: list[ChatMessage] = []
    for index, message in enumerate(messages):
        if message.role == "assistant":
            turns += _assistant_turns(message, names)
        elif message.role == "system":
            turns.append(ChatMessage(role="system", content=message.text()))
        else:
            turns += _user_turns(index, message, names)
    return turns


def _assistant_turns(message: AnthropicMessage, names: dict[str, str]) -> list[ChatMessage]:
    turns, text = [], message.text()
    calls = [block for block in message.blocks() if isinstance(block, ToolUseBlock)]
    if text or not calls:
        turns.append(ChatMessage(role="assistant", content=text))
    if calls:
        names.update({call.id: call.name for call in calls})
        turns.append(ChatMessage(role="assistant", tool_calls=[c.as_call() for c in calls]))
    return turns


def _user_turns(index: int, message: AnthropicMessage, names: dict[str, str]) -> list[ChatMessage]:
    turns: list[ChatMessage] = []
    parts: list[Any] = []
    for at, block in enumerate(message.blocks()):
        if isinstance(block, ToolResultBlock):
            turns.append(_result_turn(index, at, block, names))
        elif isinstance(block, ImageBlock):
            parts.append(block.as_part())
        elif isinstance(block, TextBlock):
            parts.append(TextPart(type="text", text=block.text))
    if isinstance(message.content, str):
        turns.append(ChatMessage(role="user", content=message.content))
    elif parts:
        turns.append(ChatMessage(role="user", content=parts))
    return turns


def _result_turn(index: int, at: int, block: ToolResultBlock, names: dict[str, str]) -> ChatMessage:
    name = names.get(block.tool_use_id)
    if name is None:
        raise ValueError(
            f"message {index}'s block {at} (tool_result) answers tool_use_id "
            f"{shown(block.tool_use_id)}, which no tool_use block before it has: send the "
            "assistant message with that tool_use block (its id, name and input, as the answer "
            "gave them) before its result"
        )
    return ChatMessage(role="tool", tool_call_id=block.tool_use_id, name=name, content=block.text())
