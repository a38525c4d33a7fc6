"""routes.yaml lifecycle keys: keep_alive durations, pinning, preload and the loaded-model cap."""

from __future__ import annotations

import pytest

from zest.errors import ConfigError
from zest.router import LlamaCppModel, parse_routes

MODELS = """\
version: 1
models:
  smollm2: {engine: llamacpp, source: m.gguf, MODEL_KEYS}
routes:
  chat: {kind: chat, model: smollm2}
"""


def config_with(model_keys: str, tail: str = "") -> str:
    return MODELS.replace("MODEL_KEYS", model_keys) + tail


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_routes(text, "routes.yaml")
    return info.value.problems


@pytest.mark.parametrize(
    ("written", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0), ("250ms", 0.25),
     ("0", 0.0), ("-1", None), ("forever", None)],
)  # fmt: skip
def test_keep_alive_takes_seconds_or_durations(written: str, seconds: float | None) -> None:
    model = parse_routes(config_with(f"keep_alive: {written}"), "routes.yaml").models["smollm2"]
    assert isinstance(model, LlamaCppModel)
    assert model.keep_alive == seconds


def test_the_defaults_keep_every_model_loaded_and_preload_the_routes() -> None:
    config = parse_routes(config_with("pinned: false"), "routes.yaml")
    model = config.models["smollm2"]
    assert isinstance(model, LlamaCppModel)
    assert (model.keep_alive, model.pinned) == (None, False)
    assert config.lifecycle.preload == "routes"
    assert config.lifecycle.max_loaded_models is None


def test_a_malformed_keep_alive_says_how_to_write_one() -> None:
    assert problems(config_with("keep_alive: 10 minutes")) == [
        "routes.yaml: models.smollm2.keep_alive: invalid keep_alive '10 minutes': write seconds "
        "or a duration such as 30s, 10m, 1h (or forever)"
    ]


def test_a_negative_keep_alive_other_than_minus_one_is_refused() -> None:
    assert problems(config_with("keep_alive: -5")) == [
        "routes.yaml: models.smollm2.keep_alive: keep_alive must be >= 0 seconds, or -1 / "
        "forever to never unload"
    ]


def test_preload_names_only_known_models() -> None:
    text = config_with("pinned: true", "lifecycle: {preload: [smollm2, smollm3]}\n")
    assert problems(text) == [
        "routes.yaml: lifecycle.preload.1: unknown model 'smollm3' (known: smollm2)"
    ]


def test_max_loaded_models_must_be_positive() -> None:
    text = config_with("pinned: true", "lifecycle: {max_loaded_models: 0}\n")
    assert problems(text) == [
        "routes.yaml: lifecycle.max_loaded_models: input should be greater than or equal to 1, "
        "got 0"
    ]


def test_preload_refuses_a_remote_model() -> None:
    text = config_with("pinned: true", "lifecycle: {preload: [upstream]}\n").replace(
        "routes:",
        "  upstream: {engine: remote, base_url: 'http://127.0.0.1:9/v1', model: m}\nroutes:",
    )
    assert problems(text) == [
        "routes.yaml: lifecycle.preload.0: 'upstream' is a remote model, nothing loads here: "
        "remove it"
    ]
