"""The warm start's failures, on a machine where no device can run the model (nothing loads:
the failures come before any engine is built)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from zest.engines import Inventory
from zest.gateway.serving._runtime import Runtime
from zest.router import Device, LoadedRoutes, parse_routes

ROUTES = """\
version: 1
lifecycle: {preload: [smollm2]}
models:
  smollm2: {engine: llamacpp, source: m.gguf}
routes:
  chat: {kind: chat, model: smollm2, device: cpu}
"""
NO_ENGINE = Inventory({"cpu": Device("cpu", frozenset(), "test")}, ())
NO_DEVICE = (
    "preload smollm2: model 'smollm2': no device here can run engine 'llamacpp' "
    "(GET /v1/system-info lists the devices)"
)


def runtime() -> tuple[Runtime, list[str]]:
    routes = LoadedRoutes(parse_routes(ROUTES, "routes.yaml"), Path("/srv/routes.yaml"))
    fatal: list[str] = []
    return Runtime(routes, NO_ENGINE, on_fatal=fatal.append), fatal


def test_a_listed_model_no_device_can_run_fails_the_start() -> None:
    started, fatal = runtime()
    started.state = "loading"
    asyncio.run(started._warm_start())
    assert started.state == "failed"
    assert started.preload_errors == [NO_DEVICE]
    assert fatal == [NO_DEVICE.removeprefix("preload smollm2: ")]


def test_a_table_whose_listed_model_cannot_load_is_refused_by_staging() -> None:
    reloaded, fatal = runtime()
    for _ in range(2):  # each staging reports its own table's failures, not the last ones too
        staged = asyncio.run(reloaded.stage(reloaded.routes))
        assert (staged.problems, staged.warnings, staged.leases) == ([NO_DEVICE], [], [])
    assert fatal == []
    assert reloaded.state == "starting"


def test_exposed_models_are_not_preloaded_unless_listed() -> None:
    text = """\
version: 1
expose_models: true
lifecycle: {preload: routes}
models:
  used: {engine: llamacpp, source: u.gguf}
  spare: {engine: llamacpp, source: s.gguf}
routes:
  chat: {kind: chat, model: used, device: cpu}
"""
    routes = LoadedRoutes(parse_routes(text, "routes.yaml"), Path("/srv/routes.yaml"))
    cpu = Inventory({"cpu": Device("cpu", frozenset({"llamacpp"}), "test")}, ())
    targets = Runtime(routes, cpu).preload_targets(routes)
    assert [(t.model_id, t.why) for t in targets] == [("used", "route chat")]
