"""Every problem of a routes file in one run: a route with a schema error still has the names
it refers to checked (its model, fallback models, rules' targets and their conditions' routes),
at the key paths the file has, worded as the full check words them."""

from __future__ import annotations

from pathlib import Path

import pytest

from zest.errors import ConfigError
from zest.router import check_routes, parse_routes

HEAD = """\
version: 1
models:
  small: {engine: llamacpp, source: small.gguf}
  spare: {engine: llamacpp, source: spare.gguf}
routes:
  other: {kind: chat, model: small}
"""


def problems(routes: str) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        parse_routes(HEAD + routes, "routes.yaml")
    return [problem.removeprefix("routes.yaml: ") for problem in refused.value.problems]


def test_a_typo_does_not_hide_an_unknown_model_or_target_in_the_same_route() -> None:
    assert problems(
        "  chat:\n    kind: chat\n    model: smal\n    max_tokns: 64\n"
        "    rules: [{id: code, when: {keywords_any: [def]}, to: elsewhere}]\n"
    ) == [
        "routes.chat.max_tokns: unknown key 'max_tokns': did you mean 'max_tokens'? (allowed: "
        "allow_cpu, cache, context, description, device, examples, fallback, "
        "hybrid_min_prompt_tokens, kind, max_tokens, model, on_failure, phrases, priority, "
        "privacy, response_format, rules, sampling, slo, speculative, system_prompt, timeouts, "
        "tools)",
        "routes.chat.model: unknown model 'smal' (known: small, spare)",
        "routes.chat.rules.0.to: unknown route 'elsewhere' (known: chat, other)",
    ]


def test_rules_and_fallback_entries_keep_their_numbers_around_a_broken_one() -> None:
    found = problems(
        "  chat:\n    kind: chat\n    model: small\n"
        "    fallback: [{model: spare, devic: cpu}, {model: sapre}]\n"
        "    rules:\n"
        "      - {id: a, when: {min_char: 3}, to: other}\n"
        "      - {id: b, when: {queued_over: {route: chta, requests: 1}}, to: other}\n"
        "      - {id: c, when: {any: [{similar_to: {via: embd, label: x, min_score: 0.5}}]},"
        " to: other}\n"
    )
    assert found[2:] == [
        "routes.chat.fallback.1.model: unknown model 'sapre' (known: small, spare)",
        "routes.chat.rules.1.when.queued_over.route: unknown route 'chta': did you mean 'chat'?",
        "routes.chat.rules.2.when.any.0.similar_to.via: unknown route 'embd' (known: chat, other)",
    ]
    assert [problem.split(":")[0] for problem in found[:2]] == [
        "routes.chat.fallback.0.devic",
        "routes.chat.rules.0.when.min_char",
    ]


def test_a_route_referring_to_a_broken_one_has_its_names_checked() -> None:
    """`other2` is sound, but its rule sends to `chat`, which has an error: its other names
    are checked all the same."""
    assert problems(
        "  chat: {kind: chat, model: small, max_tokns: 3}\n"
        "  other2:\n    kind: chat\n    model: small\n    fallback: [{model: nope}]\n"
        "    rules: [{id: x, when: {min_chars: 1}, to: chat}]\n"
    )[1:] == ["routes.other2.fallback.0.model: unknown model 'nope' (known: small, spare)"]


def test_what_cannot_be_salvaged_says_only_its_schema_error() -> None:
    assert problems("  chat: {kind: chatt, model: nope}\n") == [
        "routes.chat.kind: invalid value 'chatt' (expected one of: chat, completion, embedding)"
    ]


def test_the_models_a_broken_route_needs_are_judged_as_needed(tmp_path: Path) -> None:
    """Its model's file is then judged as it will be once the route is fixed (preflight)."""
    path = tmp_path / "routes.yaml"
    path.write_text(
        "version: 1\nmodels:\n  m: {engine: llamacpp, source: m.gguf}\n"
        "  n: {engine: llamacpp, source: n.gguf}\n"
        "routes:\n  chat: {kind: chat, model: m, max_tokns: 3}\n"
        "  more: {kind: chat, model: m, fallback: [{model: n}], max_tokns: 3}\n"
    )
    loaded, found = check_routes(path)
    assert loaded is not None
    assert loaded.config.routes == {}
    assert loaded.needed_by_broken == {"m"}
    assert len(found) == 2
