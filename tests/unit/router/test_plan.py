"""Resolving a task name into a Plan (pure: no engines involved)."""

from __future__ import annotations

import pytest

from router import (
    BadRequestError,
    ServiceUnavailableError,
    UnknownTaskError,
    parse_routes,
    resolve,
)

ROUTES = parse_routes(
    """\
version: 1
models:
  small: {engine: llamacpp, source: m.gguf}
routes:
  chat: {kind: chat, model: small}
  autocomplete: {kind: completion, model: small, device: cpu}
  accel: {kind: chat, model: small, device: npu}
  split: {kind: chat, model: small, device: hybrid}
""",
    "routes.yaml",
)


def test_auto_takes_the_cpu_when_it_is_all_there_is() -> None:
    plan = resolve("chat", "chat", ROUTES, {"cpu"})
    assert plan.first.model == "small"
    assert plan.first.device == "cpu"
    assert plan.first.reason == "device auto: cpu is the fastest device found (cpu)"


def test_auto_prefers_a_gpu() -> None:
    assert resolve("chat", "chat", ROUTES, {"cpu", "gpu"}).first.device == "gpu"


def test_a_pinned_device_is_kept() -> None:
    plan = resolve("autocomplete", "completion", ROUTES, {"cpu", "gpu"})
    assert (plan.first.device, plan.first.reason) == ("cpu", "device pinned to cpu by the route")


def test_a_missing_device_is_an_error_never_a_silent_cpu_run() -> None:
    with pytest.raises(ServiceUnavailableError) as info:
        resolve("accel", "chat", ROUTES, {"cpu"})
    assert info.value.status_code == 503
    assert info.value.code == "device_unavailable"
    assert info.value.message == (
        "route 'accel' needs device 'npu' but npu is not available (found: cpu); no fallback "
        "is configured, so the request was not run elsewhere: set routes.accel.device to one "
        "of the devices found"
    )


def test_hybrid_needs_both_devices() -> None:
    with pytest.raises(ServiceUnavailableError, match="npu and gpu are not available"):
        resolve("split", "chat", ROUTES, {"cpu"})
    assert resolve("split", "chat", ROUTES, {"cpu", "npu", "gpu"}).first.device == "npu->gpu"


def test_an_unknown_task_lists_the_known_ones() -> None:
    with pytest.raises(UnknownTaskError) as info:
        resolve("chatt", "chat", ROUTES, {"cpu"})
    assert info.value.status_code == 404
    assert info.value.message == (
        "unknown task 'chatt': use one of accel, autocomplete, chat, split "
        "(GET /v1/models lists them)"
    )


def test_the_endpoint_must_match_the_route_kind() -> None:
    with pytest.raises(BadRequestError) as info:
        resolve("autocomplete", "chat", ROUTES, {"cpu"})
    assert info.value.message == (
        "task 'autocomplete' is a completion route: call /v1/completions "
        "or POST /v1/tasks/autocomplete instead"
    )


def test_models_are_addressable_only_when_exposed() -> None:
    with pytest.raises(UnknownTaskError):
        resolve("small", "chat", ROUTES, {"cpu"})
    exposed = ROUTES.model_copy(update={"expose_models": True})
    plan = resolve("small", "completion", exposed, {"cpu"})
    assert (plan.route.kind, plan.first.model, plan.first.device) == ("completion", "small", "cpu")
