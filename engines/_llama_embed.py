"""Embedding models on llama.cpp (a GGUF loaded with options.embedding: true, such as
all-MiniLM-L6-v2): pooled, normalised vectors through llama-cpp-python's own `Llama.embed`,
which batches the inputs of a request and pools them as the model's metadata says."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

from zest.engines._base import (
    Delta,
    Embeddings,
    Engine,
    EngineInfo,
    GenerationJob,
    Privacy,
)
from zest.engines._compute import compute_executor
from zest.engines._llamacpp import (
    _import_llama_cpp,
    check_trained_context,
    gguf_facts,
    threads_on,
)
from zest.engines._sources import resolve_source
from zest.errors import (
    BadRequestError,
    ContextLengthExceededError,
    EngineError,
    ServiceUnavailableError,
)
from zest.router import LlamaCppModel, Placement, kind_of

__all__ = ["LlamaCppEmbedder"]

# llama-cpp-python's quiet load swaps fds 1 and 2 for /dev/null and back: two at once would
# restore the wrong ones.
_QUIET_LOAD = threading.Lock()


class LlamaCppEmbedder(Engine):
    name = kind_of(LlamaCppModel)

    def __init__(
        self, model_id: str, config: LlamaCppModel, base_dir: Path, placement: Placement
    ) -> None:
        self.model_id, self.config, self.placement = model_id, config, placement
        self._path = resolve_source(config.source, base_dir, config.revision)
        self._llama: Any = None
        self._lock = asyncio.Lock()  # one embedding batch at a time: a context is not shared
        self.context_length = 0

    def load(self) -> EngineInfo:
        facts = gguf_facts(self.model_id, self._path)  # not GGUF: refused before llama.cpp
        check_trained_context(self.model_id, self.config.context_length, facts)
        llama_cpp, _ = _import_llama_cpp()
        # An encoder reads each input whole in one batch: batch sizes are the context.
        context = self.config.context_length or facts.context_length or 512
        try:
            with _QUIET_LOAD:  # its quiet load swaps fds 1 and 2: one at a time
                self._llama = llama_cpp.Llama(
                    str(self._path),
                    embedding=True,
                    n_ctx=context,
                    n_batch=context,
                    n_ubatch=context,
                    n_threads=threads_on(self.placement.decode, self.config),
                    n_gpu_layers=0,
                    verbose=False,
                )
        except (ValueError, RuntimeError) as exc:
            raise EngineError(
                f"model {self.model_id!r}: llama.cpp could not load {self._path}: {exc}"
            ) from exc
        self.context_length = context
        return self.info()

    def info(self) -> EngineInfo:
        return EngineInfo(
            engine=self.name,
            model=self.model_id,
            device=self.placement.decode.label,
            backend=f"llama.cpp embeddings ({self.placement.decode.label})",
            context_length=self.context_length,
            source=str(self._path),
            memory_bytes=self._path.stat().st_size if self._path.is_file() else None,
        )

    async def embed(self, texts: Sequence[str], *, privacy: Privacy = "local_only") -> Embeddings:
        llama = self._loaded()
        async with self._lock:
            # On the compute thread, as every llama.cpp model's steps (engines/_compute.py).
            loop = asyncio.get_running_loop()
            work = functools.partial(self._embed_now, llama, list(texts))
            return await loop.run_in_executor(compute_executor(), work)

    def _embed_now(self, llama: Any, texts: list[str]) -> Embeddings:
        for index, text in enumerate(texts):  # refuse before any work: say which input
            tokens = len(llama.tokenize(text.encode("utf-8"), add_bos=True, special=False))
            if tokens > self.context_length:
                raise ContextLengthExceededError(
                    f"input {index} is {tokens} tokens, more than model {self.model_id!r}'s "
                    f"context of {self.context_length}: split it into shorter inputs",
                    param="input",
                )
        vectors, used = llama.embed(texts, normalize=True, truncate=False, return_count=True)
        return Embeddings(tuple(tuple(float(x) for x in v) for v in vectors), int(used))

    def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        raise BadRequestError(
            f"model {self.model_id!r} is an embedding model: it makes no text; route it with "
            "kind: embedding"
        )

    async def close(self) -> None:
        llama, self._llama = self._llama, None
        if llama is not None:
            await asyncio.to_thread(llama.close)

    def _loaded(self) -> Any:
        if self._llama is None:
            raise ServiceUnavailableError(f"model {self.model_id!r} is not loaded")
        return self._llama
