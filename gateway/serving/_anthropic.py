"""Anthropic's Messages API request (/v1/messages, /v1/messages/count_tokens), read into what a
chat task takes: chat turns (the system first), sampling fields, tools, the answer's format and
what routing rules read. The same internal request /v1/chat/completions builds: routing,
budgets, privacy and admission never know it came as Anthropic's.

Fields zest does not implement but whose absence changes nothing of the answer's meaning
(cache_control, thinking, service_tier, ...) are accepted and named by `ignored()` (the
x-zest-ignored header); any other unknown field is a 400, as on every endpoint."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    Tag,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from zest.gateway.serving._anthropic_blocks import (
    BLOCKS_TAKEN,
    AnthropicMessage,
    Block,
    CacheControl,
    ImageBlock,
    TextBlock,
    chat_turns,
)
from zest.gateway.serving._generation import routing_text
from zest.gateway.serving._requests import (
    INT64,
    MAX_STOPS,
    ChatMessage,
    Number,
    Refused,
    SamplingFields,
)
from zest.gateway.serving._routing import RouteInputs
from zest.gateway.serving._tools import Function, NamedToolChoice, Tool, ToolUse, tool_use_for
from zest.router import BoundedJsonSchema, ResponseFormat

__all__ = ["CountTokensRequest", "MessagesRequest"]

MAX_IMAGES = 100  # Anthropic's own limit per request
MAX_USER_ID = 256  # metadata.user_id, as Anthropic bounds it
# Top-level fields whose value changes nothing of the answer here, and why (docs/anthropic.md).
IGNORED: dict[str, str] = {
    "cache_control": "zest's prefix cache reuses any shared prefix without marks",
    "thinking": "no extended thinking: the answer has no thinking blocks",
    "service_tier": "one tier: the route decides the device",
    "speed": "one speed: the route decides the device",
    "inference_geo": "the answer is computed where zest runs",
    "container": "zest runs no code-execution container (and no server tools)",
    "diagnostics": "Anthropic's prompt-cache diagnostics",
    "context_management": "zest keeps no context between requests to manage",
    "user_profile_id": "an Anthropic account's profile",
    "workspace_id": "an Anthropic account's workspace",
}


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CustomTool(_Body):
    """A tool the client runs (Anthropic's custom tool): the answer may call it."""

    type: Literal["custom"] | None = None
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    input_schema: BoundedJsonSchema
    strict: StrictBool | None = None  # zest constrains every call to its schema anyway
    cache_control: CacheControl | None = None
    # Hints for Anthropic's own tool runner: the call is the same without them.
    defer_loading: StrictBool | None = None
    eager_input_streaming: StrictBool | None = None
    input_examples: list[dict[str, Any]] | None = None
    allowed_callers: list[Any] | None = None

    def as_tool(self) -> Tool:
        function = Function(
            name=self.name, description=self.description, parameters=self.input_schema
        )
        return Tool(type="function", function=function)

    def ignored(self) -> list[str]:
        hints = ("cache_control", "defer_loading", "eager_input_streaming", "input_examples")
        return [
            f"tools.{name}"
            for name in (*hints, "allowed_callers")
            if getattr(self, name) is not None
        ]

    @field_validator("input_schema")
    @classmethod
    def _an_object(cls, schema: dict[str, Any]) -> dict[str, Any]:
        if schema.get("type") != "object":
            raise ValueError(
                'a tool\'s input is an object: send an input_schema with "type": "object"'
            )
        return schema


class ServerTool(Refused):
    says = (
        "a tool of type %s is one Anthropic's servers run (web search, code execution, ...); "
        'zest runs none: send custom tools ({"name", "description", "input_schema"}) '
        "your application runs"
    )


def _tool_tag(tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    kind = tool.get("type", "custom")
    return "Custom" if kind in ("custom", None) else "Server"


AnyTool = Annotated[
    Annotated[CustomTool, Tag("Custom")] | Annotated[ServerTool, Tag("Server"), SkipJsonSchema()],
    Discriminator(
        _tool_tag,
        custom_error_type="tool_not_object",
        custom_error_message='a tool is an object: send {"name", "description", "input_schema"}',
    ),
]


class AutoChoice(_Body):
    type: Literal["auto", "any", "none"]
    disable_parallel_tool_use: StrictBool | None = None


class NamedChoice(_Body):
    type: Literal["tool"]
    name: str = Field(min_length=1)
    disable_parallel_tool_use: StrictBool | None = None


class Metadata(_Body):
    user_id: str | None = Field(default=None, max_length=MAX_USER_ID)


class JsonFormat(_Body):
    type: Literal["json_schema"]
    schema_: BoundedJsonSchema = Field(alias="schema")


class OutputConfig(_Body):
    """The answer's format (JSON following a schema: the engines' grammar) and effort."""

    format: JsonFormat | None = None
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None


class _Conversation(_Body):
    """What /v1/messages and count_tokens both read: the conversation and its tools."""

    # What a validation error points at (gateway/http/_body_errors.py reads them).
    DOCS: ClassVar[str] = "docs/anthropic.md"
    PARTS: ClassVar[str] = (
        f"a block has the keys of its type only (docs/anthropic.md lists them): {BLOCKS_TAKEN}"
    )
    model: str = Field(min_length=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[Block] | None = None
    tools: list[AnyTool] | None = None
    tool_choice: Annotated[AutoChoice | NamedChoice, Field(discriminator="type")] | None = None
    thinking: dict[str, Any] | None = None
    cache_control: CacheControl | None = None
    output_config: OutputConfig | None = None
    speed: Literal["standard", "fast"] | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None
    _turns: list[ChatMessage] = PrivateAttr(default_factory=list)

    @field_validator("messages")
    @classmethod
    def _bounded_images(cls, messages: list[AnthropicMessage]) -> list[AnthropicMessage]:
        images = sum(isinstance(b, ImageBlock) for m in messages for b in m.blocks())
        if images > MAX_IMAGES:
            raise ValueError(
                f"{images} images: send at most {MAX_IMAGES} in one request (Anthropic's limit)"
            )
        return messages

    @field_validator("system")
    @classmethod
    def _text_only(cls, system: str | list[Any] | None) -> str | list[Any] | None:
        for index, block in enumerate(system if isinstance(system, list) else ()):
            if not isinstance(block, TextBlock):
                raise ValueError(
                    f"block {index} is a {block.type} block: the system is text: send text blocks"
                )
        return system

    @model_validator(mode="after")
    def _read_turns(self) -> _Conversation:
        if self.messages[-1].role == "assistant":
            raise ValueError(
                "messages: the last message is an assistant turn (a prefill for the answer to "
                "continue), and zest answers in a turn of its own: end with a user message"
            )
        self._turns = chat_turns(self.messages)  # its ValueError names the message and block
        return self

    def chat(self) -> list[ChatMessage]:
        """The conversation as chat turns, the system first (one system turn: templates
        expect one)."""
        blocks = self.system if isinstance(self.system, list) else ()
        system = self.system if isinstance(self.system, str) else ""
        system += "".join(b.text for b in blocks if isinstance(b, TextBlock))
        head = [ChatMessage(role="system", content=system)] if system else []
        return head + self._turns

    def tool_use(self) -> ToolUse | None:
        tools = [t.as_tool() for t in self.tools or () if isinstance(t, CustomTool)]
        choice: Any = None
        parallel = None
        if self.tool_choice is not None:
            parallel = False if self.tool_choice.disable_parallel_tool_use else None
            choice = {"auto": "auto", "any": "required", "none": "none"}.get(self.tool_choice.type)
            if isinstance(self.tool_choice, NamedChoice):
                choice = NamedToolChoice.model_validate(
                    {"type": "function", "function": {"name": self.tool_choice.name}}
                )
        fmt = self.response_format()
        return tool_use_for(tools, choice, fmt.constraint() if fmt else None, parallel)

    def response_format(self) -> ResponseFormat | None:
        fmt = self.output_config.format if self.output_config else None
        if fmt is None:
            return None
        return ResponseFormat.model_validate(
            {"type": "json_schema", "json_schema": {"name": "answer", "schema": fmt.schema_}}
        )

    def has_images(self) -> bool:
        return any(message.has_images() for message in self.messages)

    def ignored(self) -> list[str]:
        """The fields sent whose value changes nothing here (x-zest-ignored names them)."""
        sent = self.model_fields_set
        ignored = [name for name in IGNORED if name in sent and name != "thinking"]
        if self.thinking is not None and self.thinking.get("type") != "disabled":
            ignored.append("thinking")
        if self.output_config is not None and self.output_config.effort is not None:
            ignored.append("output_config.effort")
        if _cache_marks(self):
            ignored.append("cache_control")
        for tool in self.tools or ():
            ignored += tool.ignored() if isinstance(tool, CustomTool) else []
        return list(dict.fromkeys(ignored))


def _cache_marks(request: _Conversation) -> bool:
    """A cache_control mark on the system or a block (the top-level one is named already)."""
    blocks = [*(request.system if isinstance(request.system, list) else ())]
    blocks += [b for m in request.messages if isinstance(m.content, list) for b in m.content]
    return any(getattr(b, "cache_control", None) is not None for b in blocks)


class MessagesRequest(_Conversation):
    """POST /v1/messages."""

    max_tokens: StrictInt = Field(ge=1, le=INT64)  # required, as Anthropic requires it
    stop_sequences: list[str] | None = None
    stream: StrictBool = False
    temperature: Number | None = Field(default=None, ge=0.0, le=1.0)  # Anthropic's range
    top_p: Number | None = Field(default=None, gt=0.0, le=1.0)
    top_k: StrictInt | None = Field(default=None, ge=0, le=2**31 - 1)
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    inference_geo: str | None = None
    container: Any = None
    diagnostics: Any = None
    context_management: Any = None
    # Lemonade's field: answer with the routing decision's trace (also x-zest-route-trace: 1).
    route_trace: StrictBool | None = None

    @field_validator("stop_sequences")
    @classmethod
    def _check_stops(cls, stops: list[str] | None) -> list[str] | None:
        if stops is not None and len(stops) > MAX_STOPS:
            raise ValueError(f"send at most {MAX_STOPS} stop sequences, got {len(stops)}")
        if any(not stop for stop in stops or ()):
            raise ValueError("a stop sequence is an empty string: send non-empty ones")
        return stops

    def sampling(self) -> SamplingFields:
        user = self.metadata.user_id if self.metadata else None
        return SamplingFields(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            stop=self.stop_sequences,
            stream=self.stream,
            response_format=self.response_format(),
            # What routes.yaml rules' metadata conditions read (`user_id`).
            metadata={"user_id": user} if user is not None else None,
            route_trace=self.route_trace,
        )

    def ignored(self) -> list[str]:
        ignored = super().ignored()
        if self.metadata is not None and self.metadata.user_id is not None:
            ignored.append("metadata")  # the request path takes it off if a rule read it
        return ignored

    def routing_inputs(self) -> RouteInputs:
        """What routing rules read, as on /v1/chat/completions: the last user message's text
        blocks joined with newlines, metadata (user_id), whether tools and images were sent."""
        sampling = self.sampling()
        return RouteInputs(
            routing_text(self.chat(), None),
            metadata=dict(sampling.metadata or {}),
            has_tools=bool(self.tools),
            has_images=self.has_images(),
        )


class CountTokensRequest(_Conversation):
    """POST /v1/messages/count_tokens: the conversation whose prompt is counted."""
