"""Loading models on threads at once leaves the process as it was: llama-cpp-python's quiet
load swapped fds 1 and 2 for /dev/null and back, and two loads at once (a tokenizer read for
counting a prompt while a reload loads the engine) could leave them on /dev/null for good,
every log line after lost (found by bench/soak.py)."""

from __future__ import annotations

import asyncio
import os
import threading

from tests.engines.conftest import REPO
from zest.engines import LlamaCppTokenizer, create_engine
from zest.router import load_routes


def stdio() -> tuple[str, str]:
    return os.readlink("/proc/self/fd/1"), os.readlink("/proc/self/fd/2")


def test_a_tokenizer_and_an_engine_loading_together_leave_stdout_and_stderr_alone() -> None:
    before = stdio()
    routes = load_routes(REPO / "routes.yaml")
    config = routes.config.models["smollm2"].model_copy(update={"context_length": 512})
    for _ in range(3):
        engine = create_engine("smollm2", config, routes.base_dir, "cpu")
        loads = [
            threading.Thread(
                target=LlamaCppTokenizer.load, args=("smollm2", config, routes.base_dir)
            ),
            threading.Thread(target=engine.load),
        ]
        for load in loads:
            load.start()
        for load in loads:
            load.join()
        asyncio.run(engine.close())
        assert stdio() == before
