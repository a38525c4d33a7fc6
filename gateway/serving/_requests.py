"""OpenAI-shaped request bodies, validated strictly so a typo gets a clear 400, not silence."""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from zest.engines import CONTENT_PARTS
from zest.errors import shown
from zest.gateway.serving._tools import Tool, ToolCall, ToolChoice
from zest.router import ResponseFormat

__all__ = [
    "IGNORED_FIELDS",
    "INT64",
    "TEXT_OR_PARTS",
    "ChatMessage",
    "ChatRequest",
    "CompletionRequest",
    "EmbeddingRequest",
    "ImagePart",
    "Number",
    "Refused",
    "SamplingFields",
    "StreamOptions",
    "TaskRequest",
    "TextPart",
    "parts_of",
]

MAX_STOPS = 16
MAX_CHOICES = 8
# Answers one request may ask for: its prompts (a completions batch) times n.
MAX_ANSWERS = 64
MAX_METADATA = 16  # OpenAI's own limit
INT64 = 2**63 - 1  # the largest seed (OpenAI's is an int64) and count taken
INT32 = 2**31 - 1
# What a validator checks, said in the JSON Schema too (the OpenAPI document); the validator
# keeps its own message.
AT_LEAST_ONE: dict[str, Any] = {"minItems": 1}


# Request types are strict: JSON true is not 1, "yes" is not true, "5" is not 5, and a number
# too large for a float (1e309 reads as infinity) is refused rather than taken as infinite.
Number = Annotated[float, Strict(), AllowInfNan(False)]

# OpenAI fields that change nothing for a model served here: accepted, and named back to the
# client (x-zest-ignored) so that nothing is ignored silently. A field that would change the
# answer is never here: unsupported, it stays a 400 naming it.
IGNORED_FIELDS: dict[str, str] = {
    "store": "zest keeps no stored completions",
    "metadata": "read only by routes.yaml rules, and the task has none",
    "user": "an end-user id for OpenAI's abuse monitoring",
    "safety_identifier": "an end-user id for OpenAI's abuse monitoring",
    "prompt_cache_key": "zest's prefix cache needs no key",
    "prompt_cache_retention": "zest's prefix cache keeps what its memory allows",
    "service_tier": "one tier: the route decides the device",
    "reasoning_effort": "for reasoning models; routes choose the model",
    "reasoning": "the Responses API's reasoning options: routes choose the model",
    "prediction": "predicted outputs speed up OpenAI's models; the answer is the same without",
}


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextPart(_Body):
    type: Literal["text"]
    text: str


class ImageUrl(_Body):
    url: str = Field(min_length=1)  # a URL, or a data: URL of the image's bytes
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(_Body):
    """An image: zest's own engines read text only, so a task's rules route it to a route
    whose (remote) model takes images, where it is forwarded as sent."""

    type: Literal["image_url"]
    image_url: ImageUrl


class Refused(_Body):
    """A content part (or an item) of a kind zest does not take: refused, saying what it
    takes. `says` is the message, `%s` the type sent."""

    model_config = ConfigDict(extra="allow")
    type: Any
    says: ClassVar[str]

    @field_validator("type")
    @classmethod
    def _refuse(cls, kind: Any) -> Any:
        raise ValueError(cls.says % shown(kind))


class UnknownPart(Refused):
    says = (
        'a content part of type %s is not one zest takes: send text parts ({"type": "text", '
        '"text": "..."}), or image_url parts for a route whose model reads images'
    )


def parts_of(tags: dict[str, str], example: str) -> Discriminator:
    """The discriminator of a content part's models, by its `type` (any other: Unknown, which
    refuses it); what is no object is an error saying to send `example`. Tags are capitalised,
    as union members, so that an error's key path is the client's (see http._body_errors)."""

    def tag(part: Any) -> str | None:
        if isinstance(part, BaseModel):  # a part made here (a Responses input as chat)
            part = {"type": getattr(part, "type", None)}
        if not isinstance(part, dict):
            return None  # not an object: the discriminator's error says so
        kind = part.get("type")
        return tags.get(kind, "Unknown") if isinstance(kind, str) else "Unknown"

    return Discriminator(
        tag,
        custom_error_type="part_not_object",
        custom_error_message=f"a content part is an object: send {example}",
    )


def _text_or_parts(content: Any) -> str | None:
    """A message content's kind, a string or a list of parts, so that a list's errors are
    its parts' alone (None: neither, which the discriminator's error says)."""
    if isinstance(content, str):
        return "str"
    return "list" if isinstance(content, list) else None


TEXT_OR_PARTS = Discriminator(
    _text_or_parts,
    custom_error_type="content_type",
    custom_error_message="send a string or a list of content parts",
)
ContentPart = Annotated[
    Annotated[TextPart, Tag("Text")]
    | Annotated[ImagePart, Tag("Image")]
    | Annotated[UnknownPart, Tag("Unknown"), SkipJsonSchema()],
    parts_of({"text": "Text", "image_url": "Image"}, '{"type": "text", "text": "..."}'),
]
Content = Annotated[
    Annotated[str, Tag("str")] | Annotated[list[ContentPart], Tag("list")], TEXT_OR_PARTS
]


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    # None only for an assistant turn that called tools.
    content: Content | None = None
    name: str | None = None
    # An assistant turn's calls, and a tool result's call id (OpenAI's history shape).
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _has_content(self) -> ChatMessage:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            if self.role == "assistant":
                raise ValueError("an assistant message needs content or tool_calls")
            raise ValueError(f"a {self.role} message needs content: send its text")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if isinstance(part, TextPart))

    def routing_text(self) -> str:
        """The text routing rules read: a content array's text parts joined with newlines."""
        if isinstance(self.content, list):
            return "\n".join(part.text for part in self.content if isinstance(part, TextPart))
        return self.text()

    def has_images(self) -> bool:
        return isinstance(self.content, list) and any(
            isinstance(part, ImagePart) for part in self.content
        )

    def as_sent(self) -> dict[str, str]:
        """This turn as the model reads it: a call as the JSON it answers in (see _tools), a
        tool's result as a user turn naming its call; "developer" is the system role."""
        if self.tool_calls:
            calls = [
                {"name": c.function.name, "arguments": _arguments(c.function.arguments)}
                for c in self.tool_calls
            ]
            return {"role": "assistant", "content": json.dumps({"tool_calls": calls})}
        if self.role == "tool":
            call = f" {self.tool_call_id}" if self.tool_call_id else ""
            named = f" ({self.name})" if self.name else ""
            return {"role": "user", "content": f"Result of tool call{call}{named}: {self.text()}"}
        sent = {"role": "system" if self.role == "developer" else self.role, "content": self.text()}
        if isinstance(self.content, list) and self.has_images():
            # Forwarded as sent, by a remote engine (the only kind planned for images).
            parts = [part.model_dump(exclude_none=True) for part in self.content]
            sent[CONTENT_PARTS] = json.dumps(parts)
        return sent


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # as the client sent it: the model reads what it was given


class StreamOptions(_Body):
    include_usage: StrictBool = False


class SamplingFields(_Body):
    """Fields every generation endpoint accepts (OpenAI's, plus llama.cpp's usual extras)."""

    max_tokens: StrictInt | None = Field(default=None, ge=1, le=INT64)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1, le=INT64)
    temperature: Number | None = Field(default=None, ge=0.0, le=2.0)
    top_p: Number | None = Field(default=None, gt=0.0, le=1.0)
    top_k: StrictInt | None = Field(default=None, ge=0, le=INT32)
    min_p: Number | None = Field(default=None, ge=0.0, le=1.0)
    repeat_penalty: Number | None = Field(default=None, gt=0.0)
    frequency_penalty: Number | None = Field(default=None, ge=-2.0, le=2.0)
    presence_penalty: Number | None = Field(default=None, ge=-2.0, le=2.0)
    stop: str | list[str] | None = None
    seed: StrictInt | None = Field(default=None, ge=-INT64 - 1, le=INT64)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    # Choices per request: n sequences decoded together in the model's batch.
    n: StrictInt = Field(default=1, ge=1, le=MAX_CHOICES)
    response_format: ResponseFormat | None = None
    # Token id (as a string, OpenAI's spelling) -> a bias added to its logit (-100 bans it).
    logit_bias: dict[str, Number] | None = None
    # OpenAI's tags of a request (at most 16; keys up to 64 characters, values up to 512):
    # what routes.yaml rules' metadata conditions read.
    metadata: dict[str, str] | None = None
    # Lemonade's field: answer with the routing decision's trace (also x-zest-route-trace: 1).
    route_trace: StrictBool | None = None

    @field_validator("metadata")
    @classmethod
    def _check_metadata(cls, metadata: dict[str, str] | None) -> dict[str, str] | None:
        if metadata is None:
            return None
        if len(metadata) > MAX_METADATA:
            raise ValueError(f"metadata holds at most {MAX_METADATA} keys, got {len(metadata)}")
        for key, value in metadata.items():
            if len(key) > 64 or len(value) > 512:
                raise ValueError(
                    f"metadata keys are at most 64 characters and values at most 512 "
                    f"(OpenAI's limits): {shown(key)} is over"
                )
        return metadata

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, stop: str | list[str] | None) -> str | list[str] | None:
        stops = [stop] if isinstance(stop, str) else stop or []
        if len(stops) > MAX_STOPS:
            raise ValueError(f"at most {MAX_STOPS} stop sequences are allowed")
        if any(not s for s in stops):
            raise ValueError("stop sequences must not be empty strings")
        return stop

    @model_validator(mode="after")
    def _check_limits(self) -> SamplingFields:
        both = (self.max_tokens, self.max_completion_tokens)
        if None not in both and both[0] != both[1]:
            raise ValueError("give max_tokens or max_completion_tokens, not two different ones")
        return self

    @field_validator("logit_bias")
    @classmethod
    def _check_logit_bias(cls, bias: dict[str, float] | None) -> dict[str, float] | None:
        for token, value in (bias or {}).items():
            if not (token.isascii() and token.isdigit()):  # "²" is a digit to Python
                raise ValueError(f"logit_bias keys are token ids, got {shown(token)}")
            if not -100 <= value <= 100:
                raise ValueError(f"logit_bias values are between -100 and 100, got {value}")
        return bias

    def biases(self) -> tuple[tuple[int, float], ...]:
        return tuple((int(token), value) for token, value in (self.logit_bias or {}).items())

    def logprob_count(self) -> int | None:
        """None: no log probabilities; k: each token's, with k alternatives (per endpoint)."""
        return None

    def trims_to_fit(self) -> bool:
        """Whether a prompt too long is trimmed whatever the route's context policy says
        (the Responses API's truncation: auto); else the policy decides."""
        return False

    def context_cap(self) -> int | None:
        """A context smaller than the model's that the request asks for (Ollama's num_ctx):
        the prompt and the answer must fit in it; None: the model's own."""
        return None

    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


def _check_messages(messages: list[ChatMessage]) -> list[ChatMessage]:
    if not messages:
        raise ValueError("messages must hold at least one message")
    return messages


class ChatRequest(SamplingFields):
    model: str
    messages: list[ChatMessage] = Field(json_schema_extra=AT_LEAST_ONE)
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = Field(default=None, ge=0, le=20)
    # False: at most one call per answer (the constraint says so).
    parallel_tool_calls: StrictBool | None = None

    _messages = field_validator("messages")(_check_messages)

    @model_validator(mode="after")
    def _top_needs_logprobs(self) -> ChatRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return self

    def logprob_count(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(SamplingFields):
    model: str
    # One prompt, or OpenAI's batch: a list of prompts, each answered by its own n choices.
    prompt: str | list[str] = Field(json_schema_extra={"minItems": 1, "maxItems": MAX_ANSWERS})
    # The prompt before the completion in the answer.
    echo: StrictBool | None = None
    # The text after the gap: the model fills in between (models with FIM tokens).
    suffix: str | None = None
    # Each token's log probability, with this many alternatives (OpenAI's legacy form).
    logprobs: StrictInt | None = Field(default=None, ge=0, le=5)

    def logprob_count(self) -> int | None:
        return self.logprobs

    @field_validator("prompt", mode="before")
    @classmethod
    def _texts_only(cls, prompt: Any) -> Any:
        """A list of texts, said plainly when it is not: token ids and other values are
        refused by what they are, not by the union's every member."""
        if not isinstance(prompt, list):
            return prompt
        if not prompt:
            raise ValueError(
                "the list of prompts is empty: send a text, or a list of texts (one answer each)"
            )
        if all(_token_ids(item) for item in prompt):
            raise ValueError(
                "token ids are not taken as a prompt: a task's rules read text, and the models "
                "its routes reach each have their own vocabulary; send a text, or a list of "
                "texts (one answer each)"
            )
        for index, item in enumerate(prompt):
            if not isinstance(item, str):
                raise ValueError(
                    f"item {index} of the list is {shown(item)}, not a text: send a text, or a "
                    "list of texts (one answer each)"
                )
        return prompt

    @field_validator("prompt")
    @classmethod
    def _bounded_batch(cls, prompt: str | list[str], info: ValidationInfo) -> str | list[str]:
        prompts = 1 if isinstance(prompt, str) else len(prompt)
        n = info.data.get("n", 1)  # validated before: a field of SamplingFields
        if prompts * n > MAX_ANSWERS:
            raise ValueError(
                f"{prompts} prompts with n={n} ask for {prompts * n} answers, more than "
                f"{MAX_ANSWERS} per request: send fewer prompts per request"
            )
        return prompt

    def prompts(self) -> list[str]:
        """The prompts, in order: choice k of the answer is prompt k // n's."""
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)

    def routing_text(self) -> str:
        """What routes.yaml rules read: the prompts joined with newlines (as Lemonade reads a
        prompt list)."""
        return "\n".join(self.prompts())


def _token_ids(item: Any) -> bool:
    """A token id, or a list of them (OpenAI's two token-array forms of a prompt)."""
    if isinstance(item, list):
        return bool(item) and all(_token_id(token) for token in item)
    return _token_id(item)


def _token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class TaskRequest(SamplingFields):
    """POST /v1/tasks/{task}: messages for chat routes, or prompt/input text for either kind."""

    model: str | None = None
    messages: list[ChatMessage] | None = Field(default=None, json_schema_extra=AT_LEAST_ONE)
    prompt: str | None = None
    input: str | None = None

    @model_validator(mode="after")
    def _one_input(self) -> TaskRequest:
        given = [k for k in ("messages", "prompt", "input") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("send exactly one of messages, prompt or input")
        if self.messages is not None:
            _check_messages(self.messages)
        return self

    def text(self) -> str | None:
        return self.prompt if self.prompt is not None else self.input


# A token id of the model's vocabulary (its upper bound is the model's, checked by the engine).
TokenId = Annotated[int, Strict(), Field(ge=0)]


class EmbeddingRequest(_Body):
    """POST /v1/embeddings: a text, a list of texts, or token ids (one array, or a list of
    them), as OpenAI takes them: langchain's OpenAIEmbeddings sends token arrays."""

    model: str
    input: str | list[str] | list[TokenId] | list[list[TokenId]] = Field(
        json_schema_extra={"minItems": 1, "minLength": 1}
    )
    encoding_format: Literal["float", "base64"] = "float"
    # Shortening vectors changes the answer and the models served here have one size.
    dimensions: None = None

    @field_validator("input", mode="before")
    @classmethod
    def _token_ids(cls, given: Any) -> Any:
        """Say which value is no token id (the union's own errors name each member)."""
        if not isinstance(given, list) or all(isinstance(item, str) for item in given):
            return given
        rows = given if all(isinstance(item, list) for item in given) else [given]
        for token in (token for row in rows for token in row):
            if isinstance(token, bool) or not isinstance(token, int) or token < 0:
                raise ValueError(
                    f"{shown(token)} is not a token id: send a text, a list of texts, or token "
                    "ids (whole numbers from 0, in a list or in a list of lists)"
                )
        return given

    def inputs(self) -> list[str | tuple[int, ...]]:
        if isinstance(self.input, str):
            return [self.input]
        items: list[Any] = list(self.input)  # one member of the union: all of a kind
        if items and isinstance(items[0], int):  # one token array
            return [tuple(items)]
        return [item if isinstance(item, str) else tuple(item) for item in items]
