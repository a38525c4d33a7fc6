"""Ollama's API request bodies (/api/chat, /api/generate, /api/embed, ...), read into the
request the OpenAI endpoints build: chat messages, the sampling fields, tools and the answer's
format. Nothing here serves: the handlers pass what these give to the one request path.

- `model` names a task (or a model callable by id); `NAME:latest` is NAME.
- `images` (base64, as Ollama sends them) become image parts, so routing rules see
  `has_images` and a route whose model reads images receives them as data: URLs.
- `format` is "json" (any JSON object) or a JSON Schema: structured outputs.
- `tools` are OpenAI's shape already; history's `tool_calls` carry arguments as an object.
- Fields that change nothing here are named back in x-zest-ignored (`ignored()`).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

from zest.errors import shown
from zest.gateway.serving._ollama_options import (
    KeepAlive,
    OllamaOptions,
    OllamaSampling,
    parse_keep_alive,
    sampling_from,
)
from zest.gateway.serving._requests import (
    ChatMessage,
    ImagePart,
    ImageUrl,
    TextPart,
    UnknownPart,
)
from zest.gateway.serving._tools import (
    FunctionCall,
    Tool,
    ToolCall,
    ToolUse,
    tool_use_for,
)
from zest.router import ResponseFormat

__all__ = [
    "MAX_IMAGES",
    "OllamaChatRequest",
    "OllamaEmbedRequest",
    "OllamaEmbeddingsRequest",
    "OllamaGenerateRequest",
    "OllamaModelRequest",
    "OllamaPullRequest",
    "ollama_task",
]

# Images one request may carry (all messages together): checked before any is decoded.
MAX_IMAGES = 16
LATEST = ":latest"
_BASE64 = re.compile(r"^[A-Za-z0-9+/\r\n]*={0,2}\s*$")
# The first bytes of each image format a vision model takes, and its media type.
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"RIFF", "image/webp"),
)


def ollama_task(name: str) -> str:
    """The task (or model id) an Ollama model name means: `chat:latest` is `chat`."""
    return name.removesuffix(LATEST) if name.endswith(LATEST) else name


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _image_part(data: str, where: str) -> ImagePart:
    """An Ollama image (base64, no header) as a chat image part: a data: URL of its type,
    read from its first bytes only (the rest is never decoded here)."""
    if data.startswith("data:"):  # some clients send a data: URL already
        return ImagePart(type="image_url", image_url=ImageUrl(url=data))
    if not data or not _BASE64.match(data[:4096]):
        raise ValueError(
            f"{where} is not base64: send each image's bytes base64-encoded (no data: header)"
        )
    try:
        head = base64.b64decode(data[:16] + "=" * (-len(data[:16]) % 4))
    except (binascii.Error, ValueError):
        head = b""
    media = next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)
    if media is None:
        raise ValueError(
            f"{where} is not a PNG, JPEG, GIF or WebP image: send one of those, base64-encoded"
        )
    return ImagePart(type="image_url", image_url=ImageUrl(url=f"data:{media};base64,{data}"))


class OllamaFunctionCall(_Body):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    index: int | None = None  # newer Ollama versions number the calls


class OllamaToolCall(_Body):
    id: str | None = None
    type: Literal["function"] | None = None
    function: OllamaFunctionCall


def _image_urls(images: list[str] | None) -> list[str] | None:
    """Each image checked and made a data: URL, as validation reads the body."""
    if images is None:
        return None
    return [_image_part(image, f"image {n}").image_url.url for n, image in enumerate(images)]


def _with_images(text: str, urls: list[str]) -> list[TextPart | ImagePart | UnknownPart]:
    images = [ImagePart(type="image_url", image_url=ImageUrl(url=url)) for url in urls]
    return [TextPart(type="text", text=text), *images]


class OllamaMessage(_Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    # base64 images, as Ollama sends them: data: URLs once read.
    images: list[str] | None = Field(default=None, max_length=MAX_IMAGES)
    tool_calls: list[OllamaToolCall] | None = None
    # A tool result's tool (Ollama 0.8+), and a thinking model's reasoning (ignored).
    tool_name: str | None = None
    thinking: str | None = None

    _images = field_validator("images")(_image_urls)

    @model_validator(mode="after")
    def _calls_by_assistant(self) -> OllamaMessage:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        return self

    def as_chat(self, index: int) -> ChatMessage:
        if self.tool_calls:
            calls = [
                ToolCall(
                    id=call.id or f"call_{index}_{n}",
                    function=FunctionCall(
                        name=call.function.name,
                        arguments=json.dumps(call.function.arguments, ensure_ascii=False),
                    ),
                )
                for n, call in enumerate(self.tool_calls)
            ]
            return ChatMessage(role="assistant", content=self.content or None, tool_calls=calls)
        if self.images:
            return ChatMessage(role=self.role, content=_with_images(self.content, self.images))
        if self.role == "tool":
            return ChatMessage(role="tool", content=self.content, name=self.tool_name)
        return ChatMessage(role=self.role, content=self.content)


def _format(value: Any) -> ResponseFormat | None:
    """Ollama's `format`: "json" (any JSON object), a JSON Schema, or "" / absent (text)."""
    if value is None or value == "":
        return None
    if value == "json":
        return ResponseFormat(type="json_object")
    if isinstance(value, dict):
        return ResponseFormat.model_validate(
            {"type": "json_schema", "json_schema": {"name": "format", "schema": value}}
        )
    raise ValueError(
        f'format {shown(value)} is not one zest takes: send "json" or a JSON Schema object'
    )


class _Generating(_Body):
    """What /api/chat and /api/generate share."""

    model: str = Field(min_length=1)
    format: Any = None
    options: OllamaOptions | None = None
    stream: StrictBool = True  # Ollama's default: streamed
    keep_alive: Any = None
    # A thinking model's switch (Ollama 0.9+): the routes choose the model here.
    think: Any = None
    # Each token's log probability (Ollama 0.12+), and image generation's size and steps:
    # accepted and named back in x-zest-ignored.
    logprobs: StrictBool | None = None
    top_logprobs: int | None = None
    width: int | None = None
    height: int | None = None
    steps: int | None = None

    @field_validator("format")
    @classmethod
    def _read_format(cls, value: Any) -> ResponseFormat | None:
        return _format(value)

    @field_validator("keep_alive")
    @classmethod
    def _read_keep_alive(cls, value: Any) -> KeepAlive | None:
        return parse_keep_alive(value)

    def task(self) -> str:
        return ollama_task(self.model)

    def kept(self) -> KeepAlive | None:
        return self.keep_alive if isinstance(self.keep_alive, KeepAlive) else None

    def response_format(self) -> ResponseFormat | None:
        return self.format if isinstance(self.format, ResponseFormat) else None

    def sampling(self) -> OllamaSampling:
        return sampling_from(self.options, stream=self.stream, response_format=self.format)

    def ignored(self) -> list[str]:
        """The fields sent that change nothing here (x-zest-ignored names them)."""
        extras = ("think", "logprobs", "top_logprobs", "width", "height", "steps")
        named = [name for name in extras if getattr(self, name) is not None]
        return [*named, *(self.options.ignored() if self.options else [])]


class OllamaChatRequest(_Generating):
    messages: list[OllamaMessage] = Field(default_factory=list)
    tools: list[Tool] | None = None

    @model_validator(mode="after")
    def _images_counted(self) -> OllamaChatRequest:
        images = sum(len(m.images or ()) for m in self.messages)
        if images > MAX_IMAGES:
            raise ValueError(
                f"the messages carry {images} images, over the {MAX_IMAGES} one request may "
                "send: send fewer"
            )
        return self

    def chat_messages(self) -> list[ChatMessage]:
        return [message.as_chat(index) for index, message in enumerate(self.messages)]

    def tool_use(self) -> ToolUse | None:
        schema = self.format.constraint() if isinstance(self.format, ResponseFormat) else None
        return tool_use_for(self.tools, None, schema)

    def ignored(self) -> list[str]:
        thinking = any(m.thinking for m in self.messages)
        return [*super().ignored(), *(["messages.thinking"] if thinking else [])]


class OllamaGenerateRequest(_Generating):
    prompt: str = ""
    suffix: str | None = None
    system: str | None = None
    images: list[str] | None = Field(default=None, max_length=MAX_IMAGES)
    # The prompt as it is, without the chat template (its special-token text stays text).
    raw: StrictBool = False
    # Ollama's own template language: zest renders the model's own chat template.
    template: None = None
    # The token context of an earlier /api/generate answer: zest returns none to send back.
    context: list[int] | None = None

    @field_validator("template", mode="before")
    @classmethod
    def _no_template(cls, value: Any) -> None:
        if value not in (None, ""):
            raise ValueError(
                "zest renders the model's own chat template and takes no Go template: remove "
                "template, or send raw: true with the whole prompt"
            )

    @field_validator("context")
    @classmethod
    def _no_context(cls, value: list[int] | None) -> list[int] | None:
        if value:
            raise ValueError(
                "zest returns no token context to continue from: send the conversation to "
                "/api/chat instead, and leave context out"
            )
        return value

    _images = field_validator("images")(_image_urls)

    @model_validator(mode="after")
    def _raw_alone(self) -> OllamaGenerateRequest:
        if self.raw and self.system:
            raise ValueError(
                "raw: true sends the prompt as it is, so there is no system turn: put the "
                "system text in the prompt, or leave raw out"
            )
        if self.raw and self.images:
            raise ValueError(
                "raw: true sends the prompt as text alone: send images without raw (the "
                "model's template places them)"
            )
        return self

    def loads_only(self) -> bool:
        """An empty prompt (and nothing else to answer): Ollama's way to load (or, with
        keep_alive 0, unload) the model."""
        return not self.prompt and not self.images and self.suffix is None

    def chat_messages(self) -> list[ChatMessage]:
        """The prompt as a chat's user turn (the system text first)."""
        head = [ChatMessage(role="system", content=self.system)] if self.system else []
        if self.images:
            return [*head, ChatMessage(role="user", content=_with_images(self.prompt, self.images))]
        return [*head, ChatMessage(role="user", content=self.prompt)]

    def ignored(self) -> list[str]:
        return [*super().ignored(), *(["context"] if self.context is not None else [])]


class OllamaEmbedRequest(_Body):
    model: str = Field(min_length=1)
    input: str | list[str] = Field(json_schema_extra={"minItems": 1})
    # Ollama truncates an input too long for the model unless false: zest refuses it.
    truncate: StrictBool | None = None
    options: dict[str, Any] | None = None
    keep_alive: Any = None
    # Shortening vectors changes the answer and the models served here have one size.
    dimensions: None = None

    @field_validator("keep_alive")
    @classmethod
    def _read_keep_alive(cls, value: Any) -> KeepAlive | None:
        return parse_keep_alive(value)

    def task(self) -> str:
        return ollama_task(self.model)

    def kept(self) -> KeepAlive | None:
        return self.keep_alive if isinstance(self.keep_alive, KeepAlive) else None

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)

    def ignored(self) -> list[str]:
        sent = {"truncate": self.truncate, "options": self.options}
        return [name for name, value in sent.items() if value is not None]


class OllamaEmbeddingsRequest(_Body):
    """The older /api/embeddings: one prompt, one vector."""

    model: str = Field(min_length=1)
    prompt: str
    options: dict[str, Any] | None = None
    keep_alive: Any = None

    @field_validator("keep_alive")
    @classmethod
    def _read_keep_alive(cls, value: Any) -> KeepAlive | None:
        return parse_keep_alive(value)

    def task(self) -> str:
        return ollama_task(self.model)

    def kept(self) -> KeepAlive | None:
        return self.keep_alive if isinstance(self.keep_alive, KeepAlive) else None


class OllamaModelRequest(_Body):
    """/api/show and /api/delete: a model by `model` (or the older `name`)."""

    model: str | None = None
    name: str | None = None
    verbose: StrictBool | None = None

    @model_validator(mode="after")
    def _one_name(self) -> OllamaModelRequest:
        if not (self.model or self.name):
            raise ValueError("send model: a task (or model) name, as GET /api/tags lists them")
        return self

    def task(self) -> str:
        return ollama_task(self.model or self.name or "")


class OllamaPullRequest(OllamaModelRequest):
    insecure: StrictBool | None = None
    stream: StrictBool = True
