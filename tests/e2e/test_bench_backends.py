"""`zest bench --phases backends` on this machine's build: the real server, the real model.

On the venv's CPU build the CPU is the one backend; the engine's own figures come back with
ggml's buffer accounting. (Its Vulkan figures, slow on lavapipe, are in docs/benchmarks.md; the
Vulkan lane, tests/vulkan/, proves that path on every run.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.e2e.conftest import REPO


def test_the_backends_phase_measures_the_cpu_backend(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GGML_", "ZEST_EMULATE"))}
    done = subprocess.run(
        [sys.executable, "-m", "zest", "bench", "--phases", "backends", "--rounds", "1",
         "--threads", "2", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=env, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("backend ")]
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith("backend cpu ("), done.stdout
    found = json.loads((tmp_path / "bench.json").read_text())["backends"]
    (row,) = found["rows"]
    assert (row["route"], row["device"]) == ("on-cpu", "cpu")
    assert row["prefill_tps_p50"] > 0
    assert row["decode_tps_p50"] > 0
    assert row["handoff_ms_p50"] is None
    assert {b["kind"] for b in row["buffers"]} >= {"model", "KV"}
    assert not any(b["buffer"].startswith("Vulkan") for b in row["buffers"])
    assert [d["name"] for d in found["ggml_devices"]] == ["CPU"]
