"""What only the onnx-genai engine does, on the converted SmolLM2 (`make onnx-model`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engines.conftest import collect, completion_job, job_for, text_of, tokenizer_of
from zest.engines import GenerationJob, Prompt, create_engine, resolve_source
from zest.engines._onnx_genai import OnnxGenaiEngine
from zest.engines.convert import MODEL_NAME
from zest.errors import EngineError, ServiceUnavailableError
from zest.router import OnnxGenaiModel

SOURCE = f"cache:{MODEL_NAME}"


def onnx_engine(device: str = "cpu", source: str = SOURCE, **fields: object) -> OnnxGenaiEngine:
    config = OnnxGenaiModel(engine="onnx-genai", source=source, **fields)  # type: ignore[arg-type]
    engine = create_engine("smol", config, Path.cwd(), device)
    assert isinstance(engine, OnnxGenaiEngine)
    return engine


@pytest.fixture(scope="module")
def engine() -> Iterator[OnnxGenaiEngine]:
    loaded = onnx_engine(options={"n_threads": 2})
    loaded.load()
    yield loaded
    asyncio.run(loaded.close())


def test_load_reports_provider_threads_and_the_model_context(engine: OnnxGenaiEngine) -> None:
    info = engine.info()
    assert info.engine == "onnx-genai"
    assert info.backend == "onnxruntime-genai 0.18.0 (CPUExecutionProvider, 2 threads)"
    assert info.context_length == 8192  # from genai_config.json
    assert info.source == str(resolve_source(SOURCE, Path.cwd()))


def test_a_foreign_error_becomes_an_engine_error_with_its_cause(engine: OnnxGenaiEngine) -> None:
    too_long = GenerationJob.greedy(Prompt.of_tokens((5,) * 8193), max_tokens=1)
    with pytest.raises(EngineError) as info:
        collect(engine, too_long)
    assert info.value.message == (
        "generation failed: RuntimeError: input_ids size (8193) + current sequence length (0) "
        "exceeds max length (8192)"
    )
    assert isinstance(info.value.__cause__, RuntimeError)


def test_tokens_outside_the_vocabulary_are_refused_before_onnx_runtime_reads_them(
    engine: OnnxGenaiEngine,
) -> None:
    with pytest.raises(EngineError) as info:
        collect(engine, GenerationJob.greedy(Prompt.of_tokens((1, 49152)), max_tokens=32))
    assert info.value.message == (
        "model 'smol': prompt token 49152 is outside the vocabulary (0..49151)"
    )


def sample(engine: OnnxGenaiEngine, **overrides: object) -> str:
    return text_of(collect(engine, job_for(engine, "Tell a story.", max_tokens=24, **overrides)))


def test_sampling_differs_from_greedy_and_seeds_differ(engine: OnnxGenaiEngine) -> None:
    greedy = sample(engine)
    samples = [sample(engine, temperature=1.0, top_k=0, seed=seed) for seed in (1, 2, 3)]
    assert len(set(samples)) > 1  # random_seed reaches the generator
    assert any(s != greedy for s in samples)  # do_sample and temperature do too
    assert sample(engine, temperature=1.0, top_k=0, seed=2) == samples[1]  # and it repeats


def test_a_tiny_top_p_leaves_only_the_greedy_token(engine: OnnxGenaiEngine) -> None:
    greedy = sample(engine)
    assert {sample(engine, temperature=1.0, top_p=0.01, seed=s) for s in (1, 2, 3)} == {greedy}


def test_a_device_without_its_provider_is_refused_never_run_on_the_cpu() -> None:
    with pytest.raises(ServiceUnavailableError) as info:
        onnx_engine("npu").load()
    assert info.value.message == (
        "model 'smol' needs device 'npu' but no ONNX Runtime npu provider is available "
        "(looked for: VitisAIExecutionProvider, QNNExecutionProvider, "
        "OpenVINOExecutionProvider; found: AzureExecutionProvider, CPUExecutionProvider); "
        "it was not run elsewhere: install the onnxruntime build for that device or route "
        "the model to a device found"
    )
    assert info.value.code == "device_unavailable"


def test_hybrid_needs_a_model_that_splits_prefill_and_decode() -> None:
    with pytest.raises(ServiceUnavailableError) as info:
        onnx_engine("npu->gpu").load()
    assert info.value.message == (
        "model 'smol' declares no prefill/decode split in its genai_config.json: device hybrid "
        "needs a hybrid model (such as AMD's Ryzen AI hybrid models); route this one to cpu, "
        "gpu or npu"
    )


def test_a_context_beyond_what_the_model_was_built_for_is_refused() -> None:
    engine = onnx_engine(context_length=16384)
    with pytest.raises(EngineError) as info:
        engine.load()
    assert info.value.message == (
        f"model 'smol': context_length 16384 is more than the 8192 tokens the model was built "
        f"for ({engine.info().source}/genai_config.json): lower it or remove the key"
    )


def test_a_smaller_context_is_taken() -> None:
    engine = onnx_engine(context_length=2048)
    assert engine.load().context_length == 2048
    asyncio.run(engine.close())


def test_provider_options_on_the_cpu_are_refused_not_ignored() -> None:
    with pytest.raises(EngineError) as info:
        onnx_engine(options={"provider_options": {"device_id": "0"}}).load()
    assert info.value.message == (
        "model 'smol': options.provider_options apply to the gpu or npu provider a route's "
        "device selects; device 'cpu' takes none: remove them"
    )


def test_a_model_without_a_chat_template_asks_for_a_completion_route(tmp_path: Path) -> None:
    for file in resolve_source(SOURCE, Path.cwd()).iterdir():
        if file.name != "chat_template.jinja":
            (tmp_path / file.name).symlink_to(file)
    engine = onnx_engine(source=str(tmp_path))
    engine.load()
    with pytest.raises(EngineError) as info:
        tokenizer_of(engine).render_chat([{"role": "user", "content": "Hi"}])
    assert info.value.message == (
        "model 'smol' has no usable chat template (Empty chat template.): use a completion route"
    )
    job = completion_job(engine, "Once upon a time", max_tokens=3)  # completions still work
    assert collect(engine, job)[-1].completion_tokens == 3
    asyncio.run(engine.close())
