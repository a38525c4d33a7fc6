"""routes.yaml `slo` keys: objectives, the window's duration, the file's default, and errors
that name the file, the key path and the fix."""

from __future__ import annotations

import pytest

from zest.errors import ConfigError
from zest.router import Slo, format_duration, parse_routes

FILE = """\
version: 1
TOP
models:
  smollm2: {engine: llamacpp, source: m.gguf}
  minilm: {engine: llamacpp, source: e.gguf, options: {embedding: true}}
routes:
  chat: {kind: chat, model: smollm2, SLO}
  autocomplete: {kind: completion, model: smollm2}
  embed: {kind: embedding, model: minilm}
"""


def routes_with(slo: str, top: str = "") -> str:
    return FILE.replace("SLO", slo).replace("TOP", top)


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_routes(text, "routes.yaml")
    return info.value.problems


def test_both_objectives_and_a_written_window() -> None:
    text = routes_with("slo: {ttft_p95_s: 5, min_tokens_per_s: 10, window: 2m}")
    config = parse_routes(text, "r")
    slo = config.routes["chat"].slo
    assert slo == Slo(ttft_p95_s=5, min_tokens_per_s=10, window=120)
    assert slo.objectives() == {"ttft_p95": 5.0, "tokens_per_s": 10.0}


@pytest.mark.parametrize(
    ("keys", "objectives", "window"),
    [("ttft_p95_s: 0.5", {"ttft_p95": 0.5}, 300.0),
     ("min_tokens_per_s: 20, window: 90", {"tokens_per_s": 20.0}, 90.0),
     ("ttft_p95_s: 2, window: 1h", {"ttft_p95": 2.0}, 3600.0)],
)  # fmt: skip
def test_one_objective_is_enough_and_the_window_defaults_to_five_minutes(
    keys: str, objectives: dict[str, float], window: float
) -> None:
    slo = parse_routes(routes_with(f"slo: {{{keys}}}"), "r").routes["chat"].slo
    assert slo is not None
    assert (slo.objectives(), slo.window) == (objectives, window)


def test_an_slo_without_an_objective_says_which_to_set() -> None:
    assert problems(routes_with("slo: {window: 5m}")) == [
        "routes.yaml: routes.chat.slo: an slo needs an objective: set ttft_p95_s (seconds), "
        "min_tokens_per_s, or both"
    ]


@pytest.mark.parametrize(
    ("window", "message"),
    [("5 minutes", "invalid window '5 minutes': write seconds or a duration such as 30s, 10m, 1h"),
     ("0s", "window must be between 1s and 24h, got '0s'"),
     ("2d", "invalid window '2d': write seconds or a duration such as 30s, 10m, 1h"),
     ("25h", "window must be between 1s and 24h, got '25h'"),
     ("-5", "window must be between 1s and 24h, got -5"),
     ("0.5", "window must be between 1s and 24h, got 0.5")],
)  # fmt: skip
def test_a_bad_window_says_how_to_write_one(window: str, message: str) -> None:
    assert problems(routes_with(f"slo: {{ttft_p95_s: 5, window: {window}}}")) == [
        f"routes.yaml: routes.chat.slo.window: {message}"
    ]


def test_targets_must_be_positive_and_keys_known() -> None:
    assert problems(routes_with("slo: {ttft_p95_s: 0, min_tokens_per_s: 10}")) == [
        "routes.yaml: routes.chat.slo.ttft_p95_s: input should be greater than 0, got 0"
    ]
    assert problems(routes_with("slo: {ttft_p95: 5}")) == [
        "routes.yaml: routes.chat.slo.ttft_p95: unknown key 'ttft_p95': did you mean "
        "'ttft_p95_s'? (allowed: min_tokens_per_s, ttft_p95_s, window)"
    ]


def test_an_embedding_route_has_no_tokens_to_judge() -> None:
    text = routes_with("").replace(
        "embed: {kind: embedding, model: minilm}",
        "embed: {kind: embedding, model: minilm, slo: {ttft_p95_s: 1}}",
    )
    assert problems(text) == [
        "routes.yaml: routes.embed.slo: an embedding route streams no tokens, so it has no time "
        "to first token or decode rate to judge: remove the key"
    ]


def test_the_files_slo_judges_every_generating_route_without_its_own() -> None:
    text = routes_with("slo: {ttft_p95_s: 1}", top="slo: {min_tokens_per_s: 10, window: 1m}")
    config = parse_routes(text, "r")
    assert config.slo_of("chat") == Slo(ttft_p95_s=1)
    assert config.slo_of("autocomplete") == Slo(min_tokens_per_s=10, window=60)
    assert config.slo_of("embed") is None
    assert config.slo_of("nowhere") is None


def test_without_any_slo_no_route_is_judged() -> None:
    config = parse_routes(routes_with(""), "r")
    assert [config.slo_of(task) for task in config.routes] == [None, None, None]


@pytest.mark.parametrize(
    ("seconds", "written"),
    [(300, "5m"), (90, "90s"), (3600, "1h"), (5400, "90m"), (1.5, "1.5s"), (7200, "2h")],
)
def test_a_window_is_shown_as_routes_yaml_writes_it(seconds: float, written: str) -> None:
    assert format_duration(seconds) == written
