"""The llama.cpp engine, in process through llama-cpp-python's low-level API.

One loaded model per (model, placement). On one device, `BatchScheduler` decodes several
sequences in one context (continuous batching, prefix reuse). Split across two devices,
`HybridPipeline` prefills in one context and decodes in another, handing each sequence's KV
state over between them.

On a GPU of ggml's (a Vulkan build's Vulkan0, ...) every layer and the KV cache go to that
device; the CPU's contexts get a model of their own with no GPU device at all, so a split
between the CPU and the GPU runs on two backends for real, the KV state crossing from one's
memory to the other's. Where things went is ggml's own buffer accounting (`EngineInfo.buffers`).
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Any

from zest.engines._base import (
    BufferUse,
    Delta,
    Engine,
    EngineInfo,
    GenerationJob,
    ModelFacts,
    QueueCounts,
    Tokenizer,
    control_pattern,
)
from zest.engines._gguf import GgufError, GgufFacts, read_gguf_facts
from zest.engines._kv_cells import KvCells
from zest.engines._llama_batch import BatchScheduler
from zest.engines._llama_grammar import new_grammar_sampler, with_checked_grammar
from zest.engines._llama_log import buffers_logged, route_llama_log
from zest.engines._llama_native import (
    ContextSettings,
    NativeContext,
    load_internals,
    make_sampler,
    new_model,
    place_model,
    token_piece,
)
from zest.engines._llama_pipeline import HybridPipeline
from zest.engines._output import SequenceOutput
from zest.engines._prefix_cache import PrefixCache
from zest.engines._sources import resolve_source
from zest.errors import BadRequestError, EngineError, ServiceUnavailableError
from zest.router import Device, LlamaCppModel, Placement, kind_of

__all__ = ["LlamaCppEngine", "LlamaCppTokenizer", "gguf_facts", "inspect_llamacpp", "kv_cells"]

_KV_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}  # ggml_type values llama.cpp takes for type_k/type_v
_KV_BYTES = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}  # bytes per element, blocks included
_INSTALL = "make serve (or: scripts/install-llama-cpp.sh .venv/bin/python)"


def _import_llama_cpp() -> tuple[Any, Any]:
    try:
        import llama_cpp

        internals = load_internals()
    except ImportError as exc:
        raise ServiceUnavailableError(
            f"llama-cpp-python is not installed: run {_INSTALL}", code="engine_not_installed"
        ) from exc
    _init_backend(llama_cpp)
    return llama_cpp, internals


@functools.cache
def _init_backend(llama_cpp: Any) -> None:
    llama_cpp.llama_backend_init()  # once per process, before the first model
    route_llama_log(llama_cpp)


class LlamaCppTokenizer(Tokenizer):
    """A GGUF model's vocabulary and chat template: of a loaded model, or read from the file
    without its weights (`load`: llama.cpp's vocab_only, a few megabytes and milliseconds)."""

    def __init__(
        self, model_id: str, path: Path, lib: Any, model: Any, context_length: int | None
    ) -> None:
        self.model_id, self.key, self._model = model_id, f"{model_id} ({path})", model
        self._lib = lib
        self._formatter = _chat_formatter(lib, model)
        self.control, self.max_token_bytes = _read_vocabulary(lib, model)
        self.context_length = context_length

    @classmethod
    def load(cls, model_id: str, config: LlamaCppModel, base_dir: Path) -> LlamaCppTokenizer:
        path = resolve_source(config.source, base_dir, config.revision)
        context = config.context_length or gguf_facts(model_id, path).context_length
        llama_cpp, internals = _import_llama_cpp()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        model = _load_model(internals, model_id, path, params)
        return cls(model_id, path, llama_cpp, model, context)

    def render_chat(self, messages: Sequence[Mapping[str, str]]) -> str:
        if self._formatter is None:
            raise EngineError(
                f"model {self.model_id!r} has no chat template: use a completion route"
            )
        return str(self._formatter(messages=[dict(m) for m in messages]).prompt)

    def fim_tokens(self) -> tuple[int, int, int] | None:
        vocab = self._model.vocab
        found = tuple(
            int(get(vocab))
            for get in (self._lib.llama_vocab_fim_pre, self._lib.llama_vocab_fim_suf,
                        self._lib.llama_vocab_fim_mid)
        )  # fmt: skip
        return (found[0], found[1], found[2]) if min(found) >= 0 else None

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool = True) -> list[int]:
        add_bos = add_special and self._model.add_bos_token()
        return list(self._model.tokenize(text.encode("utf-8"), add_bos, parse_special))


def _check_bias(job: GenerationJob, model_id: str, n_vocab: int) -> None:
    bad = next((token for token, _ in job.logit_bias if token >= n_vocab), None)
    if bad is not None:
        raise BadRequestError(
            f"logit_bias: token {bad} is outside model {model_id!r}'s vocabulary "
            f"(0..{n_vocab - 1})",
            param="logit_bias",
        )


def _read_vocabulary(lib: Any, model: Any) -> tuple[re.Pattern[str] | None, int]:
    """One pass over the vocabulary (milliseconds): the texts llama.cpp parses as special
    tokens (those it caches as special: control, user-defined and unknown tokens), and the
    longest token's length in bytes (any token: user-defined ones match plain text too)."""
    special = lib.LLAMA_TOKEN_ATTR_CONTROL | lib.LLAMA_TOKEN_ATTR_USER_DEFINED
    special |= lib.LLAMA_TOKEN_ATTR_UNKNOWN
    vocab, controls, longest = model.vocab, [], 1
    for token in range(model.n_vocab()):
        piece = token_piece(lib, vocab, token, True)
        longest = max(longest, len(piece))
        if lib.llama_vocab_get_attr(vocab, token) & special:
            controls.append(piece.decode("utf-8", "replace"))
    return control_pattern(controls), longest


def gguf_facts(model_id: str, path: Path) -> GgufFacts:
    """The file's GGUF metadata, read before llama.cpp is asked to parse it."""
    try:
        return read_gguf_facts(path)
    except (GgufError, OSError) as exc:
        raise EngineError(f"model {model_id!r}: cannot read {path}: {exc}") from exc


def stream_cells(context: int) -> int:
    """Cells of one sequence's KV stream: llama.cpp rounds a stream up to a multiple of 256."""
    return -(-context // 256) * 256


def kv_cells(config: LlamaCppModel, context: int, *, split: bool = False) -> int:
    """KV cells a load reserves: a stream of `context` for each of `parallel` sequences (kept
    prompts live in idle slots' streams: no cells of their own); a split placement's decoding
    context is one unified stream of `parallel` x `context`, beside one sequence to prefill."""
    opts = config.options
    if opts.embedding:
        return context
    if split:
        return context * opts.parallel + context
    return stream_cells(context) * opts.parallel


def inspect_llamacpp(model_id: str, config: LlamaCppModel, base_dir: Path) -> ModelFacts:
    """A GGUF entry's facts from its header: trained context, chat template, KV size."""
    path = resolve_source(config.source, base_dir, config.revision)
    facts = gguf_facts(model_id, path)
    context = config.context_length or facts.context_length
    cells = kv_cells(config, context) if context else 0
    return ModelFacts(
        max_context=facts.context_length,
        where=f"the GGUF metadata of {path.name}",
        chat_template=facts.has_chat_template,
        kv_bytes=facts.kv_bytes(cells, _KV_BYTES[config.options.kv_cache_type]),
        weights_bytes=path.stat().st_size,
    )


def check_trained_context(model_id: str, wanted: int | None, facts: GgufFacts) -> None:
    """Refuse a context_length past the trained one: positions beyond it were never learnt,
    and the KV cache for them is reserved up front."""
    trained = facts.context_length
    if wanted is not None and trained is not None and wanted > trained:
        raise EngineError(
            f"model {model_id!r}: context_length {wanted} is more than the {trained} tokens "
            f"the model was trained on: lower it to {trained} or less"
        )


def threads_on(device: Device, config: LlamaCppModel) -> int:
    """llama.cpp threads on `device`: an emulated device's own, else the model's n_threads."""
    if device.emulated and device.threads:
        return device.threads
    return config.options.n_threads or os.cpu_count() or 1


def ggml_device_of(device: Device) -> str | None:
    """The ggml device (Vulkan0, ...) a llama.cpp model on `device` offloads to; None: the CPU
    (the cpu, and emulated devices, which are CPU threads)."""
    if device.name != "gpu" or device.emulated:
        return None
    return device.extra.get("ggml_device")


def check_fits(model_id: str, device: Device, weights: int, kv: int | None) -> None:
    """Refuse a load the device says it has no room for (its reported free memory), before
    llama.cpp tries: the request falls back as its route allows."""
    needed = weights + (kv or 0)
    if device.memory_free is None or needed <= device.memory_free:
        return
    raise EngineError(
        f"model {model_id!r} needs about {needed / 1e6:.0f} MB on {device.label} "
        f"({device.extra.get('ggml_device', device.name)}) for its weights and KV cache, and the "
        f"device reports {device.memory_free / 1e6:.0f} MB free: lower context_length or "
        "parallel, or route the model to another device"
    )


def _load_model(internals: Any, model_id: str, path: Path, params: Any) -> Any:
    try:
        return new_model(internals, str(path), params)
    except (ValueError, RuntimeError) as exc:
        raise EngineError(f"model {model_id!r}: llama.cpp could not load {path}: {exc}") from exc


def _chat_formatter(lib: Any, model: Any) -> Any:
    template = model.metadata().get("tokenizer.chat_template")
    if not template:
        return None
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    def text(token: int) -> str:
        if token < 0:
            return ""
        return token_piece(lib, model.vocab, token, True).decode("utf-8", "replace")

    return Jinja2ChatFormatter(
        template=template,
        eos_token=text(model.token_eos()),
        bos_token=text(model.token_bos()),
        add_generation_prompt=True,
    )


class LlamaCppEngine(Engine):
    name = kind_of(LlamaCppModel)

    def __init__(
        self, model_id: str, config: LlamaCppModel, base_dir: Path, placement: Placement
    ) -> None:
        self.model_id, self.config, self.placement = model_id, config, placement
        self._path = resolve_source(config.source, base_dir, config.revision)
        self._model: Any = None  # the decoding device's
        self._models: dict[str | None, Any] = {}  # by ggml device (None: the CPU alone)
        self._buffers: tuple[BufferUse, ...] = ()
        self._tokenizer: LlamaCppTokenizer | None = None
        self._runner: BatchScheduler | HybridPipeline | None = None
        self._contexts: list[NativeContext] = []
        self.context_length = 0

    def load(self) -> EngineInfo:
        facts = gguf_facts(self.model_id, self._path)  # not GGUF: refused before llama.cpp
        check_trained_context(self.model_id, self.config.context_length, facts)
        llama_cpp, internals = _import_llama_cpp()
        self._lib, self._internals = llama_cpp, internals
        self.context_length = self.config.context_length or facts.context_length or 0
        self._check_fits(facts)
        with buffers_logged() as buffers:
            for device in self.placement.devices:
                self._model_on(device)
            self._model = self._model_on(self.placement.decode)
            self.context_length = self.config.context_length or self._model.n_ctx_train()
            self._tokenizer = LlamaCppTokenizer(
                self.model_id, self._path, llama_cpp, self._model, self.context_length
            )
            self._runner = self._start_runner()
        self._buffers = tuple(buffers)
        return self.info()

    def _model_on(self, device: Device) -> Any:
        """The model whose layers are on `device` (loaded once per ggml device)."""
        where = ggml_device_of(device)
        if where not in self._models:
            params = self._lib.llama_model_default_params()
            params.use_mmap = self.config.options.mmap
            keep = place_model(self._lib, params, where)
            self._models[where] = _load_model(self._internals, self.model_id, self._path, params)
            del keep  # the device list is read during the load only
        return self._models[where]

    def _check_fits(self, facts: GgufFacts) -> None:
        kv_type = self.config.options.kv_cache_type
        for device in self.placement.devices:
            if ggml_device_of(device) is not None:
                kv = facts.kv_bytes(self._cells_on(device), _KV_BYTES[kv_type])
                check_fits(self.model_id, device, self._path.stat().st_size, kv)

    def _cells_on(self, device: Device) -> int:
        """KV cells the contexts on `device` reserve (as _start_runner makes them)."""
        length = self.context_length
        if not self.placement.split:
            return kv_cells(self.config, length)
        decoding = device.name == self.placement.decode.name
        return length * self.config.options.parallel if decoding else length

    def info(self) -> EngineInfo:
        return EngineInfo(
            engine=self.name,
            model=self.model_id,
            device=self.placement.label,
            backend=self._backend(),
            context_length=self.context_length,
            source=str(self._path),
            memory_bytes=self._memory_bytes(),
            buffers=self._buffers,
        )

    def _memory_bytes(self) -> int | None:
        """Weights plus every context's KV cells (K and V per layer, at the cache's type)."""
        if self._model is None:
            return None
        lib, model = self._lib, self._model.model
        heads = max(lib.llama_model_n_head(model), 1)
        kv_width = lib.llama_model_n_embd(model) * lib.llama_model_n_head_kv(model) // heads
        per_cell = 2 * lib.llama_model_n_layer(model) * kv_width
        cells = sum(ctx.settings.n_ctx for ctx in self._contexts)
        kv_bytes = per_cell * cells * _KV_BYTES[self.config.options.kv_cache_type]
        weights = sum(int(lib.llama_model_size(m.model)) for m in self._models.values())
        return weights + int(kv_bytes)

    def tokenizer(self) -> LlamaCppTokenizer | None:
        return self._tokenizer

    def own_queue(self) -> QueueCounts | None:
        """The batch scheduler holds its waiting requests (the hybrid pipeline does not)."""
        return self._runner if isinstance(self._runner, BatchScheduler) else None

    def kv_cells(self) -> KvCells | None:
        return None if self._runner is None else self._runner.kv

    def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        tokenizer = self._loaded_tokenizer()
        if self._runner is None:
            raise ServiceUnavailableError(f"model {self.model_id!r} is not loaded")
        _check_bias(job, self.model_id, self._model.n_vocab())
        return self._checked_stream(self._runner, job.encoded_by(tokenizer))

    @staticmethod
    async def _checked_stream(
        runner: BatchScheduler | HybridPipeline, job: GenerationJob
    ) -> AsyncGenerator[Delta, None]:
        """The job's deltas once its grammar is checked (in a child process, so a grammar
        that would crash or stall llama.cpp costs that process, never this one)."""
        checked = await with_checked_grammar(job)
        async with aclosing(runner.stream(checked)) as deltas:
            async for delta in deltas:
                yield delta

    async def close(self) -> None:
        # Off the event loop: joining the scheduler thread and freeing the KV cache and the
        # weights takes a while, and an unload may happen while other models serve.
        await asyncio.to_thread(self._close_now)

    def _loaded_tokenizer(self) -> LlamaCppTokenizer:
        if self._tokenizer is None:
            raise ServiceUnavailableError(f"model {self.model_id!r} is not loaded")
        return self._tokenizer

    def _close_now(self) -> None:
        runner, contexts, models = self._runner, self._contexts, list(self._models.values())
        self._runner, self._model, self._contexts, self._tokenizer = None, None, [], None
        self._models = {}
        if runner is not None:
            runner.close()
        for ctx in contexts:
            ctx.close()
        for model in models:
            model.close()

    # --- set-up ------------------------------------------------------------------------------

    def _threads(self, device: Device) -> int:
        """One on a ggml GPU, whose contexts compute every layer there (the CPU only looks up
        the token embeddings: an OpenMP team for that would spin against the driver's own
        threads and queue behind the CPU models on the compute thread)."""
        if ggml_device_of(device) is not None:
            return 1
        return threads_on(device, self.config)

    def _backend(self) -> str:
        def part(device: Device) -> str:
            offload = ggml_device_of(device)
            where = f"{offload}, all layers and KV" if offload else "CPU"
            note = ", emulated" if device.emulated else ", software" if device.software else ""
            threads = self._threads(device)
            return f"{device.name}: {where}, {threads} thread{'' if threads == 1 else 's'}{note}"

        if self.placement.split:
            return (
                f"llama.cpp hybrid: prefill {part(self.placement.prefill)} -> "
                f"decode {part(self.placement.decode)}"
            )
        return f"llama.cpp ({part(self.placement.decode)})"

    def _context(
        self, device: Device, n_seq: int, n_ctx: int, *, unified: bool = False
    ) -> NativeContext:
        """A context with a KV stream per sequence (engines/_prefix_cache.py), or one
        `unified` stream for all."""
        opts = self.config.options
        settings = ContextSettings(
            n_ctx=n_ctx,
            n_batch=opts.n_batch,
            n_ubatch=opts.n_ubatch,
            threads=self._threads(device),
            n_seq=n_seq,
            flash_attn=opts.flash_attn,
            kv_type=_KV_TYPES[opts.kv_cache_type],
            kv_unified=unified,
        )
        ctx = NativeContext(self._lib, self._internals, self._model_on(device), settings)
        self._contexts.append(ctx)
        return ctx

    def _start_runner(self) -> BatchScheduler | HybridPipeline:
        opts, length = self.config.options, self.context_length
        if self.placement.split:
            prefill = self._context(self.placement.prefill, n_seq=1, n_ctx=length)
            # Unified: llama.cpp's sequence state names its stream count, so the one-stream
            # prefill context's KV imports only into a one-stream decode context.
            decode = self._context(
                self.placement.decode,
                n_seq=opts.parallel,
                n_ctx=length * opts.parallel,
                unified=True,
            )
            return HybridPipeline(
                self.model_id,
                prefill=prefill,
                decode=decode,
                new_output=self._new_output,
                new_sampler=self._new_sampler,
                placement=self.placement,
            )
        cache_tokens = opts.prefix_cache_size(length)
        ctx = self._context(
            self.placement.decode, n_seq=opts.parallel, n_ctx=kv_cells(self.config, length)
        )
        cache = None
        if cache_tokens:
            cache = PrefixCache(ctx, kept=opts.prefix_cache_entries, max_tokens=cache_tokens)
        return BatchScheduler(
            f"{self.model_id}-{self.placement.key}",
            ctx=ctx,
            slots=opts.parallel,
            cache=cache,
            new_output=self._new_output,
            new_sampler=self._new_sampler,
            device=self.placement.decode.label,
        )

    def _new_output(self, job: GenerationJob) -> SequenceOutput:
        lib, vocab = self._lib, self._model.vocab
        return SequenceOutput(
            job,
            lambda t: token_piece(lib, vocab, t),
            lambda t: bool(lib.llama_vocab_is_eog(vocab, t)),
        )

    def _new_sampler(self, job: GenerationJob) -> Any:
        seed = job.seed if job.seed is not None else random.getrandbits(31)
        grammar, lib = job.grammar, self._lib
        lead = None if grammar is None else new_grammar_sampler(lib, self._model.vocab, grammar)
        return make_sampler(self._internals, self._model.n_vocab(), job, seed, lead)
