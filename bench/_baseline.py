"""llama-cpp-python on its own, without zest: the floor that zest's overhead is measured
against (`zest bench` runs it in process next to the servers it compares)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from zest.errors import ServiceUnavailableError

__all__ = ["RawChat", "raw_llama_cpp"]

_INSTALL = "make serve (or: scripts/install-llama-cpp.sh .venv/bin/python)"


class RawChat(Protocol):
    def __call__(self, messages: list[dict[str, str]], max_tokens: int) -> Iterator[str]:
        """The answer's pieces as llama-cpp-python streams them, greedy; every call starts
        from an empty KV cache (no prefix kept from the call before)."""
        ...


@contextmanager
def raw_llama_cpp(model: Path, *, threads: int, n_ctx: int = 4096) -> Iterator[RawChat]:
    """`llama_cpp.Llama` on a GGUF file with flash attention, as a chat function; the model
    is freed when the block ends."""
    try:
        import llama_cpp
    except ImportError as exc:
        raise ServiceUnavailableError(
            f"llama-cpp-python is not installed: run {_INSTALL}", code="engine_not_installed"
        ) from exc
    llm: Any = llama_cpp.Llama(
        str(model), n_ctx=n_ctx, n_threads=threads, flash_attn=True, verbose=False
    )

    def chat(messages: list[dict[str, str]], max_tokens: int) -> Iterator[str]:
        chunks = llm.create_chat_completion(
            messages, max_tokens=max_tokens, temperature=0, stream=True
        )
        try:
            for chunk in chunks:
                if piece := chunk["choices"][0]["delta"].get("content"):
                    yield str(piece)
        finally:
            llm.reset()

    try:
        yield chat
    finally:
        llm.close()
