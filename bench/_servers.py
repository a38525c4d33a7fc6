"""The servers `zest bench` compares, each started on loopback with the same model file, threads
and context per stream: zest as it ships, llama.cpp's own llama-server (built from the sources of
the llama-cpp-python in use, with the same CPU flags) and the packaged llama_cpp.server."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Server", "find_llama_server", "free_port", "peers", "routes_file", "zest_server"]

SLOTS = 8  # parallel sequences for every server: the highest level measured
CONTEXT = 4096  # tokens per sequence


@dataclass(frozen=True)
class Server:
    name: str
    command: list[str]
    base: str  # the OpenAI-compatible root, …/v1
    probe: str  # answers 200 once the model is loaded
    model: str  # the `model` field of its requests
    log: str  # file name of its output in the bench folder


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def routes_file(model: Path, threads: int, folder: Path, *, context: int = CONTEXT) -> Path:
    """zest's routes for the bench: `chat` runs the model as it ships (the prefix cache on, as
    llama-server's prompt reuse is); `cached` has a cache sized for the prefix measure; `long`
    has room for the 4,096-token prompt of the prefill phase and no prefix cache; `summarize`
    and `summarize-lookup` are one summarization route without and with prompt lookup;
    `autocomplete` (priority 50) and `summarization` (0) are the mixed phase's interactive and
    batch tasks, as a team's routes would rank them, on a model of their own (`mixed`, the
    same file): a model that serves a priority-50 route keeps every lower prompt's steps short
    (docs/serving.md), which the other phases, one priority against llama-server, must not
    measure."""
    path = folder / "bench-routes.yaml"
    entry = f"engine: llamacpp, source: {model}, context_length: {context}"
    opts = f"n_threads: {threads}, parallel: {SLOTS}"
    summarize = "kind: chat, model: bench, device: cpu, max_tokens: 512, sampling: {temperature: 0}"
    long = f"engine: llamacpp, source: {model}, context_length: 8192"
    no_cache = "prefix_cache_tokens: 0"
    path.write_text(
        "version: 1\nmodels:\n"
        f"  bench: {{{entry}, options: {{{opts}}}}}\n"
        f"  cached: {{{entry}, options: {{{opts}, prefix_cache_tokens: 4096}}}}\n"
        f"  mixed: {{{entry}, options: {{{opts}}}}}\n"
        f"  long: {{{long}, options: {{n_threads: {threads}, parallel: 1, {no_cache}}}}}\n"
        "routes:\n  chat: {kind: chat, model: bench, device: cpu, max_tokens: 512}\n"
        "  cached: {kind: chat, model: cached, device: cpu, max_tokens: 512}\n"
        "  long: {kind: chat, model: long, device: cpu, max_tokens: 512}\n"
        f"  summarize: {{{summarize}}}\n"
        f"  summarize-lookup: {{{summarize}, speculative: {{method: prompt_lookup, tokens: 8}}}}\n"
        "  autocomplete: {kind: completion, model: mixed, device: cpu, priority: 50}\n"
        "  summarization: {kind: chat, model: mixed, device: cpu, priority: 0}\n"
    )
    return path


def zest_server(routes: Path, port: int) -> Server:
    from zest.bench._spawn import zest_command

    root = f"http://127.0.0.1:{port}"
    command = zest_command(
        "serve", "--routes", str(routes), "--port", str(port), "--log-level", "warning"
    )
    return Server("zest", command, f"{root}/v1", f"{root}/api/v1/ready", "chat", "zest.log")


def find_llama_server(given: Path | None = None) -> Path | None:
    """`given`, else the newest build of `make llama-server` in the zest cache, else one on
    PATH."""
    if given is not None:
        return given
    cache = os.environ.get("ZEST_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "zest"
    )
    builds = glob.glob(f"{cache}/tools/llama-server-*/llama-server")
    if builds:
        return Path(max(builds, key=os.path.getmtime))
    found = shutil.which("llama-server")
    return Path(found) if found else None


def llama_server(binary: Path, model: Path, threads: int, port: int) -> Server:
    """llama-server with `SLOTS` slots of `CONTEXT` tokens each, flash attention, its prompt
    cache on (its default), the web UI off."""
    root = f"http://127.0.0.1:{port}"
    command = [
        str(binary),
        "--model", str(model),
        "--ctx-size", str(CONTEXT * SLOTS),
        "--parallel", str(SLOTS),
        "--threads", str(threads),
        "--threads-batch", str(threads),
        "--flash-attn", "on",
        "--no-webui",
        "--host", "127.0.0.1",
        "--port", str(port),
    ]  # fmt: skip
    return Server(
        "llama-server", command, f"{root}/v1", f"{root}/health", "bench", "llama_server.log"
    )


def llama_cpp_server(model: Path, threads: int, port: int) -> Server:
    root = f"http://127.0.0.1:{port}"
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model),
        "--n_ctx", str(CONTEXT),
        "--n_threads", str(threads),
        "--flash_attn", "true",
        "--interrupt_requests", "false",
        "--host", "127.0.0.1",
        "--port", str(port),
    ]  # fmt: skip
    return Server(
        "llama_cpp.server",
        command,
        f"{root}/v1",
        f"{root}/v1/models",
        "bench",
        "llama_cpp_server.log",
    )


def peers(model: Path, threads: int, binary: Path | None, port: int | None) -> list[Server]:
    """The servers zest is compared with, on `port` and the next one (None: free ones);
    llama-server only where a binary was found."""
    ports = iter([port, port + 1] if port else [free_port(), free_port()])
    found = []
    if binary is not None:
        found.append(llama_server(binary, model, threads, next(ports)))
    found.append(llama_cpp_server(model, threads, next(ports)))
    return found
