"""Engines that run models in process (llama.cpp, ONNX Runtime GenAI) or forward them (remote),
behind one interface, and the device inventory.

Each kind routes.yaml declares (router's model classes) is registered here once: its engine
factory, its tokenizer if it has a local one, what it can do. `create_engine` builds the engine
a model's `engine:` key names, for one placement; `load_tokenizer` reads a model's tokenizer
without loading it. Heavy libraries are imported only when a model (or its tokenizer) is
loaded, and a missing one fails with the command to install it.
"""

from __future__ import annotations

from pathlib import Path

from zest.engines._admission import Admission, ChoiceGroup
from zest.engines._base import (
    Delta,
    EmbeddingInput,
    Embeddings,
    Engine,
    EngineInfo,
    EngineKind,
    GenerationJob,
    Message,
    ModelFacts,
    Prompt,
    StageStats,
    Tokenizer,
    TokenLogprob,
    engine_kind,
    register_engine,
)
from zest.engines._compute import compute_bound, compute_executor, on_compute_thread
from zest.engines._devices import Inventory, detect_inventory, parse_emulation
from zest.engines._digests import DigestCache, ModelDigest, model_location, verify_model
from zest.engines._gguf import GgufError, check_gguf_tensors, read_gguf_metadata
from zest.engines._kv_cells import KvCells
from zest.engines._llama_embed import LlamaCppEmbedder
from zest.engines._llama_log import route_llama_log
from zest.engines._llama_native import (
    ContextSettings,
    NativeContext,
    load_internals,
    new_model,
)
from zest.engines._llamacpp import LlamaCppEngine, LlamaCppTokenizer, inspect_llamacpp
from zest.engines._onnx_genai import OnnxGenaiEngine, OnnxGenaiTokenizer, inspect_onnx_genai
from zest.engines._pool import (
    EnginePool,
    EngineSpec,
    Lease,
    LoadedEngine,
    ModelPolicy,
    describe,
    kept_for,
)
from zest.engines._remote import CONTENT_PARTS, RemoteEngine
from zest.engines._sources import (
    hf_hub_cache_dir,
    resolve_source,
    use_zest_cache,
    zest_cache_dir,
    zest_cache_of_environment,
)
from zest.engines._stops import StopMatcher
from zest.engines._tokenizers import load_tokenizer
from zest.errors import EngineError
from zest.router import (
    Capabilities,
    Device,
    LlamaCppModel,
    ModelConfig,
    OnnxGenaiModel,
    Placement,
    RemoteModel,
    parse_device,
)

__all__ = [
    "CONTENT_PARTS",
    "ChoiceGroup",
    "ContextSettings",
    "Delta",
    "DigestCache",
    "EmbeddingInput",
    "Embeddings",
    "Engine",
    "EngineInfo",
    "EnginePool",
    "EngineSpec",
    "GenerationJob",
    "Inventory",
    "KvCells",
    "Lease",
    "LlamaCppTokenizer",
    "LoadedEngine",
    "Message",
    "ModelDigest",
    "ModelFacts",
    "ModelPolicy",
    "NativeContext",
    "Prompt",
    "RemoteEngine",
    "StageStats",
    "StopMatcher",
    "TokenLogprob",
    "Tokenizer",
    "check_model_data",
    "check_model_files",
    "compute_bound",
    "compute_executor",
    "create_engine",
    "describe",
    "detect_inventory",
    "engine_kind",
    "hf_hub_cache_dir",
    "inspect_model",
    "kept_for",
    "load_internals",
    "load_tokenizer",
    "model_location",
    "new_model",
    "on_compute_thread",
    "parse_emulation",
    "read_gguf_metadata",
    "resolve_source",
    "route_llama_log",
    "use_zest_cache",
    "verify_model",
    "zest_cache_dir",
    "zest_cache_of_environment",
]


# What sets a llama.cpp model's slots (sequences decoded at once), as a refusal names it.
PARALLEL = "options.parallel in routes.yaml"


def _llamacpp_engine(
    model_id: str, config: LlamaCppModel, base_dir: Path, placement: Placement
) -> Engine:
    """A generating engine, or an embedding one for a model loaded with options.embedding."""
    kind = LlamaCppEmbedder if config.options.embedding else LlamaCppEngine
    return kind(model_id, config, base_dir, placement)


# What each kind honours (docs/policies.md, Engines and their capabilities). Fill-in-the-middle also
# needs a model with FIM tokens, which its tokenizer checks.
register_engine(
    EngineKind(
        LlamaCppModel,
        _llamacpp_engine,
        LlamaCppTokenizer.load,
        capabilities=Capabilities(
            logprobs=True,
            logit_bias=True,
            structured_output=True,
            tools=True,
            fill_in_middle=True,
            multiple_choices=True,
            split=True,
            speculation=True,
            embeddings=True,
        ),
        admission=lambda config: Admission(
            config.options.parallel, config.options.max_queue, PARALLEL
        ),
        runs_emulated=True,
        inspector=inspect_llamacpp,
    )
)
register_engine(
    EngineKind(
        OnnxGenaiModel,
        OnnxGenaiEngine,
        OnnxGenaiTokenizer.load,
        # No log probabilities or logit bias: onnxruntime-genai exposes neither per token.
        capabilities=Capabilities(
            structured_output=True, tools=True, fill_in_middle=True, multiple_choices=True
        ),
        # One generation at a time: a request's n choices run one after another.
        admission=lambda config: Admission(1, config.options.max_queue),
        inspector=inspect_onnx_genai,
        folder_model=True,  # a source may name its genai_config.json
    )
)
register_engine(
    EngineKind(
        RemoteModel,
        RemoteEngine,
        # An upstream's log probabilities are not relayed, and token ids (logit_bias) are
        # the upstream model's, not ones a client of this route could know. Image parts are
        # forwarded as sent: the upstream's model reads them (or refuses them itself).
        capabilities=Capabilities(
            structured_output=True,
            tools=True,
            fill_in_middle=True,
            multiple_choices=True,
            embeddings=True,
            images=True,
        ),
        admission=lambda config: Admission(config.max_in_flight, config.max_queue),
    )
)


def inspect_model(model_id: str, config: ModelConfig, base_dir: Path) -> ModelFacts | None:
    """A model entry's facts read from its files without loading it (blocking: a thread);
    None for a kind with nothing to read here (remote). A missing file raises."""
    inspector = engine_kind(config.engine).inspector
    return None if inspector is None else inspector(model_id, config, base_dir)


def check_model_files(model_id: str, config: ModelConfig, base_dir: Path) -> ModelFacts | None:
    """Cheap checks that a model's files can load, without loading them (blocking: a thread):
    they are there and read as the model (`inspect_model`, whose facts it returns), and they
    hold what their header declares (`check_model_data`). Raises what a load of them would,
    as a RequestError."""
    facts = inspect_model(model_id, config, base_dir)
    check_model_data(model_id, config, base_dir)
    return facts


def check_model_data(model_id: str, config: ModelConfig, base_dir: Path) -> None:
    """A GGUF model's tensors where its header says, all inside the file (a download cut short
    has a header that reads), as llama.cpp checks them before a load, reading no weight
    (blocking: a thread). EngineError (a RequestError) when they are not."""
    if isinstance(config, LlamaCppModel):
        path = resolve_source(config.source, base_dir, config.revision)
        try:
            check_gguf_tensors(path)
        except (GgufError, OSError) as exc:
            raise EngineError(f"model {model_id!r}: cannot load {path}: {exc}") from exc


def create_engine(
    model_id: str, config: ModelConfig, base_dir: Path, placement: Placement | str
) -> Engine:
    """The engine for one routes.yaml model entry on one placement (not loaded yet).

    A plain device name ("cpu", "npu->gpu") stands for real devices of that name.
    """
    if isinstance(placement, str):
        placement = _real_placement(placement)
    return engine_kind(config.engine).factory(model_id, config, base_dir, placement)


def _real_placement(device: str) -> Placement:
    prefill, decode = parse_device(device) or ("cpu", "cpu")
    found = {name: Device(name, frozenset(), "named by the caller") for name in {prefill, decode}}
    return Placement(found[prefill], found[decode])
