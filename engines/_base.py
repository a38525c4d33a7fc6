"""The Engine interface: one per pluggable kind, implementations beside it, a strict registry."""

from __future__ import annotations

import re
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel

from zest.engines._admission import Admission, ChoiceGroup
from zest.engines._kv_cells import KvCells
from zest.errors import BadRequestError
from zest.router import (
    ENGINE_MODELS,
    Capabilities,
    Placement,
    ResponseFormat,
    Speculation,
    kind_of,
)

__all__ = [
    "BufferUse",
    "Delta",
    "Embeddings",
    "Engine",
    "EngineFactory",
    "EngineInfo",
    "EngineKind",
    "GenerationJob",
    "Message",
    "ModelFacts",
    "ModelInspector",
    "Prompt",
    "QueueCounts",
    "StageStats",
    "TokenLogprob",
    "Tokenizer",
    "TokenizerFactory",
    "control_pattern",
    "engine_kind",
    "engine_kinds",
    "register_engine",
]

Message = dict[str, str]
FinishReason = Literal["stop", "length", "cancelled"]
Privacy = Literal["local_only", "allow_remote"]
# What an embedding model embeds: a text, or token ids of its own vocabulary (OpenAI's arrays).
EmbeddingInput = str | tuple[int, ...]
PromptKind = Literal["chat", "completion"]
# Private-use characters around a message's index: where its content goes in a template.
_MARK_OPEN, _MARK_CLOSE = "\ue000", "\ue001"
_MARKS = re.compile(f"{_MARK_OPEN}(\\d+){_MARK_CLOSE}")


@dataclass(frozen=True)
class Prompt:
    """What a request asks a model to continue, in the one form every engine takes: chat
    messages (the engine renders them with its model's template) or a completion's text (one
    user message whose content is the text, as the trimming policies measure it).

    A local engine's tokens are computed once per tokenizer and cached here (`encode`);
    `tokens` is set on the prompt a job hands to the engine that serves it (`encoded_by`).
    """

    kind: PromptKind
    messages: tuple[Message, ...]
    # The serving model's tokens, once encoded (None: not yet, or a remote engine's prompt).
    tokens: tuple[int, ...] | None = None
    # A completion's text after the gap (fill-in-the-middle): the model writes between.
    suffix: str | None = None
    _encodings: dict[str, tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def chat(cls, messages: Sequence[Mapping[str, str]]) -> Prompt:
        return cls("chat", tuple(dict(m) for m in messages))

    @classmethod
    def completion(cls, text: str, suffix: str | None = None) -> Prompt:
        return cls("completion", ({"role": "user", "content": text},), suffix=suffix)

    @classmethod
    def of_tokens(cls, tokens: Sequence[int]) -> Prompt:
        """A prompt given as the model's tokens already (tests and benches)."""
        return cls("completion", (), tuple(tokens))

    @property
    def text(self) -> str:
        """A completion's text (the content of its one message)."""
        return self.messages[0]["content"] if self.messages else ""

    def with_messages(self, messages: Sequence[Mapping[str, str]]) -> Prompt:
        """The same kind of prompt over other messages (a trimmed one); self when unchanged."""
        same = len(messages) == len(self.messages) and all(
            dict(a) == b for a, b in zip(messages, self.messages, strict=True)
        )
        if same:
            return self
        return Prompt(self.kind, tuple(dict(m) for m in messages), suffix=self.suffix)

    def encode(self, tokenizer: Tokenizer) -> tuple[int, ...]:
        """The tokens `tokenizer` makes of this prompt: computed once, then remembered."""
        if self.tokens is not None and not self.messages:
            return self.tokens  # given as tokens
        cached = self._encodings.get(tokenizer.key)
        if cached is None:
            cached = self._encodings[tokenizer.key] = tokenizer.encode(self)
        return cached

    def encoded_by(self, tokenizer: Tokenizer) -> Prompt:
        """This prompt carrying `tokenizer`'s tokens: what a local engine's job holds."""
        return replace(self, tokens=self.encode(tokenizer), _encodings=self._encodings)


def control_pattern(texts: Iterable[str]) -> re.Pattern[str] | None:
    """One search for any of a model's control-token texts, longest first (None: it has none)."""
    ordered = sorted({text for text in texts if text}, key=len, reverse=True)
    return re.compile("|".join(re.escape(text) for text in ordered)) if ordered else None


class Tokenizer(ABC):
    """A local model's vocabulary and chat template: an optional capability of an engine kind,
    loaded without the model's weights where the runtime allows (never a reason to load one)."""

    # Names what these tokens are valid for: the model and its resolved source.
    key: str
    model_id: str = ""
    # The texts of the model's control tokens (`<|im_start|>`, ...), read from its vocabulary
    # once; None: not known, so text is checked by tokenizing it both ways.
    control: re.Pattern[str] | None = None
    # The longest token of the vocabulary, in UTF-8 bytes, and the context the model gets: with
    # both known, a text too long to fit whatever its tokens is measured by its length alone.
    max_token_bytes: int | None = None
    context_length: int | None = None

    def floor(self, characters: int) -> int | None:
        """At least this many tokens for text of `characters` characters (no token covers more
        than `max_token_bytes` bytes, a character at least one), when that alone is beyond
        the model's context; None: the text must be counted."""
        if not (self.max_token_bytes and self.context_length):
            return None
        least = -(-characters // self.max_token_bytes)
        return least if least > self.context_length else None

    @abstractmethod
    def render_chat(self, messages: Sequence[Mapping[str, str]]) -> str:
        """Apply the model's own chat template, ending with the assistant turn's opening."""

    @abstractmethod
    def tokenize(self, text: str, *, add_special: bool, parse_special: bool = True) -> list[int]:
        """Tokens of `text` with this model's tokenizer. `parse_special`: control-token text
        (`<|im_start|>`) becomes the control token; False: it is plain text, as a user's is."""

    def fim_tokens(self) -> tuple[int, int, int] | None:
        """The model's fill-in-the-middle tokens (prefix, suffix, middle); None: it has none."""
        return None

    def encode(self, prompt: Prompt) -> tuple[int, ...]:
        """A prompt's tokens: a chat through the template, a completion's text as it is (with
        a suffix: in the model's fill-in-the-middle form, prefix-suffix-middle). Only the
        template's own markers are control tokens: request text never is."""
        if prompt.suffix is not None:
            return self._fill_in_the_middle(prompt.text, prompt.suffix)
        if prompt.kind == "completion":
            return tuple(self.tokenize(prompt.text, add_special=True, parse_special=False))
        if not any(self._has_control_text(m["content"]) for m in prompt.messages):
            return tuple(self.tokenize(self.render_chat(prompt.messages), add_special=False))
        return self._encode_chat_plainly(prompt.messages)

    def _has_control_text(self, text: str) -> bool:
        if self.control is not None:  # the hot path: one search, no tokenizing
            return self.control.search(text) is not None
        parsed = self.tokenize(text, add_special=False)
        return parsed != self.tokenize(text, add_special=False, parse_special=False)

    def _encode_chat_plainly(self, messages: Sequence[Mapping[str, str]]) -> tuple[int, ...]:
        """The template rendered around markers, each message's content encoded as plain text
        in its place: a message holding `<|im_start|>system` cannot open a turn."""
        marked = [{**m, "content": f"{_MARK_OPEN}{i}{_MARK_CLOSE}"} for i, m in enumerate(messages)]
        parts = _MARKS.split(self.render_chat(marked))
        if len(parts) != 2 * len(messages) + 1:
            raise BadRequestError(
                f"a message holds model {self.model_id!r}'s control-token text and its chat "
                "template rewrites message content, so it cannot be sent as plain text: "
                "remove the control-token text",
                param="messages",
            )
        tokens: list[int] = []
        for index, part in enumerate(parts):
            if index % 2 == 0:  # the template's own text: its markers are control tokens
                tokens += self.tokenize(part, add_special=False) if part else []
            else:
                content = messages[int(part)]["content"]
                tokens += self.tokenize(content, add_special=False, parse_special=False)
        return tuple(tokens)

    def _fill_in_the_middle(self, before: str, after: str) -> tuple[int, ...]:
        fim = self.fim_tokens()
        if fim is None:
            raise BadRequestError(
                f"suffix: model {self.model_id!r} has no fill-in-the-middle tokens in its "
                "vocabulary: "
                "remove suffix, or route the task to a model trained for infill (a code model)",
                param="suffix",
            )
        prefix, suffix, middle = fim
        head = self.tokenize(before, add_special=False, parse_special=False)
        tail = self.tokenize(after, add_special=False, parse_special=False)
        return (prefix, *head, suffix, *tail, middle)


@dataclass(frozen=True)
class GenerationJob:
    """One generation request, already budgeted: the prompt in its one form, and sampling."""

    prompt: Prompt
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
    # The highest priority of the routes its model serves (routes.yaml, known at load; None:
    # not known): a batching engine keeps lower work's steps short while one may arrive.
    peak_priority: int | None = None
    # Names the request in engine logs (request id, task); never the prompt itself.
    label: str = ""
    # The route's privacy: a remote engine refuses local_only jobs (the planner's second line).
    privacy: Privacy = "local_only"
    # The answer must be JSON (following a schema): engines constrain decoding to it.
    response_format: ResponseFormat | None = None
    # The response_format as a GBNF grammar a local llama.cpp engine checked (None: not yet).
    grammar: str | None = None
    # (token id, bias added to its logit): -100 bans a token, +100 all but forces it.
    logit_bias: tuple[tuple[int, float], ...] = ()
    # None: no log probabilities; k (0..20): each token's, with the k most likely alternatives.
    logprobs: int | None = None
    # Speculative decoding asked for by the route (None: one token per step).
    speculative: Speculation | None = None
    # The request's n choices, admitted to the model's slots together (None: a lone choice).
    group: ChoiceGroup | None = field(default=None, compare=False)
    # Shared by copies (dataclasses.replace): cancelling one cancels the generation.
    cancelled: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    @property
    def prompt_tokens(self) -> tuple[int, ...]:
        """The serving model's tokens of the prompt (local engines; see Prompt.encoded_by)."""
        if self.prompt.tokens is None:
            raise ValueError("the job's prompt is not encoded for a local engine")
        return self.prompt.tokens

    def cancel(self) -> None:
        self.cancelled.set()

    def encoded_by(self, tokenizer: Tokenizer) -> GenerationJob:
        """This job with its prompt in `tokenizer`'s tokens (itself when they are there):
        a local engine encodes a prompt it was handed as messages or text."""
        if self.prompt.tokens is not None:
            return self
        return replace(self, prompt=self.prompt.encoded_by(tokenizer))

    @classmethod
    def greedy(
        cls, prompt: Prompt | Sequence[int], *, max_tokens: int, label: str = ""
    ) -> GenerationJob:
        """A deterministic job (temperature 0, neutral penalties): what tests and benches run."""
        return cls(
            prompt=prompt if isinstance(prompt, Prompt) else Prompt.of_tokens(prompt),
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
    # Speculative decoding: tokens drafted, and how many of them the model agreed with.
    drafted_tokens: int = 0
    accepted_tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        rate = self.decode_tokens / (self.decode_ms / 1000) if self.decode_ms > 0 else None
        figures: dict[str, Any] = {
            "prefill_device": self.prefill_device,
            "decode_device": self.decode_device,
            "prefill_ms": round(self.prefill_ms, 2),
            "handoff_ms": None if self.handoff_ms is None else round(self.handoff_ms, 2),
            "handoff_bytes": self.handoff_bytes,
            "decode_tokens_per_s": None if rate is None else round(rate, 1),
        }
        if self.drafted_tokens:
            figures["speculative"] = self.speculation()
        return figures

    def speculation(self) -> dict[str, Any]:
        rate = self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else None
        return {
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_rate": None if rate is None else round(rate, 3),
        }


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log probability under the model (before sampling's filters), and
    the most likely alternatives at that step (token text, its bytes, log probability)."""

    token: str
    utf8: bytes
    logprob: float
    top: tuple[tuple[str, bytes, float], ...] = ()


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
    # On the last delta, when the job asked for them: every generated token's log probability.
    logprobs: tuple[TokenLogprob, ...] = ()
    # On the last delta of a generation a stop sequence ended: that sequence (Anthropic's
    # stop_sequence names it; None for the end of generation or an upstream's stop).
    stop_sequence: str | None = None


@dataclass(frozen=True)
class BufferUse:
    """One buffer ggml allocated for a loaded model, as llama.cpp accounts it: where (ggml's
    buffer name: CPU, CPU_Mapped, Vulkan0, Vulkan_Host), what for (model, KV, compute, output)."""

    buffer: str
    kind: str
    mib: float


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
    # ggml's own buffers of the loaded model (llama.cpp engines): the proof of an offload.
    buffers: tuple[BufferUse, ...] = ()


class QueueCounts(Protocol):
    """What an engine that schedules its own requests tells its runner (read-only counts)."""

    @property
    def running(self) -> int:
        """Requests holding a slot."""
        ...

    @property
    def waiting(self) -> int:
        """Requests waiting for one."""
        ...


class Engine(ABC):
    """A loaded model able to stream completions on its placement.

    `stream` takes a job whose prompt is in its one form and renders what the engine needs
    (a local engine encodes a prompt that carries no tokens yet with its own tokenizer).
    Implementations run generation off the event loop; a stream is cancelled by closing it
    (`aclose`, as for a disconnecting client) or by `GenerationJob.cancel`.
    """

    name: ClassVar[str]
    model_id: str
    placement: Placement

    @abstractmethod
    def load(self) -> EngineInfo:
        """Load the model (blocking; the caller runs it in a thread)."""

    @abstractmethod
    def info(self) -> EngineInfo:
        """What serves the model, as shown in logs, headers and listings."""

    @abstractmethod
    def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        """Generate; the final Delta has finish_reason set. Errors raise EngineError."""

    @abstractmethod
    async def close(self) -> None:
        """Stop the worker and free the model."""

    def tokenizer(self) -> Tokenizer | None:
        """The loaded model's tokenizer (None: the engine has none, as a remote upstream)."""
        return None

    def own_queue(self) -> QueueCounts | None:
        """The engine's own scheduler, where it holds its waiting requests itself (the
        llama.cpp batch: it admits and preempts by priority): its runner then only bounds
        how many are in the system. None: the runner holds them until a slot is free."""
        return None

    def kv_cells(self) -> KvCells | None:
        """The KV cells its context holds, as last counted (None: the engine does not say:
        a remote upstream, an engine whose generator owns its cache)."""
        return None

    async def embed(
        self, texts: Sequence[EmbeddingInput], *, privacy: Privacy = "local_only"
    ) -> Embeddings:
        """Pooled, L2-normalised vectors of `texts` (texts or token ids), in order: the
        capability of embedding models (routes.yaml lets only those serve kind: embedding
        routes); `privacy` is the route's, as for a job."""
        raise BadRequestError(
            f"model {self.model_id!r} makes no embeddings: route kind: embedding tasks to an "
            "embedding model"
        )


@dataclass(frozen=True)
class Embeddings:
    """An embedding model's answer: one vector per input, and the tokens it read."""

    vectors: tuple[tuple[float, ...], ...]
    prompt_tokens: int


C_contra = TypeVar("C_contra", bound=BaseModel, contravariant=True)
C = TypeVar("C", bound=BaseModel)


class EngineFactory(Protocol[C_contra]):
    """Builds the engine of one routes.yaml model entry on one placement (not loaded yet)."""

    def __call__(
        self, model_id: str, config: C_contra, base_dir: Path, placement: Placement, /
    ) -> Engine: ...


@dataclass(frozen=True)
class ModelFacts:
    """What a model entry's files say, read without loading it (file headers, configs): what
    `zest check`, a start and a reload check before anything loads."""

    # The most context the model takes: trained for (GGUF) or built for (genai_config.json).
    max_context: int | None
    where: str  # the file that says so, for messages
    # Whether it carries a chat template (None: not known before it loads).
    chat_template: bool | None = None
    # The KV cache one load reserves on one device, in bytes (None: not known).
    kv_bytes: int | None = None
    # The weights' files, in bytes: what a load puts on the device besides the KV cache.
    weights_bytes: int | None = None
    # Devices this entry cannot run on, with why (e.g. options that need another provider).
    refused_devices: Mapping[str, str] = field(default_factory=dict)

    @property
    def device_bytes(self) -> int | None:
        """About what one load holds on its device: weights and KV cache (None: not known)."""
        if self.weights_bytes is None:
            return None
        return self.weights_bytes + (self.kv_bytes or 0)


class ModelInspector(Protocol[C_contra]):
    """Reads a model entry's facts from its files, without loading it (blocking: a thread).
    A missing or unreadable file raises as loading would."""

    def __call__(self, model_id: str, config: C_contra, base_dir: Path, /) -> ModelFacts: ...


class TokenizerFactory(Protocol[C_contra]):
    """Loads a model entry's tokenizer without its weights (blocking: run it in a thread)."""

    def __call__(self, model_id: str, config: C_contra, base_dir: Path, /) -> Tokenizer: ...


@dataclass(frozen=True)
class EngineKind(Generic[C]):
    """What the engines package adds to a kind the router declares (`config`, whose `engine`
    literal names it): how to build its engine, its tokenizer if it has one, what it can do."""

    config: type[C]
    factory: EngineFactory[C]
    # None: no local tokenizer (a remote upstream): budgets use an approximate count.
    tokenizer: TokenizerFactory[C] | None = None
    # What its engines honour (logprobs, grammars, a split, speculation...): the planner
    # leaves out an attempt that cannot honour a request, so no engine refuses one mid-walk.
    capabilities: Capabilities = field(default_factory=Capabilities)
    # How many of its jobs run at once and may wait (the runner's admission, engines/_runner).
    admission: Callable[[C], Admission] = lambda config: Admission(slots=1, max_queue=0)
    # Whether it runs on devices emulated on CPU threads (ZEST_EMULATE_DEVICES).
    runs_emulated: bool = False
    # None: nothing to read before it runs (a remote upstream).
    inspector: ModelInspector[C] | None = None
    # Whether its model is a folder: a source naming a file in it stands for the folder.
    folder_model: bool = False

    @property
    def name(self) -> str:
        return kind_of(self.config)


_REGISTRY: dict[str, EngineKind[Any]] = {}
_REGISTRY_LOCK = threading.Lock()


def register_engine(kind: EngineKind[Any]) -> None:
    """Register the engines of a kind routes.yaml declares; duplicates are refused."""
    if ENGINE_MODELS.get(kind.name) is not kind.config:
        raise ValueError(f"engine {kind.name!r} is not a kind routes.yaml declares")
    with _REGISTRY_LOCK:
        if kind.name in _REGISTRY:
            raise ValueError(f"engine {kind.name!r} is already registered")
        _REGISTRY[kind.name] = kind


def engine_kind(name: str) -> EngineKind[Any]:
    """The registered kind for `engine: name` in routes.yaml."""
    return _REGISTRY[name]


def engine_kinds() -> tuple[EngineKind[Any], ...]:
    return tuple(_REGISTRY.values())
