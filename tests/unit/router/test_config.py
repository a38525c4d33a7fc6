"""routes.yaml validation: every error names the file, the key path and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from router import ConfigError, OnnxGenaiOptions, load_routes, parse_routes

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
        "(allowed: allow_cpu, description, device, hybrid_min_prompt_tokens, kind, max_tokens, "
        "model, on_failure, priority, sampling, system_prompt)"
    ]


def test_a_misspelt_engine_option_is_found_under_the_model() -> None:
    text = VALID.replace("source: m.gguf}", "source: m.gguf, options: {n_thread: 2}}")
    assert problems(text) == [
        "routes.yaml: models.smollm2.options.n_thread: unknown key 'n_thread': "
        "did you mean 'n_threads'? (allowed: flash_attn, kv_cache_type, max_queue, mmap, "
        "n_batch, n_threads, n_threads_batch, n_ubatch, parallel, prefix_cache_tokens)"
    ]


def test_an_unknown_model_reference_lists_the_known_models() -> None:
    text = VALID.replace("model: smollm2}", "model: smol}")
    assert problems(text) == [
        "routes.yaml: routes.chat.model: unknown model 'smol' (known: smollm2)"
    ]


def test_an_unknown_engine_lists_the_known_engines() -> None:
    assert problems(VALID.replace("engine: llamacpp", "engine: llama")) == [
        "routes.yaml: models.smollm2: unknown engine 'llama' (known: llamacpp, onnx-genai)"
    ]


def test_a_missing_engine_key() -> None:
    assert problems(VALID.replace("engine: llamacpp, ", "")) == [
        "routes.yaml: models.smollm2: missing required key 'engine' "
        "(known engines: llamacpp, onnx-genai)"
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
        "(allowed: n_threads, provider_options)"
    ]


def test_a_misspelt_onnx_genai_option_suggests_the_right_one() -> None:
    text = ONNX.replace("source: cache:m}", "source: cache:m, options: {n_thread: 2}}")
    assert problems(text) == [
        "routes.yaml: models.smollm2.options.n_thread: unknown key 'n_thread': "
        "did you mean 'n_threads'? (allowed: n_threads, provider_options)"
    ]


def test_an_unknown_key_of_an_onnx_genai_model_lists_its_keys() -> None:
    text = ONNX.replace("source: cache:m}", "source: cache:m, sauce: x}")
    assert problems(text) == [
        "routes.yaml: models.smollm2.sauce: unknown key 'sauce': did you mean 'source'? "
        "(allowed: context_length, engine, options, source)"
    ]


def test_provider_option_values_must_be_strings() -> None:
    text = ONNX.replace("source: cache:m}", "source: cache:m, options: {provider_options: {a: 1}}}")
    assert problems(text) == [
        "routes.yaml: models.smollm2.options.provider_options.a: "
        "input should be a valid string, got 1"
    ]
