"""The Engine interface: one per pluggable kind, implementations beside it, a strict registry."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from zest.router import Placement

__all__ = [
    "Delta",
    "Engine",
    "EngineInfo",
    "GenerationJob",
    "Message",
    "StageStats",
    "engine_factory",
    "register_engine",
]

Message = dict[str, str]
FinishReason = Literal["stop", "length", "cancelled"]
Privacy = Literal["local_only", "allow_remote"]


@dataclass(frozen=True)
class GenerationJob:
    """One generation request, already tokenized and budgeted."""

    prompt_tokens: tuple[int, ...]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repeat_penalty: float
    frequency_penalty: float
    presence_penalty: float
    seed: int | None
    stop: tuple[str, ...]
    # Admission order when the model is busy: higher first (the route's priority).
    priority: int = 0
    # Names the request in engine logs (request id, task); never the prompt itself.
    label: str = ""
    # What engines without a local tokenizer (remote) send: the chat messages, or the prompt.
    messages: tuple[Message, ...] = field(default=(), compare=False)
    text: str | None = None
    # The route's privacy: a remote engine refuses local_only jobs (the planner's second line).
    privacy: Privacy = "local_only"
    cancelled: threading.Event = field(default_factory=threading.Event, compare=False, init=False)

    def cancel(self) -> None:
        self.cancelled.set()

    @classmethod
    def greedy(
        cls, prompt_tokens: tuple[int, ...], *, max_tokens: int, label: str = ""
    ) -> GenerationJob:
        """A deterministic job (temperature 0, neutral penalties): what tests and benches run."""
        return cls(
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            temperature=0.0,
            top_p=1.0,
            top_k=40,
            min_p=0.0,
            repeat_penalty=1.0,
            frequency_penalty=0.0,
            presence_penalty=0.0,
            seed=1,
            stop=(),
            label=label,
        )


@dataclass(frozen=True)
class StageStats:
    """Per-stage figures of one generation: where prefill and decode ran, and how long."""

    prefill_device: str
    decode_device: str
    prefill_ms: float
    handoff_ms: float | None = None
    handoff_bytes: int | None = None
    decode_ms: float = 0.0
    decode_tokens: int = 0

    def as_dict(self) -> dict[str, float | int | str | None]:
        rate = self.decode_tokens / (self.decode_ms / 1000) if self.decode_ms > 0 else None
        return {
            "prefill_device": self.prefill_device,
            "decode_device": self.decode_device,
            "prefill_ms": round(self.prefill_ms, 2),
            "handoff_ms": None if self.handoff_ms is None else round(self.handoff_ms, 2),
            "handoff_bytes": self.handoff_bytes,
            "decode_tokens_per_s": None if rate is None else round(rate, 1),
        }


@dataclass(frozen=True)
class Delta:
    """A piece of generated text. The first delta carries the prefill figures; the last one
    carries finish_reason, the token count and the figures of every stage."""

    text: str
    finish_reason: FinishReason | None = None
    completion_tokens: int = 0
    stats: StageStats | None = None
    # On the first delta: prompt tokens whose KV was reused from an earlier request.
    cached_tokens: int = 0
    # Set on the last delta when the engine counted the prompt itself (a remote upstream).
    prompt_tokens: int | None = None


@dataclass(frozen=True)
class EngineInfo:
    """What serves a model, as shown in logs, headers and listings."""

    engine: str
    model: str
    device: str
    backend: str
    context_length: int
    source: str
    # Memory the loaded model holds, estimated: weights plus the KV cache it allocated (None:
    # nothing local, as for a remote model).
    memory_bytes: int | None = None


class Engine(ABC):
    """A loaded model able to count tokens and stream completions on its placement.

    Implementations run generation off the event loop; `stream` is cancelled by closing it
    (a disconnecting client) or by `GenerationJob.cancel`.
    """

    name: ClassVar[str]
    # Whether this engine can run prefill and decode on two different devices.
    supports_split: ClassVar[bool] = False
    # False for engines without a local tokenizer (remote): budgets then use an approximate
    # count (policies.approximate_tokens) and jobs carry messages/text instead of tokens.
    has_tokenizer: ClassVar[bool] = True
    model_id: str
    placement: Placement

    @abstractmethod
    def load(self) -> EngineInfo:
        """Load the model (blocking; the caller runs it in a thread)."""

    @abstractmethod
    def render_chat(self, messages: list[Message]) -> str:
        """Apply the model's own chat template, ending with the assistant turn's opening."""

    @abstractmethod
    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        """Tokens of `text` with this model's tokenizer (special tokens parsed)."""

    @abstractmethod
    def stream(self, job: GenerationJob) -> AsyncIterator[Delta]:
        """Generate; the final Delta has finish_reason set. Errors raise EngineError."""

    @abstractmethod
    def pending(self) -> int:
        """Jobs submitted and not finished: the queue depth the auto cost model reads."""

    @abstractmethod
    async def close(self) -> None:
        """Stop the worker and free the model."""


# (model id, model config, base dir of relative sources, placement)
EngineFactory = Callable[[str, Any, Path, Any], Engine]
_REGISTRY: dict[str, EngineFactory] = {}
_REGISTRY_LOCK = threading.Lock()


def register_engine(name: str, factory: EngineFactory) -> None:
    """Register the factory for `engine: name` in routes.yaml; duplicates are refused."""
    with _REGISTRY_LOCK:
        if name in _REGISTRY:
            raise ValueError(f"engine {name!r} is already registered")
        _REGISTRY[name] = factory


def engine_factory(name: str) -> EngineFactory:
    return _REGISTRY[name]
