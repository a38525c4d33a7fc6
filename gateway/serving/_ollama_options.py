"""Ollama's `options` and `keep_alive`, read into what zest's request path takes.

The options zest honours map onto the sampling fields every endpoint shares (temperature,
top_p, top_k, min_p, seed, num_predict as max_tokens, stop, repeat_penalty, presence and
frequency penalties) and num_ctx, a smaller context within the route's. Ollama's other
options (load-time settings such as num_gpu, and samplers zest does not run such as mirostat)
are accepted and named back in x-zest-ignored: the route decides how the model is loaded. A
name that is no Ollama option at all is refused, with the closest one.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from zest.errors import shown
from zest.gateway.serving._requests import INT32, INT64, MAX_STOPS, Number, SamplingFields

__all__ = [
    "IGNORED_OPTIONS",
    "KeepAlive",
    "OllamaOptions",
    "OllamaSampling",
    "parse_keep_alive",
    "sampling_from",
]

# Ollama's options zest accepts and does not apply: the route loads and samples the model.
IGNORED_OPTIONS = frozenset(
    {
        "numa",
        "num_batch",
        "num_gpu",
        "main_gpu",
        "low_vram",
        "f16_kv",
        "logits_all",
        "vocab_only",
        "use_mmap",
        "use_mlock",
        "embedding_only",
        "num_thread",
        "num_keep",
        "tfs_z",
        "typical_p",
        "repeat_last_n",
        "mirostat",
        "mirostat_tau",
        "mirostat_eta",
        "penalize_newline",
    }
)


class OllamaOptions(BaseModel):
    """The options zest applies, each within the bounds the OpenAI fields have; the ignored
    ones are taken out before validation (see `take_ignored`)."""

    # Ollama's options zest does not apply are kept apart (model_extra), to be named back.
    model_config = ConfigDict(extra="allow")

    temperature: Number | None = Field(default=None, ge=0.0, le=2.0)
    top_p: Number | None = Field(default=None, gt=0.0, le=1.0)
    top_k: StrictInt | None = Field(default=None, ge=0, le=INT32)
    min_p: Number | None = Field(default=None, ge=0.0, le=1.0)
    seed: StrictInt | None = Field(default=None, ge=-INT64 - 1, le=INT64)
    # -1: as many as the route allows; -2 (Ollama: fill the context): the same here.
    num_predict: StrictInt | None = Field(default=None, ge=-2, le=INT64)
    stop: str | list[str] | None = None
    repeat_penalty: Number | None = Field(default=None, gt=0.0)
    presence_penalty: Number | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: Number | None = Field(default=None, ge=-2.0, le=2.0)
    # A context smaller than the model's: the prompt and answer must fit in it.
    num_ctx: StrictInt | None = Field(default=None, ge=1, le=INT32)

    @model_validator(mode="before")
    @classmethod
    def _known_options(cls, given: Any) -> Any:
        """Only Ollama's options: a name that is none of them is refused, with the closest."""
        if not isinstance(given, dict):
            return given
        known = set(cls.model_fields) | IGNORED_OPTIONS
        for name in given:
            if name not in known:
                close = difflib.get_close_matches(str(name), sorted(known), n=1)
                hint = f"did you mean {close[0]!r}?" if close else "remove it"
                raise ValueError(
                    f"{shown(name)} is not one of Ollama's options: {hint} (docs/ollama.md "
                    "lists them)"
                )
        return given

    def ignored(self) -> list[str]:
        """The options sent that zest does not apply, as x-zest-ignored names them."""
        return [f"options.{name}" for name in self.model_extra or {}]

    @field_validator("num_predict")
    @classmethod
    def _some_tokens(cls, count: int | None) -> int | None:
        if count == 0:
            raise ValueError(
                "num_predict 0 asks for no tokens: send a positive count, or -1 for as many "
                "as the route allows"
            )
        return count

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, stop: str | list[str] | None) -> str | list[str] | None:
        stops = [stop] if isinstance(stop, str) else stop or []
        if len(stops) > MAX_STOPS:
            raise ValueError(f"at most {MAX_STOPS} stop sequences are allowed")
        if any(not s for s in stops):
            raise ValueError("stop sequences must not be empty strings")
        return stop

    def max_tokens(self) -> int | None:
        return self.num_predict if self.num_predict is not None and self.num_predict > 0 else None


class OllamaSampling(SamplingFields):
    """An Ollama request's sampling fields, with the context it asks for (num_ctx)."""

    context_tokens: StrictInt | None = None

    def context_cap(self) -> int | None:
        return self.context_tokens


def sampling_from(
    options: OllamaOptions | None, *, stream: bool, response_format: Any = None
) -> OllamaSampling:
    given = options or OllamaOptions()
    return OllamaSampling(
        max_tokens=given.max_tokens(),
        temperature=given.temperature,
        top_p=given.top_p,
        top_k=given.top_k,
        min_p=given.min_p,
        seed=given.seed,
        stop=given.stop,
        repeat_penalty=given.repeat_penalty,
        presence_penalty=given.presence_penalty,
        frequency_penalty=given.frequency_penalty,
        response_format=response_format,
        context_tokens=given.num_ctx,
        stream=stream,
    )


@dataclass(frozen=True)
class KeepAlive:
    """How long a request asks its model to stay loaded once idle: `seconds` (0: unload it
    now), or None: forever."""

    seconds: float | None

    @property
    def unload(self) -> bool:
        return self.seconds == 0

    def describe(self) -> str:
        return "forever" if self.seconds is None else f"{self.seconds:g}s"


_GO_DURATION = re.compile(r"^-?(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$")
_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_MOST_SECONDS = 10 * 365 * 86400.0  # longer than any server runs: as good as forever


def parse_keep_alive(value: Any) -> KeepAlive | None:
    """Ollama's keep_alive: seconds as a number, or a Go duration ("5m", "1h30m", "300ms");
    a negative value keeps the model loaded forever; 0 unloads it. None: not sent."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(_KEEP_ALIVE_HINT % shown(value))
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and _GO_DURATION.match(value.strip()):
        text = value.strip()
        seconds = sum(float(n) * _GO_UNITS[unit] for n, unit in _GO_PART.findall(text))
        seconds = -seconds if text.startswith("-") else seconds
    elif isinstance(value, str):
        try:
            seconds = float(value)
        except ValueError:
            raise ValueError(_KEEP_ALIVE_HINT % shown(value)) from None
    else:
        raise ValueError(_KEEP_ALIVE_HINT % shown(value))
    if not math.isfinite(seconds):
        raise ValueError(_KEEP_ALIVE_HINT % shown(value))
    if seconds < 0 or seconds > _MOST_SECONDS:
        return KeepAlive(None)
    return KeepAlive(seconds)


_KEEP_ALIVE_HINT = (
    "keep_alive %s is not a duration: send seconds (300), a duration such as 5m or 1h30m, "
    "0 to unload the model now, or -1 to keep it loaded"
)
