"""Embedding models on llama.cpp (a GGUF loaded with options.embedding: true, such as
all-MiniLM-L6-v2): pooled, normalised vectors through llama-cpp-python's own `Llama.embed`,
which batches the inputs of a request and pools them as the model's metadata says. An input
is a text or token ids of the model's vocabulary (OpenAI's token arrays), embedded as sent."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

from zest.engines._base import (
    Delta,
    EmbeddingInput,
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

    async def embed(
        self, texts: Sequence[EmbeddingInput], *, privacy: Privacy = "local_only"
    ) -> Embeddings:
        llama = self._loaded()
        async with self._lock:
            # On the compute thread, as every llama.cpp model's steps (engines/_compute.py).
            loop = asyncio.get_running_loop()
            work = functools.partial(self._embed_now, llama, list(texts))
            return await loop.run_in_executor(compute_executor(), work)

    def _embed_now(self, llama: Any, inputs: list[EmbeddingInput]) -> Embeddings:
        # Every input's tokens, refused before any work saying which input is wrong.
        tokens = [self._tokens(llama, index, item) for index, item in enumerate(inputs)]
        # Llama.embed takes only text, which it tokenizes itself (as here, with the BOS): it
        # is given each input's index as its text, and its tokenize, shadowed for this call
        # (one batch at a time: self._lock), gives back the tokens above: token ids are
        # embedded as sent, and a text is tokenized once.
        llama.tokenize = lambda text, *_, **__: tokens[int(text)]
        try:
            vectors, used = llama.embed(
                [str(index) for index in range(len(tokens))],
                normalize=True,
                truncate=False,
                return_count=True,
            )
        finally:
            del llama.tokenize
        return Embeddings(tuple(tuple(float(x) for x in v) for v in vectors), int(used))

    def _tokens(self, llama: Any, index: int, item: EmbeddingInput) -> list[int]:
        if isinstance(item, str):
            tokens: list[int] = llama.tokenize(item.encode("utf-8"), add_bos=True, special=False)
        else:
            tokens = list(item)
            vocabulary = int(llama.n_vocab())
            bad = next((token for token in tokens if not 0 <= token < vocabulary), None)
            if bad is not None:
                raise BadRequestError(
                    f"input {index}: token id {bad} is not in the vocabulary of model "
                    f"{self.model_id!r} (ids 0 to {vocabulary - 1}): send token ids of this "
                    "model's own tokenizer, or the text",
                    param="input",
                )
        if len(tokens) > self.context_length:
            raise ContextLengthExceededError(
                f"input {index} is {len(tokens)} tokens, more than model {self.model_id!r}'s "
                f"context of {self.context_length}: split it into shorter inputs",
                param="input",
            )
        return tokens

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
