"""routes.yaml validation: every error names the file, the key path and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from zest.errors import ConfigError
from zest.router import OnnxGenaiOptions, check_routes, load_routes, parse_routes

REPO = Path(__file__).resolve().parents[3]

VALID = """\
version: 1
models:
  smollm2: {engine: llamacpp, source: m.gguf}
routes:
  chat: {kind: chat, model: smollm2}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_routes(text, "routes.yaml")
    return info.value.problems


def test_the_default_routes_file_is_valid() -> None:
    loaded = load_routes(REPO / "routes.yaml")
    assert set(loaded.config.routes) == {"chat", "autocomplete", "summarization"}
    assert loaded.config.routes["autocomplete"].kind == "completion"
    assert loaded.base_dir == REPO


def test_a_minimal_file_takes_the_documented_defaults() -> None:
    config = parse_routes(VALID, "routes.yaml")
    route = config.routes["chat"]
    assert (route.device, route.max_tokens, route.system_prompt) == ("auto", 512, None)
    assert config.models["smollm2"].options.n_batch == 512
    assert config.expose_models is False


def test_a_misspelt_route_key_suggests_the_right_one() -> None:
    text = VALID.replace("model: smollm2}", "model: smollm2, devcie: cpu}")
    assert problems(text) == [
        "routes.yaml: routes.chat.devcie: unknown key 'devcie': did you mean 'device'? "
        "(allowed: allow_cpu, cache, context, description, device, examples, fallback, "
        "hybrid_min_prompt_tokens, "
        "kind, max_tokens, model, on_failure, phrases, priority, privacy, response_format, rules, "
        "sampling, slo, speculative, system_prompt, timeouts, tools)"
    ]


def test_a_misspelt_engine_option_is_found_under_the_model() -> None:
    text = VALID.replace("source: m.gguf}", "source: m.gguf, options: {n_thread: 2}}")
    assert problems(text) == [
        "routes.yaml: models.smollm2.options.n_thread: unknown key 'n_thread': "
        "did you mean 'n_threads'? (allowed: embedding, flash_attn, kv_cache_type, max_queue, "
        "mmap, n_batch, n_threads, n_threads_batch, n_ubatch, parallel, prefix_cache_entries, "
        "prefix_cache_tokens)"
    ]


def test_an_unknown_model_reference_lists_the_known_models() -> None:
    text = VALID.replace("model: smollm2}", "model: smol}")
    assert problems(text) == [
        "routes.yaml: routes.chat.model: unknown model 'smol' (known: smollm2)"
    ]


def test_an_unknown_engine_lists_the_known_engines() -> None:
    assert problems(VALID.replace("engine: llamacpp", "engine: llama")) == [
        "routes.yaml: models.smollm2: unknown engine 'llama' (known: llamacpp, onnx-genai, remote)"
    ]


def test_a_missing_engine_key() -> None:
    assert problems(VALID.replace("engine: llamacpp, ", "")) == [
        "routes.yaml: models.smollm2: missing required key 'engine' "
        "(known engines: llamacpp, onnx-genai, remote)"
    ]


def test_a_missing_required_route_key() -> None:
    assert problems(VALID.replace("kind: chat, ", "")) == [
        "routes.yaml: routes.chat.kind: missing required key 'kind': add it"
    ]


def test_every_problem_is_reported_at_once() -> None:
    text = VALID.replace("model: smollm2}", "model: smollm2, device: tpu, max_tokens: 0}")
    assert problems(text) == [
        "routes.yaml: routes.chat.device: invalid device 'tpu': use cpu, gpu, npu, auto, "
        "hybrid, or PREFILL->DECODE with two different devices, such as npu->gpu",
        "routes.yaml: routes.chat.max_tokens: input should be greater than or equal to 1, got 0",
    ]


THREE_TYPOS = """\
version: 1
lifecycle: {preload: [smollm2, broken], max_loaded: 2}
models:
  smollm2: {engine: llamacpp, source: m.gguf}
  broken: {engine: llamacpp, source: b.gguf, context_length: many}
routes:
  chat: {kind: chat, model: smollm2, max_tokns: 64}
  autocomplete: {kind: completion, model: smolm2}
  summarization: {kind: chat, model: smollm2, fallback: [{model: smollm3}], on_failure: next}
  notes: {kind: chat, model: broken}
"""


def test_schema_and_cross_reference_problems_come_in_one_pass() -> None:
    """The cross-references of the parts that validated are checked although other parts
    have schema errors; a route naming a broken model waits for that model to be fixed."""
    assert problems(THREE_TYPOS) == [
        "routes.yaml: lifecycle.max_loaded: unknown key 'max_loaded': did you mean "
        "'max_loaded_models'? (allowed: load_timeout_s, max_loaded_models, preload)",
        "routes.yaml: models.broken.context_length: input should be a valid integer, unable to "
        "parse string as an integer, got 'many'",
        "routes.yaml: routes.chat.max_tokns: unknown key 'max_tokns': did you mean "
        "'max_tokens'? (allowed: allow_cpu, cache, context, description, device, examples, "
        "fallback, hybrid_min_prompt_tokens, kind, max_tokens, model, on_failure, phrases, "
        "priority, privacy, response_format, rules, sampling, slo, speculative, system_prompt, "
        "timeouts, tools)",
        "routes.yaml: routes.autocomplete.model: unknown model 'smolm2' (known: smollm2)",
        "routes.yaml: routes.summarization.fallback.0.model: unknown model 'smollm3' "
        "(known: smollm2)",
    ]


def test_a_rule_naming_a_broken_route_is_left_for_the_next_run() -> None:
    text = VALID.replace("model: smollm2}", "model: smollm2, devcie: cpu}") + (
        "  router:\n    kind: chat\n    model: smollm2\n"
        "    rules: [{id: long, when: {min_prompt_tokens: 100}, to: chat}]\n"
    )
    assert [line.split(": ")[1] for line in problems(text)] == ["routes.chat.devcie"]


def test_check_routes_gives_the_sound_part_of_a_file_with_problems(tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(THREE_TYPOS)
    loaded, found = check_routes(path)
    assert len(found) == 5
    assert loaded is not None
    assert set(loaded.config.models) == {"smollm2"}
    assert set(loaded.config.routes) == set()  # every route has a problem or names one
    path.write_text(VALID)
    loaded, found = check_routes(path)
    assert found == []
    assert loaded is not None
    assert set(loaded.config.routes) == {"chat"}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("pkg:foo", "malformed source 'pkg:foo': write it as pkg:DISTRIBUTION/FILE"),
        ("hf:org/file.gguf", "malformed source 'hf:org/file.gguf': write it as hf:ORG/REPO/FILE"),
        ("cache:a/b", "malformed source 'cache:a/b': write it as cache:NAME"),
        ("' '", "empty source: give a file path, pkg:DIST/FILE or hf:ORG/REPO/FILE"),
    ],
)
def test_malformed_sources(source: str, message: str) -> None:
    text = VALID.replace("source: m.gguf", f"source: {source}")
    assert problems(text) == [f"routes.yaml: models.smollm2.source: {message}"]


def test_wrong_types_name_the_value() -> None:
    text = VALID.replace("model: smollm2}", "model: smollm2, max_tokens: lots}")
    assert problems(text) == [
        "routes.yaml: routes.chat.max_tokens: input should be a valid integer, "
        "unable to parse string as an integer, got 'lots'"
    ]


def test_names_must_be_safe_in_urls() -> None:
    text = VALID.replace("  chat: {", "  my chat: {")
    assert problems(text) == [
        "routes.yaml: routes: invalid name 'my chat': use letters, digits, '.', '_' or '-' "
        "(it appears in URLs), starting with a letter or digit"
    ]


def test_an_unsupported_version() -> None:
    assert problems(VALID.replace("version: 1", "version: 2")) == [
        "routes.yaml: version: invalid value 2 (expected one of: 1)"
    ]


def test_invalid_yaml_names_line_and_column() -> None:
    assert problems("version: 1\nmodels: [\n") == [
        "routes.yaml: invalid YAML at line 3, column 1: expected the node content, "
        "but found '<stream end>': fix the syntax there"
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "routes.yaml: the file is empty: start with 'version: 1'"),
        (
            "- a\n- b\n",
            "routes.yaml: the top level must be a mapping with version, models and routes",
        ),
    ],
)
def test_files_that_are_not_a_mapping(text: str, message: str) -> None:
    assert problems(text) == [message]


def test_an_empty_system_prompt_is_refused() -> None:
    text = VALID.replace("model: smollm2}", "model: smollm2, system_prompt: ' '}")
    assert problems(text) == [
        "routes.yaml: routes.chat.system_prompt: empty system_prompt: "
        "remove the key or write the instruction"
    ]


def test_a_missing_file_says_how_to_pass_one(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_routes(missing)
    assert info.value.problems == [
        f"{missing}: file not found: pass an existing file with --routes or ZEST_ROUTES"
    ]


def test_errors_name_the_file_as_given(tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(VALID.replace("model: smollm2}", "model: smol}"))
    with pytest.raises(ConfigError) as info:
        load_routes(path)
    assert info.value.problems == [
        f"{path}: routes.chat.model: unknown model 'smol' (known: smollm2)"
    ]


@pytest.mark.parametrize("device", ["cpu", "gpu", "npu", "auto", "hybrid", "npu->gpu", "cpu->gpu"])
def test_every_documented_device_form_is_accepted(device: str) -> None:
    text = VALID.replace("model: smollm2}", f"model: smollm2, device: '{device}'}}")
    assert parse_routes(text, "routes.yaml").routes["chat"].device == device


def test_a_split_over_one_device_is_refused() -> None:
    text = VALID.replace("model: smollm2}", "model: smollm2, device: 'npu->npu'}")
    assert problems(text) == [
        "routes.yaml: routes.chat.device: invalid device 'npu->npu': use cpu, gpu, npu, auto, "
        "hybrid, or PREFILL->DECODE with two different devices, such as npu->gpu"
    ]


def test_a_cpu_route_that_may_not_use_the_cpu_is_refused() -> None:
    text = VALID.replace("model: smollm2}", "model: smollm2, device: cpu, allow_cpu: false}")
    assert problems(text) == [
        "routes.yaml: routes.chat.allow_cpu: false, but device 'cpu' runs on cpu: the route "
        "could never run; set allow_cpu to true or choose another device"
    ]


def test_on_failure_takes_two_values() -> None:
    text = VALID.replace("model: smollm2}", "model: smollm2, on_failure: retry}")
    assert problems(text) == [
        "routes.yaml: routes.chat.on_failure: invalid value 'retry' "
        "(expected one of: next, return_error)"
    ]


ONNX = VALID.replace("engine: llamacpp, source: m.gguf", "engine: onnx-genai, source: cache:m")


def test_an_onnx_genai_model_takes_the_documented_defaults() -> None:
    model = parse_routes(ONNX, "routes.yaml").models["smollm2"]
    assert model.engine == "onnx-genai"
    assert (model.source, model.context_length) == ("cache:m", None)
    assert model.options == OnnxGenaiOptions(n_threads=None, provider_options={})


def test_onnx_genai_options_are_read() -> None:
    options = "{n_threads: 2, provider_options: {device_id: '1'}}"
    text = ONNX.replace("source: cache:m}", f"source: m, options: {options}}}")
    options = parse_routes(text, "routes.yaml").models["smollm2"].options
    assert options == OnnxGenaiOptions(n_threads=2, provider_options={"device_id": "1"})


def test_a_llamacpp_option_under_an_onnx_genai_model_lists_the_onnx_options() -> None:
    text = ONNX.replace("source: cache:m}", "source: cache:m, options: {n_batch: 64}}")
    assert problems(text) == [
        "routes.yaml: models.smollm2.options.n_batch: unknown key 'n_batch' "
        "(allowed: max_queue, n_threads, provider_options)"
    ]


def test_a_misspelt_onnx_genai_option_suggests_the_right_one() -> None:
    text = ONNX.replace("source: cache:m}", "source: cache:m, options: {n_thread: 2}}")
    assert problems(text) == [
        "routes.yaml: models.smollm2.options.n_thread: unknown key 'n_thread': "
        "did you mean 'n_threads'? (allowed: max_queue, n_threads, provider_options)"
    ]


def test_an_unknown_key_of_an_onnx_genai_model_lists_its_keys() -> None:
    text = ONNX.replace("source: cache:m}", "source: cache:m, sauce: x}")
    assert problems(text) == [
        "routes.yaml: models.smollm2.sauce: unknown key 'sauce': did you mean 'source'? "
        "(allowed: context_length, engine, keep_alive, options, pinned, revision, sha256, source)"
    ]


def test_provider_option_values_must_be_strings() -> None:
    text = ONNX.replace("source: cache:m}", "source: cache:m, options: {provider_options: {a: 1}}}")
    assert problems(text) == [
        "routes.yaml: models.smollm2.options.provider_options.a: "
        "input should be a valid string, got 1"
    ]


# --- policies: context budgets, fallback chains, privacy, timeouts, remote models -------------

POLICIES = """\
version: 1
models:
  smollm2: {engine: llamacpp, source: m.gguf}
  upstream: {engine: remote, base_url: 'http://127.0.0.1:9000/v1/', model: llama-3.1-8b}
routes:
  chat:
    kind: chat
    model: smollm2
    privacy: allow_remote
    context: {max_prompt_tokens: 6000, on_overflow: trim}
    fallback: [{model: smollm2, device: cpu}, {model: upstream}]
    timeouts: {first_token_s: 5, total_s: 60}
"""


def test_the_policy_keys_take_their_documented_values() -> None:
    config = parse_routes(POLICIES, "routes.yaml")
    route = config.routes["chat"]
    assert (route.context.max_prompt_tokens, route.context.on_overflow) == (6000, "trim")
    assert route.trim_mode == "turns"
    assert [(e.model, e.device) for e in route.fallback] == [("smollm2", "cpu"), ("upstream", None)]
    assert (route.timeouts.first_token_s, route.timeouts.total_s) == (5, 60)
    upstream = config.models["upstream"]
    assert upstream.engine == "remote"
    assert upstream.base_url == "http://127.0.0.1:9000/v1"  # the trailing slash is dropped
    assert (upstream.retries, upstream.timeouts.connect_s, upstream.api_key_env) == (2, 5.0, None)


def test_policy_defaults_are_the_safe_ones() -> None:
    route = parse_routes(VALID, "routes.yaml").routes["chat"]
    assert route.privacy == "local_only"
    assert route.context.on_overflow == "reject"
    assert route.context.max_prompt_tokens is None
    assert route.fallback == ()
    assert (route.timeouts.first_token_s, route.timeouts.total_s) == (None, None)


def test_a_completion_route_trims_the_middle_by_default() -> None:
    text = VALID.replace("kind: chat", "kind: completion")
    assert parse_routes(text, "routes.yaml").routes["chat"].trim_mode == "middle"


def test_a_local_only_route_may_not_reach_a_remote_model() -> None:
    assert problems(POLICIES.replace("privacy: allow_remote", "privacy: local_only")) == [
        "routes.yaml: routes.chat.fallback.1.model: 'upstream' is a remote model, but "
        "routes.chat.privacy is local_only (the default): set privacy: allow_remote to let "
        "this route's prompts leave the machine, or use a local model"
    ]


def test_local_only_is_the_default_privacy() -> None:
    text = POLICIES.replace("    privacy: allow_remote\n", "").replace(
        "model: smollm2\n", "model: upstream\n"
    )
    assert problems(text) == [
        "routes.yaml: routes.chat.model: 'upstream' is a remote model, but routes.chat.privacy "
        "is local_only (the default): set privacy: allow_remote to let this route's prompts "
        "leave the machine, or use a local model",
        "routes.yaml: routes.chat.fallback.1.model: 'upstream' is a remote model, but "
        "routes.chat.privacy is local_only (the default): set privacy: allow_remote to let "
        "this route's prompts leave the machine, or use a local model",
    ]


def test_a_fallback_entry_must_name_a_known_model() -> None:
    assert problems(POLICIES.replace("{model: upstream}", "{model: upstrem}")) == [
        "routes.yaml: routes.chat.fallback.1.model: unknown model 'upstrem' "
        "(known: smollm2, upstream)"
    ]


def test_a_misspelt_fallback_key_suggests_the_right_one() -> None:
    assert problems(POLICIES.replace("device: cpu}", "devcie: cpu}")) == [
        "routes.yaml: routes.chat.fallback.0.devcie: unknown key 'devcie': did you mean "
        "'device'? (allowed: device, model)"
    ]


def test_a_remote_model_takes_no_device() -> None:
    assert problems(POLICIES.replace("{model: upstream}", "{model: upstream, device: gpu}")) == [
        "routes.yaml: routes.chat.fallback.1.device: model 'upstream' is remote and runs on no "
        "local device: remove the device key"
    ]


def test_a_fallback_entry_respects_allow_cpu() -> None:
    text = POLICIES.replace("privacy: allow_remote", "privacy: allow_remote\n    allow_cpu: false")
    assert problems(text) == [
        "routes.yaml: routes.chat.fallback.0.device: 'cpu' runs on cpu, but "
        "routes.chat.allow_cpu is false: choose another device or set allow_cpu to true"
    ]


def test_a_fallback_chain_needs_on_failure_next() -> None:
    text = POLICIES.replace(
        "privacy: allow_remote", "privacy: allow_remote\n    on_failure: return_error"
    )
    assert problems(text) == [
        "routes.yaml: routes.chat.fallback: on_failure is return_error, so no fallback would "
        "ever be tried: set on_failure: next or remove fallback"
    ]


def test_on_overflow_fallback_needs_a_fallback_chain() -> None:
    text = VALID.replace("model: smollm2}", "model: smollm2, context: {on_overflow: fallback}}")
    assert problems(text) == [
        "routes.yaml: routes.chat.context.on_overflow: fallback, but the route has no fallback "
        "entries: add fallback or use trim or reject"
    ]


def test_turns_cannot_be_trimmed_from_a_completion_prompt() -> None:
    text = VALID.replace(
        "kind: chat, model: smollm2}", "kind: completion, model: smollm2, context: {trim: turns}}"
    )
    assert problems(text) == [
        "routes.yaml: routes.chat.context.trim: turns needs a chat route (messages): use middle "
        "for completion routes"
    ]


@pytest.mark.parametrize(
    ("context", "message"),
    [
        (
            "{on_overflow: drop}",
            "routes.chat.context.on_overflow: invalid value 'drop' (expected one of: trim, "
            "reject, fallback)",
        ),
        (
            "{trim: oldest}",
            "routes.chat.context.trim: invalid value 'oldest' (expected one of: turns, middle)",
        ),
        (
            "{max_prompt_tokens: 0}",
            "routes.chat.context.max_prompt_tokens: input should be greater than or equal to 1, "
            "got 0",
        ),
        (
            "{max_tokens: 10}",
            "routes.chat.context.max_tokens: unknown key 'max_tokens': did you mean "
            "'max_prompt_tokens'? (allowed: max_prompt_tokens, on_overflow, trim)",
        ),
    ],
)
def test_context_policy_errors(context: str, message: str) -> None:
    text = VALID.replace("model: smollm2}", f"model: smollm2, context: {context}}}")
    assert problems(text) == [f"routes.yaml: {message}"]


def test_privacy_takes_two_values() -> None:
    text = VALID.replace("model: smollm2}", "model: smollm2, privacy: private}")
    assert problems(text) == [
        "routes.yaml: routes.chat.privacy: invalid value 'private' "
        "(expected one of: local_only, allow_remote)"
    ]


def test_a_first_token_timeout_longer_than_the_total_is_refused() -> None:
    text = POLICIES.replace("first_token_s: 5", "first_token_s: 90")
    assert problems(text) == [
        "routes.yaml: routes.chat.timeouts: first_token_s (90) is longer than total_s (60): the "
        "first token could never arrive in time; lower first_token_s or raise total_s"
    ]


def test_a_misspelt_timeout_key() -> None:
    text = POLICIES.replace("first_token_s: 5", "first_token: 5")
    assert problems(text) == [
        "routes.yaml: routes.chat.timeouts.first_token: unknown key 'first_token': did you mean "
        "'first_token_s'? (allowed: first_token_s, total_s)"
    ]


def test_a_key_written_in_the_file_is_refused_without_echoing_it() -> None:
    text = POLICIES.replace("model: llama-3.1-8b}", "model: llama-3.1-8b, api_key: sk-secret}")
    assert problems(text) == [
        "routes.yaml: models.upstream.api_key: 'api_key' is refused: a key must not be written "
        "in routes.yaml: put it in an environment variable and name that variable with "
        "api_key_env"
    ]


def test_api_key_env_must_be_a_variable_name_not_a_key() -> None:
    text = POLICIES.replace(
        "model: llama-3.1-8b}", "model: llama-3.1-8b, api_key_env: sk-secret-1}"
    )
    [problem] = problems(text)
    assert problem == (
        "routes.yaml: models.upstream.api_key_env: api_key_env must name an environment "
        "variable (such as UPSTREAM_API_KEY), not hold the key: got a value of 11 characters "
        "that is not a variable name"
    )
    assert "sk-secret" not in problem


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "127.0.0.1:9000/v1",
            "invalid base_url '127.0.0.1:9000/v1': write the upstream's OpenAI API root, such "
            "as http://127.0.0.1:9000/v1",
        ),
        (
            "http://user:pw@127.0.0.1:9000/v1",
            "base_url carries credentials: remove them and name an environment variable holding "
            "the key with api_key_env",
        ),
    ],
)
def test_remote_base_url_errors(url: str, message: str) -> None:
    text = POLICIES.replace("'http://127.0.0.1:9000/v1/'", f"'{url}'")
    assert problems(text) == [f"routes.yaml: models.upstream.base_url: {message}"]


def test_a_misspelt_remote_key_lists_the_remote_keys() -> None:
    text = POLICIES.replace("model: llama-3.1-8b}", "model: llama-3.1-8b, retry: 3}")
    assert problems(text) == [
        "routes.yaml: models.upstream.retry: unknown key 'retry': did you mean 'retries'? "
        "(allowed: api_key_env, backoff_s, base_url, context_length, engine, max_in_flight, "
        "max_queue, max_retry_wait_s, model, retries, timeouts)"
    ]


def test_a_remote_model_needs_base_url_and_model() -> None:
    text = POLICIES.replace(", base_url: 'http://127.0.0.1:9000/v1/', model: llama-3.1-8b", "")
    assert problems(text) == [
        "routes.yaml: models.upstream.base_url: missing required key 'base_url': add it",
        "routes.yaml: models.upstream.model: missing required key 'model': add it",
    ]


def test_few_shot_examples_belong_to_chat_routes() -> None:
    text = VALID.replace(
        "kind: chat", "kind: completion, examples: [{user: 'Hi', assistant: 'Hello'}]"
    )
    assert problems(text) == [
        "routes.yaml: routes.chat.examples: a completion route has no messages to put examples "
        "before: remove them, or make the route kind: chat"
    ]
    assert problems(VALID.replace("kind: chat", "kind: chat, examples: [{user: ''}]")) == [
        "routes.yaml: routes.chat.examples.0.user: string should have at least 1 character, got ''",
        "routes.yaml: routes.chat.examples.0.assistant: missing required key 'assistant': add it",
    ]
