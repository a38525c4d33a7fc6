"""The Engine interface: one per pluggable kind, implementations beside it, a strict registry."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

__all__ = [
    "Delta",
    "Engine",
    "EngineInfo",
    "GenerationJob",
    "Message",
    "engine_factory",
    "register_engine",
]

Message = dict[str, str]
FinishReason = Literal["stop", "length", "cancelled"]


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
    # Names the request in engine logs (request id, task); never the prompt itself.
    label: str = ""
    cancelled: threading.Event = field(default_factory=threading.Event, compare=False)

    def cancel(self) -> None:
        self.cancelled.set()


@dataclass(frozen=True)
class Delta:
    """A piece of generated text; the last one of a stream carries finish_reason and counts."""

    text: str
    finish_reason: FinishReason | None = None
    completion_tokens: int = 0


@dataclass(frozen=True)
class EngineInfo:
    """What serves a model, as shown in logs, headers and listings."""

    engine: str
    model: str
    device: str
    backend: str
    context_length: int
    source: str


class Engine(ABC):
    """A loaded model able to count tokens and stream completions.

    Implementations run generation off the event loop; `stream` is cancelled by closing it
    (a disconnecting client) or by `GenerationJob.cancel`.
    """

    name: ClassVar[str]

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
    async def close(self) -> None:
        """Stop the worker and free the model."""


EngineFactory = Callable[
    [str, Any, Path, str], Engine
]  # (model id, model config, base dir, device)
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
