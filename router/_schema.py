"""The routes.yaml schema: pydantic models that forbid unknown keys.

Everything is validated at load; nothing about the file is checked per request.
"""

from __future__ import annotations

import math
import re
import typing
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)

from zest.errors import shown
from zest.router._clients import ClientConfig
from zest.router._rules import Rule
from zest.router._schema_limits import BoundedJsonSchema

__all__ = [
    "DEVICES",
    "ENGINES",
    "ENGINE_MODELS",
    "REMOTE_ENGINE",
    "ContextPolicy",
    "Example",
    "FallbackEntry",
    "JsonSchemaFormat",
    "Lifecycle",
    "LlamaCppModel",
    "LlamaCppOptions",
    "ModelConfig",
    "OnnxGenaiModel",
    "OnnxGenaiOptions",
    "RemoteModel",
    "RemoteTimeouts",
    "ResponseCache",
    "ResponseFormat",
    "RouteConfig",
    "RouteTimeouts",
    "RoutesFile",
    "Sampling",
    "Slo",
    "Speculation",
    "format_duration",
    "kind_of",
    "parse_duration",
    "parse_seconds",
]

DEVICES: tuple[str, ...] = ("cpu", "gpu", "npu", "auto", "hybrid")
_SPLIT_DEVICE = re.compile(r"^(cpu|gpu|npu)->(cpu|gpu|npu)$")
# Task and model names appear in URLs and headers: keep them to a safe alphabet.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_BASE_URL = re.compile(r"^https?://[^/\s]+(/\S*)?$")
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
SOURCE_PATTERNS = {
    "pkg": re.compile(r"^pkg:[A-Za-z0-9._-]+/.+$"),
    "hf": re.compile(r"^hf:[A-Za-z0-9._-]+/[A-Za-z0-9._-]+/.+$"),
    "cache": re.compile(r"^cache:[A-Za-z0-9][A-Za-z0-9._-]*$"),
}
SOURCE_FORMS = {"pkg": "pkg:DISTRIBUTION/FILE", "hf": "hf:ORG/REPO/FILE", "cache": "cache:NAME"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LlamaCppOptions(_Strict):
    """Options handed to llama.cpp when the model is loaded."""

    n_threads: int | None = Field(default=None, ge=1, le=512)
    n_threads_batch: int | None = Field(default=None, ge=1, le=512)
    n_batch: int = Field(default=512, ge=1, le=65536)
    n_ubatch: int = Field(default=512, ge=1, le=65536)
    flash_attn: bool = True
    kv_cache_type: Literal["f16", "q8_0", "q4_0"] = "f16"
    mmap: bool = True
    # Sequences decoded together in one context (continuous batching; hybrid decode slots).
    parallel: int = Field(default=4, ge=1, le=64)
    # Prefix reuse: a finished request's slot keeps its prompt's KV for later requests (the
    # shared system prompt, a conversation's earlier turns); this is the longest prompt kept,
    # None: the context_length; 0: off. Kept prompts live in their idle slots' own KV streams,
    # so they reserve no memory and cost other requests nothing (engines/_prefix_cache.py).
    # Reused KV is not bit-identical to a recomputed one (see docs/serving.md).
    prefix_cache_tokens: int | None = Field(default=None, ge=0)
    # Idle slots that keep their prompt at once (at most `parallel`: one per slot), the least
    # recently used forgotten first: how many conversations stay warm.
    prefix_cache_entries: int = Field(default=8, ge=1, le=32)

    def prefix_cache_size(self, context_length: int) -> int:
        """The prefix cache's tokens for a model of this context (its default: one context)."""
        return context_length if self.prefix_cache_tokens is None else self.prefix_cache_tokens

    # Requests that may wait for a free sequence; more are refused with 429 and Retry-After.
    max_queue: int = Field(default=64, ge=0)
    # Load as an embedding model (pooled vectors, no generation): what kind: embedding routes
    # need (e.g. a GGUF of all-MiniLM-L6-v2).
    embedding: bool = False


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: object) -> float | None:
    """keep_alive: seconds as a number or text ("90s", "10m", "1h"); -1 or "forever": never."""
    if value is None or value in (-1, "forever"):
        return None
    return parse_seconds(value, "keep_alive", never=True)


def parse_seconds(value: object, key: str, *, never: bool = False) -> float:
    """`key`'s duration: seconds as a number or text ("90s", "10m", "1h"); errors name `key`
    (and, with `never`, the -1 / forever that keep_alive also takes)."""
    hint = ", or -1 / forever to never unload" if never else ""
    if isinstance(value, bool):
        raise ValueError(f"{key} must be a duration such as 30s, 10m or 1h")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"{key} must be a finite duration{hint}")
        if value < 0:
            raise ValueError(f"{key} must be >= 0 seconds{hint}")
        return float(value)
    match = _DURATION.match(str(value))
    if match is None:
        raise ValueError(
            f"invalid {key} {value!r}: write seconds or a duration such as 30s, 10m, 1h"
            + (" (or forever)" if never else "")
        )
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]


def format_duration(seconds: float) -> str:
    """Seconds as routes.yaml writes them: 5m, 90s, 1h (the largest unit that divides them)."""
    for unit in ("h", "m"):
        if seconds >= _UNIT_SECONDS[unit] and seconds % _UNIT_SECONDS[unit] == 0:
            return f"{seconds / _UNIT_SECONDS[unit]:g}{unit}"
    return f"{seconds:g}s"


class _ModelBase(_Strict):
    """What every engine's model entry has: where the model is and how much context it gets."""

    source: str
    context_length: int | None = Field(default=None, ge=16, le=1_048_576)
    # Unload the model after this long without a request (None: stay loaded).
    keep_alive: float | None = None
    # Never unloaded by the max_loaded_models cap or keep_alive (an explicit unload still works).
    pinned: bool = False
    # hf: sources only: the branch, tag or commit of the Hub repository (default: main).
    revision: str | None = Field(default=None, min_length=1)
    # The model's SHA-256 (a folder model: of its manifest, see engines._digests): checked
    # before every load, so that every replica serves the same bytes.
    sha256: str | None = None

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _check_keep_alive(cls, value: object) -> float | None:
        return parse_duration(value)

    @field_validator("source")
    @classmethod
    def _check_source(cls, source: str) -> str:
        scheme, sep, _ = source.partition(":")
        pattern = SOURCE_PATTERNS.get(scheme) if sep else None
        if pattern is not None and not pattern.match(source):
            raise ValueError(f"malformed source {source!r}: write it as {SOURCE_FORMS[scheme]}")
        if not source.strip():
            raise ValueError("empty source: give a file path, pkg:DIST/FILE or hf:ORG/REPO/FILE")
        return source

    @field_validator("sha256", mode="before")
    @classmethod
    def _check_sha256(cls, digest: object) -> str | None:
        if digest is None:
            return None
        if not isinstance(digest, str):  # YAML reads a digest of digits alone as a number
            raise ValueError(
                f"sha256 must be text, got {shown(digest, 100)}: write the 64 hex digits in "
                "quotes (sha256: '…')"
            )
        if not _SHA256.match(digest):
            raise ValueError(
                f"{shown(digest, 100)} is not a SHA-256 ({len(digest)} characters): write the 64 "
                "hex digits that `sha256sum FILE` prints for the model file (`zest models "
                "list` shows them), or remove the key"
            )
        return digest.lower()

    @field_validator("revision")
    @classmethod
    def _check_revision(cls, revision: str | None, info: ValidationInfo) -> str | None:
        source = info.data.get("source")
        if revision is not None and source is not None and not source.startswith("hf:"):
            raise ValueError(
                f"revision is for hf:ORG/REPO/FILE sources, and source is {source!r}: "
                "remove revision"
            )
        return revision


class LlamaCppModel(_ModelBase):
    engine: Literal["llamacpp"]
    options: LlamaCppOptions = LlamaCppOptions()
    # Runs in this process on the inventory's devices, with a tokenizer of its own.
    local: ClassVar[bool] = True


class OnnxGenaiOptions(_Strict):
    """Options handed to ONNX Runtime GenAI when the model is loaded."""

    # Intra-op threads of the ONNX Runtime session (default: its own choice, half the cores).
    n_threads: int | None = Field(default=None, ge=1, le=512)
    # Extra options for the execution provider the route's device selects, e.g. device_id.
    provider_options: dict[str, str] = Field(default_factory=dict)
    # Requests that may wait while one generates; more are refused with 429 and Retry-After.
    max_queue: int = Field(default=64, ge=0)


class OnnxGenaiModel(_ModelBase):
    engine: Literal["onnx-genai"]
    options: OnnxGenaiOptions = OnnxGenaiOptions()
    local: ClassVar[bool] = True


class RemoteTimeouts(_Strict):
    """httpx timeouts towards the upstream, in seconds."""

    connect_s: float = Field(default=5.0, gt=0, le=600)
    # Longest wait for the next bytes of a response (the first token included).
    read_s: float = Field(default=60.0, gt=0, le=3600)


class RemoteModel(_Strict):
    """A model served by an OpenAI-compatible upstream (vLLM, llama.cpp server, Ollama, ...)."""

    engine: Literal["remote"]
    # Runs elsewhere: no local device, no local tokenizer (budgets count approximately), and
    # nothing loaded here to keep alive or pin.
    local: ClassVar[bool] = False
    keep_alive: ClassVar[None] = None
    pinned: ClassVar[bool] = False
    base_url: str
    model: str
    # The NAME of an environment variable holding the key: a key never belongs in routes.yaml.
    api_key_env: str | None = None
    # The upstream's context, for zest's approximate budgets; None: the upstream enforces it.
    context_length: int | None = Field(default=None, ge=16, le=1_048_576)
    timeouts: RemoteTimeouts = RemoteTimeouts()
    # Retries on 429 and 5xx before the first token (Retry-After is honoured).
    retries: int = Field(default=2, ge=0, le=10)
    backoff_s: float = Field(default=0.5, ge=0, le=60)
    # A Retry-After longer than this is not waited for: the attempt fails as overloaded.
    max_retry_wait_s: float = Field(default=10.0, ge=0, le=600)
    # Requests sent to the upstream at once, and more that may wait for one of them; beyond,
    # zest answers 429 with Retry-After itself, before the upstream is asked.
    max_in_flight: int = Field(default=16, ge=1, le=4096)
    max_queue: int = Field(default=64, ge=0)

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, url: str) -> str:
        if not _BASE_URL.match(url):
            raise ValueError(
                f"invalid base_url {url!r}: write the upstream's OpenAI API root, "
                "such as http://127.0.0.1:9000/v1"
            )
        if "@" in url.split("://", 1)[1].split("/", 1)[0]:
            raise ValueError(
                "base_url carries credentials: remove them and name an environment variable "
                "holding the key with api_key_env"
            )
        return url.rstrip("/")

    @field_validator("api_key_env")
    @classmethod
    def _check_api_key_env(cls, name: str | None) -> str | None:
        if name is not None and not _ENV_NAME.match(name):
            raise ValueError(
                f"api_key_env must name an environment variable (such as UPSTREAM_API_KEY), "
                f"not hold the key: got a value of {len(name)} characters that is not a "
                "variable name"
            )
        return name


# The engine kinds, declared once: one model class per kind, whose `engine: Literal[...]` names
# it and whose `local` says whether it runs here. A new kind joins this union; its name, the
# load errors and the engines' registry derive from it (engines register a factory per name).
ModelConfig = Annotated[LlamaCppModel | OnnxGenaiModel | RemoteModel, Field(discriminator="engine")]
ModelClass = type[LlamaCppModel] | type[OnnxGenaiModel] | type[RemoteModel]


def kind_of(model: type[BaseModel]) -> str:
    """The engine kind a model class declares: its `engine` discriminator's one literal."""
    (name,) = typing.get_args(model.model_fields["engine"].annotation)
    return str(name)


def _model_classes() -> tuple[Any, ...]:
    return typing.get_args(typing.get_args(ModelConfig)[0])


ENGINE_MODELS: dict[str, ModelClass] = {kind_of(m): m for m in _model_classes()}
ENGINES: tuple[str, ...] = tuple(ENGINE_MODELS)
REMOTE_ENGINE = kind_of(RemoteModel)


class Sampling(_Strict):
    """Sampling defaults of a route; a request's own values win."""

    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    top_p: float = Field(default=0.95, gt=0.0, le=1.0)
    top_k: int = Field(default=40, ge=0)
    min_p: float = Field(default=0.05, ge=0.0, le=1.0)
    repeat_penalty: float = Field(default=1.0, gt=0.0)
    seed: int | None = None
    stop: tuple[str, ...] = ()


def _check_device_value(device: str) -> str:
    split = _SPLIT_DEVICE.match(device)
    if device in DEVICES or (split and split[1] != split[2]):
        return device
    raise ValueError(
        f"invalid device {device!r}: use cpu, gpu, npu, auto, hybrid, or PREFILL->DECODE "
        "with two different devices, such as npu->gpu"
    )


class ContextPolicy(_Strict):
    """How long a prompt may be, and what happens to one that is longer."""

    # Prompt tokens allowed, counted with the serving model's tokenizer after its chat
    # template; None: only the model's context limits the prompt.
    max_prompt_tokens: int | None = Field(default=None, ge=1, le=1_048_576)
    on_overflow: Literal["trim", "reject", "fallback"] = "reject"
    # turns: drop the oldest whole turns (chat); middle: cut the middle of the newest input.
    # Default: turns for chat routes, middle for completion routes.
    trim: Literal["turns", "middle"] | None = None


class FallbackEntry(_Strict):
    """One more attempt after the route's own: a model, placed like the route's model."""

    model: str
    # Local models: as a route's device (default auto); remote models take none.
    device: str | None = None

    @field_validator("device")
    @classmethod
    def _check_device(cls, device: str | None) -> str | None:
        return None if device is None else _check_device_value(device)


class RouteTimeouts(_Strict):
    """Per-attempt wait for the first token, and the whole request's limit, in seconds."""

    first_token_s: float | None = Field(default=None, gt=0, le=3600)
    total_s: float | None = Field(default=None, gt=0, le=86400)

    @model_validator(mode="after")
    def _check_order(self) -> RouteTimeouts:
        first, total = self.first_token_s, self.total_s
        if first is not None and total is not None and first > total:
            raise ValueError(
                f"first_token_s ({first:g}) is longer than total_s ({total:g}): the first "
                "token could never arrive in time; lower first_token_s or raise total_s"
            )
        return self


class JsonSchemaFormat(_Strict):
    """OpenAI's response_format.json_schema: a named JSON Schema the answer must follow."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    # `schema` in JSON (the attribute name would shadow BaseModel.schema).
    json_schema: BoundedJsonSchema = Field(alias="schema")
    # Accepted as OpenAI defines it; zest constrains the output to the schema either way.
    strict: StrictBool | None = None


class ResponseFormat(_Strict):
    """What the answer must be: free text, any JSON object, or JSON following a schema. The
    engines constrain decoding to it (a grammar), so it parses whatever the model's size."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_iff_json_schema(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type json_schema needs json_schema: {name, schema}")
        if self.type != "json_schema" and self.json_schema is not None:
            raise ValueError(f"json_schema is for type json_schema, not {self.type}: remove it")
        return self

    def constraint(self) -> dict[str, Any] | None:
        """The JSON Schema the output must follow (None: free text)."""
        if self.json_schema is not None:
            return self.json_schema.json_schema
        return {"type": "object"} if self.type == "json_object" else None

    def as_openai(self) -> dict[str, Any]:
        """The field as OpenAI's API spells it (what a remote upstream is sent)."""
        return self.model_dump(by_alias=True, exclude_none=True)


class Example(_Strict):
    """One few-shot exchange a chat route puts before every request's messages."""

    user: str = Field(min_length=1)
    assistant: str = Field(min_length=1)


class Speculation(_Strict):
    """Speculative decoding for a route: drafts checked by the model in one batched step."""

    # prompt_lookup: draft the tokens that followed the answer's last n-gram in the prompt
    # (where output copies input: summaries, edits, code completion).
    method: Literal["prompt_lookup"]
    tokens: int = Field(default=8, ge=1, le=32)  # drafted per step
    ngram: int = Field(default=3, ge=2, le=8)  # the longest n-gram looked up


class ResponseCache(_Strict):
    """A route's response cache: answers to determined requests (temperature 0, or a fixed
    seed) kept `ttl_s` seconds, at most `max_entries` of them (the least recently used go)."""

    ttl_s: float = Field(gt=0, le=30 * 86400)
    max_entries: int = Field(default=1024, ge=1, le=1_000_000)


_SLO_WINDOW_S = 300.0  # an slo's default window: 5m
_SLO_WINDOW_RANGE = (1.0, 86400.0)


class Slo(_Strict):
    """A route's latency objectives, judged over the requests of a sliding window."""

    # The window's 95th percentile of time to first token must not exceed this (seconds).
    ttft_p95_s: float | None = Field(default=None, gt=0, le=3600)
    # The window's median decode rate (tokens after the first per second) must not fall below.
    min_tokens_per_s: float | None = Field(default=None, gt=0, le=1_000_000)
    # Seconds of recent requests judged: a number or a duration such as 30s, 5m, 1h.
    window: float = _SLO_WINDOW_S

    @field_validator("window", mode="before")
    @classmethod
    def _check_window(cls, value: object) -> float:
        low, high = _SLO_WINDOW_RANGE
        out_of_range = ValueError(f"window must be between 1s and 24h, got {value!r}")
        if isinstance(value, int | float) and not isinstance(value, bool) and value < low:
            raise out_of_range  # before parse_seconds, whose floor is 0
        seconds = parse_seconds(value, "window")
        if not low <= seconds <= high:
            raise out_of_range
        return seconds

    def objectives(self) -> dict[str, float]:
        """The objectives set, by the name metrics and logs give them, with their targets."""
        named = {"ttft_p95": self.ttft_p95_s, "tokens_per_s": self.min_tokens_per_s}
        return {name: target for name, target in named.items() if target is not None}

    @model_validator(mode="after")
    def _check_some_objective(self) -> Slo:
        if self.ttft_p95_s is None and self.min_tokens_per_s is None:
            raise ValueError(
                "an slo needs an objective: set ttft_p95_s (seconds), min_tokens_per_s, or both"
            )
        return self


class RouteConfig(_Strict):
    # chat (messages), completion (prompt), or embedding (input texts -> vectors).
    kind: Literal["chat", "completion", "embedding"]
    model: str
    device: str = "auto"
    # Fallback policy: may a request run on the CPU when its device is missing or fails, and
    # does a failure before the first token move on to the next attempt or answer the error?
    allow_cpu: bool = True
    on_failure: Literal["next", "return_error"] = "next"
    hybrid_min_prompt_tokens: int = Field(default=512, ge=1)
    # When a model is busy: higher first, for its slots (preempting lower requests) and its
    # steps (docs/serving.md, the scheduler); then arrival order.
    priority: int = Field(default=0, ge=-100, le=100)
    max_tokens: int = Field(default=512, ge=1, le=1_048_576)
    system_prompt: str | None = None
    # Chat routes: few-shot exchanges after the system prompt, before the request's messages
    # (a small model follows an example far better than an instruction).
    examples: tuple[Example, ...] = ()
    description: str = ""
    sampling: Sampling = Sampling()
    context: ContextPolicy = ContextPolicy()
    # Attempts after the route's own (and its cpu fallback), in order.
    fallback: tuple[FallbackEntry, ...] = ()
    # local_only (the default): nothing of this route ever reaches a remote engine.
    privacy: Literal["local_only", "allow_remote"] = "local_only"
    timeouts: RouteTimeouts = RouteTimeouts()
    # The answer's format for every request of this task, whatever the client sends (e.g. an
    # extraction task that always answers in its JSON Schema).
    response_format: ResponseFormat | None = None
    # Whether requests may send tools (chat routes): deny refuses them with a 400.
    tools: Literal["allow", "deny"] = "allow"
    # Speculative decoding (llamacpp models): None, off.
    speculative: Speculation | None = None
    # Latency objectives (None: the file's top-level slo, if any); docs/slos.md.
    slo: Slo | None = None
    # Routing by content (docs/routing.md): tried top to bottom, first match
    # sends the request to its route; none: this route serves it.
    rules: tuple[Rule, ...] = ()
    # similar_to's labels: reference phrases per label (over the file's, for this route).
    phrases: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    # Answers to determined requests kept and served again without the engine (docs/teams.md);
    # None: no cache.
    cache: ResponseCache | None = None
    # Never in the file: on a copy whose privacy a local_only caller tightened (router's
    # `tightened`), that caller's name ("" when not known), so a plan says why it is local_only.
    _privacy_kept_from: str | None = PrivateAttr(default=None)
    # ...and on a copy a local_only client holds to its floor (router's `route_for_client`),
    # that client's name.
    _privacy_floor_of: str | None = PrivateAttr(default=None)

    @property
    def privacy_kept_from(self) -> str | None:
        return self._privacy_kept_from

    @property
    def privacy_floor_of(self) -> str | None:
        return self._privacy_floor_of

    @field_validator("device")
    @classmethod
    def _check_device(cls, device: str) -> str:
        return _check_device_value(device)

    @property
    def trim_mode(self) -> Literal["turns", "middle"]:
        if self.context.trim is not None:
            return self.context.trim
        return "turns" if self.kind == "chat" else "middle"

    @field_validator("system_prompt")
    @classmethod
    def _check_system_prompt(cls, prompt: str | None) -> str | None:
        if prompt is not None and not prompt.strip():
            raise ValueError("empty system_prompt: remove the key or write the instruction")
        return prompt


class Lifecycle(_Strict):
    """Which models are loaded when: a warm start, and a cap on how many stay loaded."""

    # Loaded at start, in the background (GET /v1/ready waits for them): "routes" (the first
    # attempt of every route), or a list of model ids ([] loads everything on first use).
    preload: Literal["routes"] | tuple[str, ...] = "routes"
    # Local engines loaded at once (a model on two placements counts twice); beyond it, the
    # least recently used idle, unpinned engine is unloaded. None: no cap.
    max_loaded_models: int | None = Field(default=None, ge=1, le=256)
    # A model load that takes longer is given up with 503 load_timeout (a source on a stalled
    # network share, say); the model is freed if its load ever ends.
    load_timeout_s: float = Field(default=600.0, gt=0, le=86400)


# Validation context of what validates of a file with errors (router/_load.py): its tables
# may be left empty by the entries taken out.
PARTS = "parts"


class RoutesFile(_Strict):
    version: Literal[1]
    # true: clients may name a local model by its id; all: remote ones too (their prompts then
    # leave the machine with no route's privacy to say so: zest check warns).
    expose_models: bool | Literal["all"] = False

    def exposes(self, model_id: str) -> bool:
        """Whether a client may name this model by its id."""
        model = self.models.get(model_id)
        if model is None or not self.expose_models:
            return False
        return model.local or self.expose_models == "all"

    def slo_of(self, task: str) -> Slo | None:
        """The objectives a task is judged by: its own, else the file's (generating routes)."""
        route = self.routes.get(task)
        if route is None or route.kind == "embedding":
            return None
        return route.slo or self.slo

    lifecycle: Lifecycle = Lifecycle()
    # The slo of every chat and completion route that declares none.
    slo: Slo | None = None
    # similar_to's labels for every route: reference phrases per label.
    phrases: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    models: dict[str, ModelConfig]
    routes: dict[str, RouteConfig]
    # Named callers: their keys (digests or variables), tasks, limits, privacy floor.
    clients: dict[str, ClientConfig] = Field(default_factory=dict)

    @field_validator("models", "routes", "clients")
    @classmethod
    def _check_names(cls, table: dict[str, object], info: ValidationInfo) -> dict[str, object]:
        for name in table:
            if not NAME_PATTERN.match(name):
                raise ValueError(
                    f"invalid name {name!r}: use letters, digits, '.', '_' or '-' "
                    "(it appears in URLs), starting with a letter or digit"
                )
        # The loader's sound part of a file with errors may leave a table empty (PARTS).
        if not table and not (info.context or {}).get(PARTS):
            raise ValueError("empty table: declare at least one entry")
        return table
