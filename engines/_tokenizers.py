"""Tokenizers of models that may not be loaded: the optional capability of an engine kind,
loaded without the model's weights and kept in a small LRU cache.

Counting a prompt (planning, budgets) never loads an engine: it reads the model's vocabulary
and chat template alone (llama.cpp's vocab_only, ONNX Runtime GenAI's tokenizer files). A kind
without a local tokenizer (remote) has none: its prompts are counted approximately.
"""

from __future__ import annotations

import threading
from pathlib import Path

from cachetools import LRUCache

from zest.engines._base import Tokenizer, engine_kind
from zest.router import ModelConfig

__all__ = ["clear_tokenizers", "load_tokenizer"]

# Each holds a vocabulary (a few MB): enough for the models one routes file counts with.
_CACHE: LRUCache[tuple[str, str, Path], Tokenizer] = LRUCache(maxsize=8)
_LOCK = threading.Lock()


def load_tokenizer(model_id: str, config: ModelConfig, base_dir: Path) -> Tokenizer | None:
    """The tokenizer of a routes.yaml model entry, without loading its engine (blocking: run
    it in a thread); None for a kind without a local tokenizer. Cached per (model id,
    definition); errors (a missing file, a missing library) raise as loading would."""
    load = engine_kind(config.engine).tokenizer
    if load is None:
        return None
    # The entry's definition (as the engine pool fingerprints it): a changed source, revision
    # or template option reads the tokenizer afresh.
    key = (model_id, config.model_dump_json(exclude={"keep_alive", "pinned"}), base_dir)
    with _LOCK:  # one load per key, even when requests for a new model arrive together
        tokenizer = _CACHE.get(key)
        if tokenizer is None:
            tokenizer = _CACHE[key] = load(model_id, config, base_dir)
    return tokenizer


def clear_tokenizers() -> None:
    """Forget every cached tokenizer (their memory is freed as the last user lets go)."""
    with _LOCK:
        _CACHE.clear()
