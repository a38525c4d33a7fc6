"""The Responses API's request fields beyond what a chat task reads, so that every field of
OpenAI's request schema is taken: the ones zest honours (`include`'s logprobs, `top_logprobs`,
`max_tool_calls`, `truncation: auto`, `stream_options`), the ones that change nothing here
(accepted, and named back in x-zest-ignored), and the values zest cannot honour, refused
saying why (`background: true`, a stored conversation or prompt, moderation, compaction).

The fields every OpenAI endpoint may send and nothing here reads (`store`, `user`, `reasoning`,
`service_tier`, ...) are IGNORED_FIELDS (_requests.py), taken out before validation."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

from zest.gateway.serving._requests import INT64

__all__ = ["LOGPROBS", "ResponsesOptions", "ResponsesStreamOptions"]

# The one `include` value zest has data for: each output token's log probability.
LOGPROBS = "message.output_text.logprobs"
# The others include data of items zest never makes (tool runs, images, reasoning): no-ops.
Includable = Literal[
    "message.output_text.logprobs",
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResponsesStreamOptions(_Body):
    # Random characters on each delta event (OpenAI's default), so that an event's size does
    # not tell the length of the text it carries.
    include_obfuscation: StrictBool = True


class BackgroundOptions(_Body):
    completion_window: Literal["soonest", "2h", "8h"] | None = None
    continuation_id: str | None = None


class PromptCacheOptions(_Body):
    """OpenAI's cache breakpoints: zest's prefix cache reuses what it can without them."""

    mode: Literal["implicit", "explicit"] | None = None
    ttl: Literal["30m", "12h"] | None = None
    comparison_response_id: str | None = None
    prewarm: StrictBool | None = None

    @field_validator("prewarm")
    @classmethod
    def _answers_always(cls, prewarm: bool | None) -> bool | None:
        if prewarm:
            raise ValueError(
                "zest answers every request: it does not warm a cache without answering: "
                "leave prewarm out"
            )
        return prewarm


class AccessPrograms(_Body):
    cyber: Literal["standard", "daybreak_blue", "daybreak_red"] | None = None


class ImageOptions(_Body):
    context_compression: Literal["auto", "enabled", "disabled"] | None = None


def _refuse_unless_null(value: Any, why: str) -> None:
    if value is not None:
        raise ValueError(why)


class ResponsesOptions(_Body):
    """OpenAI's Responses fields that a chat request has no counterpart for."""

    include: list[Includable] | None = None
    top_logprobs: StrictInt | None = Field(default=None, ge=0, le=20)
    max_tool_calls: StrictInt | None = Field(default=None, ge=0, le=INT64)
    # auto: an input longer than the route allows is trimmed (its oldest turns first) as the
    # route's context policy trims; disabled, OpenAI's default: the route's policy decides.
    truncation: Literal["auto", "disabled"] | None = None
    stream_options: ResponsesStreamOptions | None = None
    background: StrictBool | None = None
    background_options: BackgroundOptions | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    access_programs: AccessPrograms | None = None
    image: ImageOptions | None = None
    context_management: list[dict[str, Any]] | None = None
    # What needs state or models zest does not have: refused when given (see the validators).
    conversation: None = None
    prompt: None = None
    moderation: None = None

    @field_validator("background")
    @classmethod
    def _answers_in_the_request(cls, background: bool | None) -> bool | None:
        if background:
            raise ValueError(
                "zest answers while the request is open and keeps no responses to fetch "
                "later: send background: false (stream: true shows the answer as it comes)"
            )
        return background

    @field_validator("conversation", mode="before")
    @classmethod
    def _no_stored_conversations(cls, value: Any) -> None:
        _refuse_unless_null(
            value,
            "zest keeps no conversations: send the whole conversation in input and leave "
            "conversation out",
        )

    @field_validator("prompt", mode="before")
    @classmethod
    def _no_stored_prompts(cls, value: Any) -> None:
        _refuse_unless_null(
            value,
            "zest keeps no prompt templates: send the prompt's text in instructions and input, "
            "and leave prompt out",
        )

    @field_validator("moderation", mode="before")
    @classmethod
    def _no_moderation(cls, value: Any) -> None:
        _refuse_unless_null(value, "zest runs no moderation model: leave moderation out")

    @field_validator("context_management")
    @classmethod
    def _no_compaction(cls, entries: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if entries:
            raise ValueError(
                "zest does not compact conversations: leave context_management out "
                "(truncation: auto trims an input too long by the route's context policy)"
            )
        return entries

    def wants_logprobs(self) -> bool:
        return LOGPROBS in (self.include or ())

    def logprob_count(self) -> int | None:
        """None: no log probabilities; k: each token's, with k alternatives."""
        return (self.top_logprobs or 0) if self.wants_logprobs() else None

    def obfuscated(self) -> bool:
        return self.stream_options is None or self.stream_options.include_obfuscation

    def option_ignored(self, *, streamed: bool, tools: bool) -> list[str]:
        """The fields sent whose value changes nothing here (a null is no value sent)."""
        sent = {
            name
            for name in self.model_fields_set & set(ResponsesOptions.model_fields)
            if getattr(self, name) is not None
        }
        honoured = {
            "include": self.wants_logprobs(),
            "top_logprobs": self.wants_logprobs(),
            "max_tool_calls": tools,
            "truncation": self.truncation == "auto",
            "stream_options": streamed,
        }
        return [
            name
            for name in ResponsesOptions.model_fields
            if name in sent and not honoured.get(name, False)
        ]
