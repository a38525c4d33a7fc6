"""The llama.cpp engine, in process through llama-cpp-python."""

from __future__ import annotations

import codecs
import logging
import os
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from engines._base import Delta, Engine, EngineInfo, GenerationJob, Message
from engines._sources import resolve_source
from engines._stops import StopMatcher
from engines._worker import GenerationWorker
from router import EngineError, LlamaCppModel, ServiceUnavailableError

__all__ = ["LlamaCppEngine"]

log = logging.getLogger("zest.engines")
_KV_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}  # ggml_type values llama.cpp takes for type_k/type_v
_INSTALL = "make serve (or: pip install llama-cpp-python==0.3.36, built as the README says)"


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:
        raise ServiceUnavailableError(
            f"llama-cpp-python is not installed: run {_INSTALL}", code="engine_not_installed"
        ) from exc
    return llama_cpp


class LlamaCppEngine(Engine):
    name = "llamacpp"

    def __init__(self, model_id: str, config: LlamaCppModel, base_dir: Path, device: str) -> None:
        self.model_id, self.config, self.device = model_id, config, device
        self._path = resolve_source(config.source, base_dir)
        self._llm: Any = None
        self._llama_cpp: Any = None
        self._worker: GenerationWorker | None = None
        self._formatter: Any = None

    def load(self) -> EngineInfo:
        llama_cpp = self._llama_cpp = _import_llama_cpp()
        try:
            self._llm = llama_cpp.Llama(model_path=str(self._path), **self._load_kwargs())
        except (ValueError, RuntimeError) as exc:
            raise EngineError(
                f"model {self.model_id!r}: llama.cpp could not load {self._path}: {exc}"
            ) from exc
        self._formatter = self._chat_formatter(llama_cpp)
        self._worker = GenerationWorker(self.model_id, self._generate)
        return self.info()

    def info(self) -> EngineInfo:
        return EngineInfo(
            engine=self.name,
            model=self.model_id,
            device=self.device,
            backend=f"llama.cpp (CPU, {self.config.options.n_threads or os.cpu_count()} threads)",
            context_length=self._llm.n_ctx() if self._llm else (self.config.context_length or 0),
            source=str(self._path),
        )

    def render_chat(self, messages: list[Message]) -> str:
        if self._formatter is None:
            raise EngineError(
                f"model {self.model_id!r} has no chat template: use a completion route"
            )
        return str(self._formatter(messages=messages).prompt)

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=add_special, special=True))

    def stream(self, job: GenerationJob) -> AsyncIterator[Delta]:
        if self._worker is None:
            raise ServiceUnavailableError(f"model {self.model_id!r} is not loaded")
        return self._worker.stream(job)

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
        if self._llm is not None:
            self._llm.close()
        self._llm = self._worker = None

    def _load_kwargs(self) -> dict[str, Any]:
        opts = self.config.options
        kv = _KV_TYPES[opts.kv_cache_type]
        return {
            "n_ctx": self.config.context_length or 0,
            "n_threads": opts.n_threads,
            "n_threads_batch": opts.n_threads_batch or opts.n_threads,
            "n_batch": opts.n_batch,
            "n_ubatch": opts.n_ubatch,
            "flash_attn": opts.flash_attn,
            "type_k": kv,
            "type_v": kv,
            "use_mmap": opts.mmap,
            "n_gpu_layers": 0,
            "verbose": False,
        }

    def _chat_formatter(self, llama_cpp: Any) -> Any:
        template = self._llm.metadata.get("tokenizer.chat_template")
        if not template:
            return None
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        return Jinja2ChatFormatter(
            template=template,
            eos_token=self._token_text(self._llm.token_eos()),
            bos_token=self._token_text(self._llm.token_bos()),
            add_generation_prompt=True,
        )

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return bytes(self._llm.detokenize([token], special=True)).decode("utf-8", "replace")

    # --- runs on the worker thread -------------------------------------------------------------

    def _generate(self, job: GenerationJob) -> Iterator[Delta]:
        llm = self._llm
        llm.set_seed(job.seed if job.seed is not None else random.getrandbits(31))
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        stops, produced, finish = StopMatcher(job.stop), 0, "length"
        is_eog, vocab = self._llama_cpp.llama_vocab_is_eog, llm._model.vocab
        tokens = llm.generate(list(job.prompt_tokens), **_sampling_kwargs(job))
        for token in tokens:
            if job.cancelled.is_set():
                finish = "cancelled"
                break
            if is_eog(vocab, token):
                finish = "stop"
                break
            produced += 1
            text = stops.feed(decoder.decode(bytes(llm.detokenize([token]))))
            if text:
                yield Delta(text)
            if stops.stopped:
                finish = "stop"
                break
            if produced >= job.max_tokens:
                break
        tail = stops.feed(decoder.decode(b"", final=True)) + stops.flush()
        yield Delta(tail, finish_reason=finish, completion_tokens=produced)  # type: ignore[arg-type]


def _sampling_kwargs(job: GenerationJob) -> dict[str, Any]:
    return {
        "temp": job.temperature,
        "top_p": job.top_p,
        "top_k": job.top_k,
        "min_p": job.min_p,
        "repeat_penalty": job.repeat_penalty,
        "frequency_penalty": job.frequency_penalty,
        "presence_penalty": job.presence_penalty,
        "reset": True,
    }
