"""What the hardware allows: llama.cpp's own step times on a GGUF file, with nothing around them.

`zest bench` measures these in the same run as the servers it compares, so each server's figure
reads as a fraction of the limit of that machine at that moment: the time of one `llama_decode`
of one token for each of k sequences (a decode step of k streams) and the prompt tokens per
second of a prefill. No sampling, no detokenizing, no server: only the forward passes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from zest.engines import (
    ContextSettings,
    NativeContext,
    load_internals,
    new_model,
    route_llama_log,
)

__all__ = ["Ceiling", "measure_ceiling"]

_F16 = 1  # ggml_type of the KV cache zest uses by default
_HISTORY = 48  # tokens each sequence holds before the timed steps: a short prompt's worth


@dataclass(frozen=True)
class Ceiling:
    # The fastest of the timed runs, not their median: a limit, and on a shared machine the
    # slow runs are other work's, not the hardware's.
    decode_step_ms: dict[int, float]  # k sequences -> ms of one step (k tokens)
    prefill_tps: dict[int, float]  # prompt tokens -> prefill tokens/s of one such prompt

    def decode_tps(self, streams: int) -> float:
        """Aggregate tokens/s of `streams` sequences decoding together, at the limit."""
        return streams * 1000 / self.decode_step_ms[streams]

    def aggregate_tps(self, streams: int, prompt_tokens: int, new_tokens: int) -> float:
        """Aggregate tokens/s of `streams` requests arriving together, at the limit: their
        prompts prefilled together (as fast as one long prompt), then decoded in lockstep."""
        prefill_s = streams * prompt_tokens / self._prefill_rate(streams * prompt_tokens)
        decode_s = (new_tokens - 1) * self.decode_step_ms[streams] / 1000
        return streams * new_tokens / (prefill_s + decode_s)

    def ttft_ms(self, prompt_tokens: int) -> float:
        """The least time to a first token: the prompt's prefill, its last row's logits
        giving the first token."""
        return prompt_tokens / self._prefill_rate(prompt_tokens) * 1000

    def _prefill_rate(self, tokens: int) -> float:
        """The rate measured at the nearest prompt size."""
        nearest = min(self.prefill_tps, key=lambda size: abs(size - tokens))
        return self.prefill_tps[nearest]


def measure_ceiling(
    model: Path,
    *,
    threads: int,
    streams: list[int],
    prompt_sizes: list[int],
    steps: int = 24,
    rounds: int = 3,
) -> Ceiling:
    """Step times on `model` with zest's default context settings (flash attention, f16 KV,
    batches of 512, a unified KV cache of 4,096 cells)."""
    import llama_cpp

    internals = load_internals()  # llama-cpp-python's private module, imported by engines alone
    route_llama_log(llama_cpp)  # llama.cpp's lines go to logging, not over the bench's output
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    weights = new_model(internals, str(model), params)  # as the engine loads it
    settings = ContextSettings(
        n_ctx=4096,
        n_batch=512,
        n_ubatch=512,
        threads=threads,
        n_seq=max(streams),
        flash_attn=True,
        kv_type=_F16,
    )
    ctx = NativeContext(llama_cpp, internals, weights, settings)
    try:
        count = max(*prompt_sizes, _HISTORY + steps + 1)  # the steps run past the history
        tokens = _ordinary_tokens(int(weights.n_vocab()), count)
        prefill = {size: _prefill_rate(ctx, tokens[:size], rounds) for size in prompt_sizes}
        decode = {k: _step_ms(ctx, tokens, k, steps) for k in streams}
    finally:
        ctx.close()
        weights.close()
    return Ceiling(decode, prefill)


def _ordinary_tokens(n_vocab: int, count: int) -> list[int]:
    """Token ids spread over the vocabulary past its special tokens: the forward pass costs
    the same for any ids, but a repeated one could let a cache shortcut it."""
    return [1000 + (i * 7919) % (n_vocab - 1000) for i in range(count)]


def _prefill_rate(ctx: NativeContext, tokens: list[int], rounds: int) -> float:
    times = []
    for _ in range(rounds + 1):  # the first is untimed: first-call costs
        ctx.forget(0)
        start = time.perf_counter()
        ctx.prefill(tokens, 0)
        times.append(time.perf_counter() - start)
    ctx.forget(0)
    return len(tokens) / min(times[1:])


def _step_ms(ctx: NativeContext, tokens: list[int], k: int, steps: int) -> float:
    for seq in range(k):
        ctx.prefill(tokens[:_HISTORY], seq)
    times = []
    for step in range(steps + 1):  # the first is untimed
        position = _HISTORY + step
        entries = [
            (tokens[(position + seq) % len(tokens)], position, seq, True) for seq in range(k)
        ]
        start = time.perf_counter()
        ctx.decode(entries)
        times.append(time.perf_counter() - start)
    for seq in range(k):
        ctx.forget(seq)
    return min(times[1:]) * 1000
