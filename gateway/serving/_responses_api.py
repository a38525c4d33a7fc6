"""OpenAI's Responses API request (/v1/responses), read into what a chat task takes: messages
(instructions first), sampling fields, tools and the answer's format (the fields beyond
those: _responses_options.py)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Annotated, Any, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictInt,
    Tag,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from zest.errors import shown
from zest.gateway.serving._requests import (
    INT64,
    TEXT_OR_PARTS,
    ChatMessage,
    ImagePart,
    Number,
    Refused,
    SamplingFields,
    TextPart,
    parts_of,
)
from zest.gateway.serving._responses_options import ResponsesOptions
from zest.gateway.serving._routing import RouteInputs
from zest.gateway.serving._tools import (
    Function,
    NamedToolChoice,
    Tool,
    ToolCall,
    ToolUse,
    tool_use_for,
)
from zest.router import BoundedJsonSchema, ResponseFormat

__all__ = ["ResponsesRequest"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputText(_Body):
    type: Literal["input_text", "output_text"]
    text: str
    annotations: list[Any] | None = None  # output_text echoed back from an earlier answer


class InputImage(_Body):
    """An image (the Responses API's input_image): routed as a chat image_url part is."""

    type: Literal["input_image"]
    # OpenAI's stored files: zest keeps none (checked first, to say so before image_url).
    file_id: None = None
    image_url: str = Field(min_length=1)  # a URL, or a data: URL of the image's bytes
    detail: Literal["auto", "low", "high"] | None = None

    @field_validator("file_id", mode="before")
    @classmethod
    def _no_stored_files(cls, value: Any) -> None:
        if value is not None:
            raise ValueError(
                "zest keeps no files: send the image as image_url (a URL, or a data: URL of "
                "its bytes) and leave file_id out"
            )

    def as_chat_part(self) -> ImagePart:
        url = {"url": self.image_url, "detail": self.detail}
        return ImagePart.model_validate({"type": "image_url", "image_url": url})


class UnknownContent(Refused):
    says = (
        "a content part of type %s is not one zest takes: send input_text parts, or "
        "input_image parts for a route whose model reads images"
    )


InputContent = Annotated[
    Annotated[InputText, Tag("Text")]
    | Annotated[InputImage, Tag("Image")]
    | Annotated[UnknownContent, Tag("Unknown"), SkipJsonSchema()],
    parts_of(
        {"input_text": "Text", "output_text": "Text", "input_image": "Image"},
        '{"type": "input_text", "text": "..."}',
    ),
]
MessageContent = Annotated[
    Annotated[str, Tag("str")] | Annotated[list[InputContent], Tag("list")], TEXT_OR_PARTS
]


class InputMessage(_Body):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: MessageContent
    id: str | None = None
    status: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if isinstance(part, InputText))

    def has_images(self) -> bool:
        return isinstance(self.content, list) and any(
            isinstance(part, InputImage) for part in self.content
        )

    def as_chat(self) -> ChatMessage:
        """The message as a chat turn: its text, or its parts with images (image_url)."""
        if not self.has_images() or isinstance(self.content, str):
            return ChatMessage(role=self.role, content=self.text())
        parts: list[Any] = [
            part.as_chat_part()
            if isinstance(part, InputImage)
            else TextPart(type="text", text=part.text)
            for part in self.content
            if isinstance(part, InputImage | InputText)
        ]
        return ChatMessage(role=self.role, content=parts)


class FunctionCallItem(_Body):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutput(_Body):
    type: Literal["function_call_output"]
    call_id: str
    output: str


class UnknownItem(Refused):
    """An item of a kind zest does not read (reasoning, a file search call, ...): refused."""

    says = (
        "an item of type %s is not one zest reads: send message, function_call and "
        "function_call_output items, or the user's text and images as they are (strings, "
        "input_text and input_image parts)"
    )


class BareText(_Body):
    """The user's text as an item of its own, without a message around it."""

    type: Literal["input_text"]
    text: str


_ITEM_TAGS = {
    "message": "Message",
    "function_call": "FunctionCall",
    "function_call_output": "FunctionCallOutput",
    # The user's content without a message around it (Lemonade reads these too): a run of
    # them is one user turn.
    "input_text": "Text",
    "input_image": "Image",
}


def _item_tag(item: Any) -> str | None:
    """The item's model, by its type (a message may leave it out); tags are capitalised, as
    union members, so that an error's key path is the client's (see http._body_errors)."""
    if isinstance(item, str):
        return "str"  # the user's text, bare
    if not isinstance(item, dict):
        return None  # neither: the discriminator's error says so
    kind = item.get("type", "message")
    return _ITEM_TAGS.get(kind, "Unknown") if isinstance(kind, str) else "Unknown"


InputItem = Annotated[
    Annotated[InputMessage, Tag("Message")]
    | Annotated[FunctionCallItem, Tag("FunctionCall")]
    | Annotated[FunctionCallOutput, Tag("FunctionCallOutput")]
    | Annotated[BareText, Tag("Text")]
    | Annotated[InputImage, Tag("Image")]
    | Annotated[str, Tag("str")]
    | Annotated[UnknownItem, Tag("Unknown"), SkipJsonSchema()],
    Discriminator(
        _item_tag,
        custom_error_type="item_not_object",
        custom_error_message=(
            'an input item is an object or a string: send a message ({"role": "user", '
            '"content": "..."}), a function_call or function_call_output item, or the '
            "user's text"
        ),
    ),
]
# An item that is the user's content itself, without a message around it.
Bare = BareText | InputImage | str


class FunctionTool(_Body):
    """A Responses API tool: the function's fields at the top level."""

    type: Literal["function"]
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: BoundedJsonSchema = Field(default_factory=lambda: {"type": "object"})
    strict: StrictBool | None = None


class FunctionChoice(_Body):
    type: Literal["function"]
    name: str


class TextFormat(_Body):
    """text.format: the answer's format, the Responses API's spelling of response_format."""

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: BoundedJsonSchema | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: StrictBool | None = None

    def as_response_format(self) -> ResponseFormat:
        if self.type != "json_schema":
            return ResponseFormat(type=self.type)
        return ResponseFormat.model_validate(
            {
                "type": "json_schema",
                "json_schema": {"name": self.name or "answer", "schema": self.schema_ or {}},
            }
        )


class TextOptions(_Body):
    format: TextFormat | None = None
    # How much a GPT-5 model says: routes choose the model here (x-zest-ignored names it).
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponsesSampling(SamplingFields):
    """A Responses request's sampling fields, with what only it asks for."""

    logprobs_top: StrictInt | None = None
    trim_to_fit: StrictBool = False

    def logprob_count(self) -> int | None:
        return self.logprobs_top

    def trims_to_fit(self) -> bool:
        return self.trim_to_fit


class ResponsesRequest(ResponsesOptions):
    model: str
    # Continuing a stored response needs storage zest does not keep: refused, saying what to
    # send instead (checked before the input, whose call ids it would explain).
    previous_response_id: None = None
    input: list[InputItem] | str = Field(json_schema_extra={"minItems": 1, "minLength": 1})
    instructions: str | None = None
    max_output_tokens: StrictInt | None = Field(default=None, ge=1, le=INT64)
    temperature: Number | None = Field(default=None, ge=0.0, le=2.0)
    top_p: Number | None = Field(default=None, gt=0.0, le=1.0)
    stream: StrictBool = False
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["auto", "none", "required"] | FunctionChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    text: TextOptions | None = None
    # What routes.yaml rules' metadata conditions read (OpenAI's limits: see SamplingFields).
    metadata: dict[str, str] | None = None
    # Lemonade's field: answer with the routing decision's trace.
    route_trace: StrictBool | None = None

    @field_validator("previous_response_id", mode="before")
    @classmethod
    def _no_stored_responses(cls, value: Any) -> None:
        if value is not None:
            raise ValueError(
                "zest keeps no responses to continue from: send the whole conversation in "
                "input (the earlier turns, and each function_call item before its "
                "function_call_output) and leave previous_response_id out"
            )

    @field_validator("input")
    @classmethod
    def _outputs_answer_calls(cls, items: str | list[InputItem]) -> str | list[InputItem]:
        called: set[str] = set()
        for index, item in enumerate(items if isinstance(items, list) else []):
            if isinstance(item, FunctionCallItem):
                called.add(item.call_id)
            elif isinstance(item, FunctionCallOutput) and item.call_id not in called:
                raise ValueError(
                    f"item {index} (function_call_output) answers call_id "
                    f"{shown(item.call_id)}, which no function_call item before it has: send "
                    "the function_call item (its call_id, name and arguments, as the answer "
                    "gave them) before its output"
                )
        return items

    @model_validator(mode="after")
    def _some_input(self) -> ResponsesRequest:
        if not self.input:
            raise ValueError("input is empty: send text or a list of input items")
        return self

    def messages(self) -> list[ChatMessage]:
        """The input as chat messages, the instructions first (as a system turn); each run of
        bare items (strings, input_text and input_image parts) is one user turn."""
        head = [ChatMessage(role="system", content=self.instructions)] if self.instructions else []
        if isinstance(self.input, str):
            return [*head, ChatMessage(role="user", content=self.input)]
        turns: list[ChatMessage] = []
        for bare, run in itertools.groupby(self.input, key=_is_bare):
            if bare:
                turns.append(_user_turn(cast("list[Bare]", list(run))))
            else:
                turns += [_as_chat(item) for item in run]
        return head + turns

    def sampling(self) -> SamplingFields:
        fmt = self.text.format if self.text else None
        return ResponsesSampling(
            max_tokens=self.max_output_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            stream=self.stream,
            response_format=fmt.as_response_format() if fmt else None,
            metadata=self.metadata,
            route_trace=self.route_trace,
            logprobs_top=self.logprob_count(),
            trim_to_fit=self.truncation == "auto",
        )

    def ignored(self) -> list[str]:
        """The fields sent whose value changes nothing here (x-zest-ignored names them)."""
        ignored = self.option_ignored(streamed=self.stream, tools=bool(self.tools))
        if self.text is not None and self.text.verbosity is not None:
            ignored.append("text.verbosity")
        return ignored

    def routing_inputs(self) -> RouteInputs:
        """What routing rules read: a string input, else the last user item's text parts
        joined with newlines (Lemonade's choice for the Responses API)."""
        return RouteInputs(
            _routing_text(self.input),
            metadata=dict(self.metadata or {}),
            has_tools=bool(self.tools),
            has_images=self.has_images(),
        )

    def has_images(self) -> bool:
        """An image part in any input item (not only the last), or an image item of its own."""
        items = self.input if isinstance(self.input, list) else []
        return any(
            isinstance(item, InputImage) or (isinstance(item, InputMessage) and item.has_images())
            for item in items
        )

    def tool_use(self) -> ToolUse | None:
        tools = [
            Tool(
                type="function",
                function=Function(
                    name=t.name,
                    description=t.description,
                    parameters=t.parameters,
                    strict=t.strict,
                ),
            )
            for t in self.tools or []
        ]
        choice: Any = self.tool_choice
        if isinstance(choice, FunctionChoice):
            choice = NamedToolChoice.model_validate(
                {"type": "function", "function": {"name": choice.name}}
            )
        fmt = self.sampling().response_format
        schema = fmt.constraint() if fmt else None
        return tool_use_for(
            tools,
            choice,
            schema,
            self.parallel_tool_calls,
            self.max_tool_calls,
            parameters_at="tools.{index}.parameters",
            answer_at="text.format.schema",
        )


def _routing_text(items: str | list[InputItem]) -> str:
    """As Lemonade reads an input: the last user message's text parts joined with newlines;
    without one, the text of every bare item (strings, input_text parts), joined likewise."""
    if isinstance(items, str):
        return items
    users = [i for i in items if isinstance(i, InputMessage) and i.role == "user"]
    if not users:
        return "\n".join(_texts(items))
    content = users[-1].content
    if isinstance(content, str):
        return content
    return "\n".join(part.text for part in content if isinstance(part, InputText))


def _is_bare(item: InputItem) -> bool:
    return isinstance(item, BareText | InputImage | str)


def _user_turn(run: list[Bare]) -> ChatMessage:
    """A run of bare items as one user turn: its text, or its parts when it holds an image."""
    if not any(isinstance(item, InputImage) for item in run):
        return ChatMessage(role="user", content="\n".join(_texts(run)))
    parts: list[Any] = [
        item.as_chat_part()
        if isinstance(item, InputImage)
        else TextPart(type="text", text=item if isinstance(item, str) else item.text)
        for item in run
    ]
    return ChatMessage(role="user", content=parts)


def _texts(items: Sequence[InputItem]) -> list[str]:
    """The text of each bare text item (a string, an input_text part), in order."""
    return [
        item if isinstance(item, str) else item.text
        for item in items
        if isinstance(item, BareText | str)
    ]


def _as_chat(item: InputItem) -> ChatMessage:
    if isinstance(item, InputMessage):
        return item.as_chat()
    if isinstance(item, FunctionCallItem):
        call = ToolCall.model_validate(
            {"id": item.call_id, "function": {"name": item.name, "arguments": item.arguments}}
        )
        return ChatMessage(role="assistant", tool_calls=[call])
    if isinstance(item, FunctionCallOutput):
        return ChatMessage(role="tool", tool_call_id=item.call_id, content=item.output)
    raise TypeError(f"{type(item).__name__} is never a validated item")  # UnknownItem refuses
