"""Thin wrappers over llama.cpp's C API (through llama-cpp-python's low-level bindings).

A `NativeContext` is one llama_context on a shared model: prefill a sequence in chunks, decode a
step of one token for several sequences, and move a sequence's KV state out and in
(`llama_state_seq_get_data` / `llama_state_seq_set_data`) — the handoff of the hybrid pipeline.
All methods run on the thread that owns the context; the computations of a multi-threaded one
run on the process's compute thread (`_compute`), the owner waiting for them.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zest.engines._base import GenerationJob
from zest.engines._compute import on_compute_thread
from zest.engines._ggml_devices import GGML_TYPES, GgmlDevice, GgmlReport
from zest.engines._output import SequenceOutput
from zest.errors import EngineError

__all__ = [
    "INTERNALS_USED",
    "ContextSettings",
    "GrammarCheckedSampler",
    "NativeContext",
    "ggml_report",
    "load_internals",
    "make_sampler",
    "new_model",
    "place_model",
    "token_piece",
]

_PENALTY_LAST_N = 64

# What zest uses of llama_cpp._internals, a private module that changes without notice: each
# class, its attributes, and the parameters its methods are called with (by name for
# constructors, else the leading positional ones). This module is the only one that touches it;
# tests/unit/engines/test_llama_internals.py checks the installed llama-cpp-python against
# this table, so an upgrade that renames or reshapes any of it fails there, by name.
INTERNALS_USED: dict[str, dict[str, tuple[str, ...]]] = {
    "LlamaModel": {
        "__init__": ("path_model", "params", "verbose"),
        "model": (),
        "vocab": (),
        "n_vocab": (),
        "n_ctx_train": (),
        "add_bos_token": (),
        "token_eos": (),
        "token_bos": (),
        "metadata": (),
        "tokenize": ("text", "add_bos", "special"),
        "close": (),
    },
    "LlamaContext": {
        "__init__": ("model", "params", "verbose"),
        "ctx": (),
        "memory": (),
        "close": (),
    },
    "LlamaBatch": {
        "__init__": ("n_tokens", "embd", "n_seq_max", "verbose"),
        "batch": (),
        "close": (),
    },
    "LlamaSampler": {
        "__init__": (),
        "add_logit_bias": ("n_vocab", "logit_bias"),
        "add_penalties": (
            "n_vocab",
            "penalty_last_n",
            "penalty_repeat",
            "penalty_freq",
            "penalty_present",
        ),
        "add_greedy": (),
        "add_top_k": ("k",),
        "add_top_p": ("p", "min_keep"),
        "add_min_p": ("p", "min_keep"),
        "add_temp": ("temp",),
        "add_dist": ("seed",),
        "sample": ("ctx", "idx"),
        "close": (),
    },
}


def load_internals() -> Any:
    """llama_cpp._internals (ImportError when llama-cpp-python is not installed): imported
    here alone, see INTERNALS_USED."""
    from llama_cpp import _internals

    return _internals


def new_model(internals: Any, path: str, params: Any) -> Any:
    """A llama_model from the GGUF at `path` (ValueError or RuntimeError when llama.cpp
    cannot load it)."""
    # verbose=True: llama-cpp-python would otherwise swap fds 1 and 2 for /dev/null around
    # the load, which is not thread-safe: a tokenizer and an engine loading at once could
    # leave the process's stdout and stderr on /dev/null for good. llama.cpp's own lines
    # come through route_llama_log either way.
    return internals.LlamaModel(path_model=path, params=params, verbose=True)


def ggml_report(llama_cpp: Any) -> GgmlReport:
    """The devices ggml's backend registry holds in this process (the llama.cpp build
    llama_cpp loaded), and each backend built in with its device count."""
    lib = _libggml(llama_cpp)
    devices = tuple(_ggml_device(lib, i) for i in range(lib.ggml_backend_dev_count()))
    backends = tuple(
        (lib.ggml_backend_reg_name(reg).decode(), int(lib.ggml_backend_reg_dev_count(reg)))
        for reg in (lib.ggml_backend_reg_get(i) for i in range(lib.ggml_backend_reg_count()))
    )
    return GgmlReport(devices, backends)


def place_model(llama_cpp: Any, params: Any, device: str | None) -> Any:
    """Set llama_model_params to put every layer (and so the KV cache) on ggml device
    `device` (Vulkan0, ...), or nothing but the CPU (None). Returns what must stay alive until
    the model is loaded (the device list params point to)."""
    report = ggml_report(llama_cpp)
    if device is None:
        params.n_gpu_layers = 0
        if all(d.ggml_type in ("cpu", "accel") for d in report.devices):
            return None  # a CPU build: as it always loaded
        # An empty device list: no GPU backend in this model's contexts, so not even
        # llama.cpp's offload of large batches goes to the GPU.
        handles = (ctypes.c_void_p * 1)(None)
    else:
        handle = _libggml(llama_cpp).ggml_backend_dev_by_name(device.encode())
        if not handle:
            found = ", ".join(d.name for d in report.devices)
            raise EngineError(f"ggml has no device {device!r} (found: {found})")
        params.n_gpu_layers = -1  # all layers, the output layer included
        handles = (ctypes.c_void_p * 2)(handle, None)
    params.devices = ctypes.cast(handles, ctypes.c_void_p)
    return handles


@functools.cache
def _libggml(llama_cpp: Any) -> Any:
    """ggml's library of the llama_cpp package (already loaded by it: the same registry)."""
    folder = Path(llama_cpp.__file__).parent / "lib"
    path = next(
        (folder / n for n in ("libggml.so", "libggml.dylib", "ggml.dll") if (folder / n).exists()),
        None,
    )
    if path is None:
        raise OSError(f"no ggml library in {folder}")
    lib = ctypes.CDLL(str(path))
    void, size = ctypes.c_void_p, ctypes.c_size_t
    for name, args, result in (
        ("ggml_backend_dev_count", [], size),
        ("ggml_backend_dev_get", [size], void),
        ("ggml_backend_dev_by_name", [ctypes.c_char_p], void),
        ("ggml_backend_dev_name", [void], ctypes.c_char_p),
        ("ggml_backend_dev_description", [void], ctypes.c_char_p),
        ("ggml_backend_dev_type", [void], ctypes.c_int),
        ("ggml_backend_dev_memory", [void, ctypes.POINTER(size), ctypes.POINTER(size)], None),
        ("ggml_backend_reg_count", [], size),
        ("ggml_backend_reg_get", [size], void),
        ("ggml_backend_reg_name", [void], ctypes.c_char_p),
        ("ggml_backend_reg_dev_count", [void], size),
    ):
        function = getattr(lib, name)
        function.argtypes, function.restype = args, result
    return lib


def _ggml_device(lib: Any, index: int) -> GgmlDevice:
    dev = lib.ggml_backend_dev_get(index)
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    kind = int(lib.ggml_backend_dev_type(dev))
    return GgmlDevice(
        name=lib.ggml_backend_dev_name(dev).decode(),
        description=(lib.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
        ggml_type=GGML_TYPES[kind] if 0 <= kind < len(GGML_TYPES) else f"type {kind}",
        memory_free=free.value,
        memory_total=total.value,
    )


@dataclass(frozen=True)
class ContextSettings:
    n_ctx: int  # KV cells in all (n_ctx / n_seq per stream where kv_unified is off)
    n_batch: int
    n_ubatch: int
    threads: int
    n_seq: int
    flash_attn: bool
    kv_type: int
    # One KV stream per sequence (False): each sequence's attention runs over its own cells
    # only, and its numerics do not depend on the others' cell placement; a unified cache
    # (True) lets sequences share cells, but every row attends over every cell in use.
    kv_unified: bool = True


class NativeContext:
    def __init__(self, llama_cpp: Any, internals: Any, model: Any, settings: ContextSettings):
        self._lib, self._internals, self.settings = llama_cpp, internals, settings
        self._n_vocab = int(model.n_vocab())
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = settings.n_ctx
        params.n_batch = settings.n_batch
        params.n_ubatch = min(settings.n_ubatch, settings.n_batch)
        params.n_seq_max = settings.n_seq
        params.n_threads = params.n_threads_batch = settings.threads
        params.flash_attn_type = 1 if settings.flash_attn else 0
        params.type_k = params.type_v = settings.kv_type
        params.kv_unified = settings.kv_unified
        params.no_perf = True
        self._ctx = internals.LlamaContext(model=model, params=params, verbose=False)
        self._batch = internals.LlamaBatch(
            n_tokens=max(settings.n_batch, settings.n_seq), embd=0, n_seq_max=1, verbose=False
        )
        self.last_index = 0  # where the logits of the last prefilled token are

    def prefill(
        self,
        tokens: Sequence[int],
        seq: int,
        cancelled: threading.Event | None = None,
        start: int = 0,
    ) -> bool:
        """Evaluate `tokens` for `seq` in chunks; False when cancelled between chunks."""
        step = self.settings.n_batch
        for offset in range(0, len(tokens), step):
            if cancelled is not None and cancelled.is_set():
                return False
            chunk = tokens[offset : offset + step]
            last = offset + len(chunk) == len(tokens)
            self._fill([(t, start + offset + i, seq) for i, t in enumerate(chunk)], last_only=last)
            self._decode()
        self.last_index = (len(tokens) - 1) % step if tokens else 0
        return True

    def decode(
        self,
        entries: Sequence[tuple[int, int, int, bool]],
        *,
        while_waiting: Callable[[], None] | None = None,
    ) -> None:
        """One mixed batch of (token, position, sequence, wants logits); logits at batch index.
        `while_waiting` runs while llama.cpp computes it (on_compute_thread), else before."""
        batch = self._batch.batch
        batch.n_tokens = len(entries)
        for i, (token, pos, seq, logits) in enumerate(entries):
            batch.token[i], batch.pos[i] = token, pos
            batch.n_seq_id[i], batch.seq_id[i][0] = 1, seq
            batch.logits[i] = logits
        self._decode(while_waiting)

    def copy_stream(self, src: int, dst: int) -> None:
        """Make `dst`'s KV stream a copy of `src`'s (kv_unified off). llama.cpp copies between
        streams only whole (a partial range aborts the process), at the next decode."""
        self._lib.llama_memory_seq_cp(self._ctx.memory, src, dst, -1, -1)

    def forget_from(self, seq: int, start: int) -> None:
        self._lib.llama_memory_seq_rm(self._ctx.memory, seq, start, -1)

    def sample(self, sampler: Any, index: int) -> int:
        return int(sampler.sample(self._ctx, index))

    def sample_into(self, out: SequenceOutput, sampler: Any, index: int) -> int:
        """Sample the next token of `out`'s sequence, with its log probability when asked."""
        token = self.sample(sampler, index)
        if out.job.logprobs is not None:
            out.score(token, *self.logprobs(index, token, out.job.logprobs))
        return token

    def logprobs(self, index: int, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
        """`token`'s log probability at batch position `index` under the raw logits (before
        the sampler's filters), and the `top` most likely tokens with theirs."""
        pointer = self._lib.llama_get_logits_ith(self._ctx.ctx, index)
        logits = np.ctypeslib.as_array(pointer, shape=(self._n_vocab,)).astype(np.float64)
        peak = logits.max()
        logprobs = logits - (peak + np.log(np.exp(logits - peak).sum()))
        return float(logprobs[token]), [(t, float(logprobs[t])) for t in _best(logprobs, top)]

    def export_seq(self, seq: int) -> bytes:
        size = self._lib.llama_state_seq_get_size(self._ctx.ctx, seq)
        buffer = (ctypes.c_uint8 * size)()
        written = self._lib.llama_state_seq_get_data(self._ctx.ctx, buffer, size, seq)
        if written != size:
            raise EngineError(f"KV handoff: exported {written} of {size} bytes")
        return bytes(buffer)

    def import_seq(self, seq: int, state: bytes) -> None:
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        read = self._lib.llama_state_seq_set_data(self._ctx.ctx, buffer, len(state), seq)
        if read != len(state):
            raise EngineError(
                f"KV handoff: the decode context took {read} of {len(state)} bytes "
                "(no room for the sequence: raise context_length)"
            )

    def forget(self, seq: int) -> None:
        self._lib.llama_memory_seq_rm(self._ctx.memory, seq, -1, -1)

    def cells(self, seq: int) -> int:
        """The KV cells `seq` holds (its positions run from its first to its last: a
        sequence is only ever cut from a position to its end)."""
        memory = self._ctx.memory
        last = int(self._lib.llama_memory_seq_pos_max(memory, seq))
        if last < 0:
            return 0
        return last - int(self._lib.llama_memory_seq_pos_min(memory, seq)) + 1

    def close(self) -> None:
        self._batch.close()
        self._ctx.close()

    def _fill(self, entries: Sequence[tuple[int, int, int]], *, last_only: bool) -> None:
        batch = self._batch.batch
        batch.n_tokens = len(entries)
        for i, (token, pos, seq) in enumerate(entries):
            batch.token[i], batch.pos[i] = token, pos
            batch.n_seq_id[i], batch.seq_id[i][0] = 1, seq
            batch.logits[i] = False
        if last_only and entries:
            batch.logits[len(entries) - 1] = True

    def _decode(self, while_waiting: Callable[[], None] | None = None) -> None:
        if self.settings.threads > 1:  # an OpenMP team: on the process's one compute thread
            code = on_compute_thread(
                self._lib.llama_decode,
                self._ctx.ctx,
                self._batch.batch,
                while_waiting=while_waiting,
            )
        else:
            if while_waiting is not None:
                while_waiting()
            code = self._lib.llama_decode(self._ctx.ctx, self._batch.batch)
        if code != 0:
            raise EngineError(
                f"generation failed: llama.cpp could not decode (llama_decode returned {code})"
            )


def _best(logprobs: Any, top: int) -> list[int]:
    """The `top` most likely tokens, most likely first: a partition, then a sort of those few
    (a whole-vocabulary sort cost 3 ms a token, paid by each of a request's n choices)."""
    if not top:
        return []
    picked = np.argpartition(-logprobs, top - 1)[:top]
    return [int(t) for t in picked[np.argsort(-logprobs[picked], kind="stable")]]


def token_piece(llama_cpp: Any, vocab: Any, token: int, special: bool = False) -> bytes:
    """The bytes of one token (a piece may be part of a UTF-8 character)."""
    size = 64
    while True:
        buffer = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_token_to_piece(vocab, token, buffer, size, 0, special)
        if n >= 0:
            return buffer.raw[:n]
        size = -n  # too small: llama.cpp says how much it needs


def make_sampler(
    internals: Any, n_vocab: int, job: GenerationJob, seed: int, grammar: Any = None
) -> Any:
    """The sampler chain of one request (llama.cpp's usual order; greedy at temperature 0),
    kept inside `grammar` (a llama_sampler that keeps the output in a grammar) when given."""
    chain = _chain(internals, n_vocab, job, seed)
    if grammar is None:
        return chain
    return GrammarCheckedSampler(internals.llama_cpp, chain, grammar, n_vocab)


def _chain(internals: Any, n_vocab: int, job: GenerationJob, seed: int) -> Any:
    sampler = internals.LlamaSampler()
    if job.logit_bias:
        sampler.add_logit_bias(n_vocab, dict(job.logit_bias))
    sampler.add_penalties(
        n_vocab, _PENALTY_LAST_N, job.repeat_penalty, job.frequency_penalty, job.presence_penalty
    )
    if job.temperature == 0.0:
        sampler.add_greedy()
        return sampler
    sampler.add_top_k(job.top_k)
    sampler.add_top_p(job.top_p, 1)
    sampler.add_min_p(job.min_p, 1)
    sampler.add_temp(job.temperature)
    sampler.add_dist(seed)
    return sampler


# llama_token_data as numpy sees it: a whole vocabulary's candidates filled in one assignment.
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class GrammarCheckedSampler:
    """A sampler chain whose draw is checked against a grammar afterwards, as llama.cpp's own
    common sampler does: the grammar judges one token (microseconds) instead of the whole
    vocabulary (tens to hundreds of milliseconds for a large enum, a step every sequence of
    the batch waits for). Only when the drawn token breaks the grammar is the vocabulary
    constrained and the token drawn again. Greedy output is the same either way: an argmax
    the grammar allows is the argmax of what it allows."""

    def __init__(self, lib: Any, chain: Any, grammar: Any, n_vocab: int) -> None:
        self._lib, self._chain, self._grammar, self._n_vocab = lib, chain, grammar, n_vocab
        self._candidates = (lib.llama_token_data * n_vocab)()
        self._view = np.frombuffer(self._candidates, dtype=_TOKEN_DATA)
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._one = (lib.llama_token_data * 1)()
        self.full_checks = 0  # draws the grammar had to constrain (tests and benches read it)

    def sample(self, ctx: Any, index: int) -> int:
        pointer = self._lib.llama_get_logits_ith(ctx.ctx, index)
        logits = np.ctypeslib.as_array(pointer, shape=(self._n_vocab,))
        token = self._draw(logits, constrained=False)
        if not self._allowed(token):
            self.full_checks += 1
            token = self._draw(logits, constrained=True)
        self._lib.llama_sampler_accept(self._grammar, token)
        self._lib.llama_sampler_accept(self._chain.sampler, token)
        return token

    def close(self) -> None:
        if self._grammar is not None:
            self._lib.llama_sampler_free(self._grammar)
            self._grammar = None
        self._chain.close()

    def _draw(self, logits: Any, *, constrained: bool) -> int:
        # Every field, every draw: the chain sorts and truncates the array in place (top-k,
        # top-p), so after one draw position i no longer holds token i.
        self._view["id"] = self._ids
        self._view["logit"] = logits
        self._view["p"] = 0.0
        candidates = self._array(self._candidates, self._n_vocab)
        if constrained:
            self._lib.llama_sampler_apply(self._grammar, ctypes.byref(candidates))
        self._lib.llama_sampler_apply(self._chain.sampler, ctypes.byref(candidates))
        if candidates.selected < 0:
            raise EngineError("generation failed: the sampler chain selected no token")
        return int(candidates.data[candidates.selected].id)

    def _allowed(self, token: int) -> bool:
        """Whether the grammar allows `token` next: it sets a forbidden token's logit to -inf
        (the logit given is llama.cpp's common sampler's, so a raw -inf never reads as one)."""
        self._one[0].id, self._one[0].logit, self._one[0].p = token, 1.0, 0.0
        self._lib.llama_sampler_apply(self._grammar, ctypes.byref(self._array(self._one, 1)))
        return bool(self._one[0].logit != -np.inf)

    def _array(self, data: Any, size: int) -> Any:
        return self._lib.llama_token_data_array(
            data=ctypes.cast(data, ctypes.POINTER(self._lib.llama_token_data)),
            size=size,
            selected=-1,
            sorted=False,
        )
