"""The ONNX Runtime GenAI engine, in process through onnxruntime-genai.

A model is a folder with genai_config.json, the ONNX graph and the tokenizer (`python -m
engines.convert` makes one from the bundled SmolLM2). The route's device picks the execution
providers (engines._providers); an AMD hybrid model keeps the providers its genai_config.json
names, because there the prefill/decode split belongs to the model.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from zest.engines._base import (
    Delta,
    Engine,
    EngineInfo,
    FinishReason,
    GenerationJob,
    ModelFacts,
    Tokenizer,
    control_pattern,
)
from zest.engines._providers import (
    CPU,
    HybridSplit,
    Provider,
    found_providers,
    hybrid_split,
    select_providers,
)
from zest.engines._sources import resolve_source
from zest.engines._stops import StopMatcher
from zest.engines._worker import GenerationWorker
from zest.errors import (
    BadRequestError,
    EngineError,
    ModelFileMissingError,
    ServiceUnavailableError,
    clipped,
    shown,
)
from zest.router import OnnxGenaiModel, Placement, kind_of

__all__ = ["OnnxGenaiEngine", "OnnxGenaiTokenizer", "inspect_onnx_genai"]

_INSTALL = "make install (or: pip install onnxruntime-genai==0.18.0)"
_GENAI_CONFIG = "genai_config.json"


def _import_og() -> Any:
    try:
        import onnxruntime_genai
    except ImportError as exc:
        raise ServiceUnavailableError(
            f"onnxruntime-genai is not installed: run {_INSTALL}", code="engine_not_installed"
        ) from exc
    return onnxruntime_genai


class OnnxGenaiTokenizer(Tokenizer):
    """An ONNX Runtime GenAI model folder's tokenizer and chat template: of a loaded model, or
    read from the folder's tokenizer files without the ONNX graph (`load`: og.Config)."""

    def __init__(
        self, model_id: str, folder: Path, source: Any, context_length: int | None
    ) -> None:
        self.model_id, self.key = model_id, f"{model_id} ({folder})"
        self._tokenizer = _og_tokenizer(source, model_id, folder)
        self._plain = _og_tokenizer(source, model_id, folder)  # adds no special tokens
        self._plain.update_options(add_special_tokens="false")
        self.control, self.max_token_bytes = _read_tokenizer_json(folder)
        self.context_length = context_length

    @classmethod
    def load(cls, model_id: str, config: OnnxGenaiModel, base_dir: Path) -> OnnxGenaiTokenizer:
        folder = _model_dir(config, base_dir)
        built = _built_context(_read_genai_config(folder, model_id), folder, model_id)
        og = _import_og()
        try:
            og_config = og.Config(str(folder))
        except RuntimeError as exc:
            raise EngineError(f"model {model_id!r}: cannot read {folder}: {exc}") from exc
        return cls(model_id, folder, og_config, config.context_length or built)

    @property
    def eos(self) -> frozenset[int]:
        return frozenset(int(token) for token in self._tokenizer.eos_token_ids)

    def decoder(self) -> Any:
        return self._tokenizer.create_stream()

    def render_chat(self, messages: Sequence[Mapping[str, str]]) -> str:
        try:
            prompt = self._tokenizer.apply_chat_template(
                json.dumps([dict(m) for m in messages]), add_generation_prompt=True
            )
        except RuntimeError as exc:  # "Empty chat template." when the folder has none
            raise EngineError(
                f"model {self.model_id!r} has no usable chat template ({exc}): "
                "use a completion route"
            ) from exc
        return str(prompt)

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool = True) -> list[int]:
        tokenizer = self._tokenizer if add_special else self._plain
        if parse_special or self.control is None or not self.control.search(text):
            return [int(token) for token in tokenizer.encode(text)]
        # onnxruntime-genai always reads control-token text as the token: cut each occurrence
        # after its first character and encode the pieces apart, so none is whole.
        cuts = [m.start() + 1 for m in self.control.finditer(text)]
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        tokens = [int(t) for t in tokenizer.encode(pieces[0])]
        for piece in pieces[1:]:
            tokens += [int(t) for t in self._plain.encode(piece)]
        return tokens


def _read_tokenizer_json(folder: Path) -> tuple[re.Pattern[str] | None, int | None]:
    """From the folder's tokenizer.json: the texts of its special tokens (added tokens), and
    its longest token in UTF-8 bytes (a byte-level vocabulary spells a byte per character,
    so this bounds the bytes a token covers). (None, None) when the file cannot tell."""
    try:
        data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        added = data["added_tokens"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, None
    control = control_pattern(t["content"] for t in added if t.get("special"))
    return control, _longest_token(data.get("model"), added)


def _longest_token(model: Any, added: list[dict[str, Any]]) -> int | None:
    """A BPE vocabulary maps pieces to ids, a unigram one lists [piece, score] pairs."""
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        pieces = list(vocab)
    elif isinstance(vocab, list):
        pieces = [entry[0] for entry in vocab if isinstance(entry, list) and entry]
    else:
        return None
    pieces += [str(token.get("content", "")) for token in added]
    return max((len(str(piece).encode("utf-8")) for piece in pieces), default=0) or None


def _og_tokenizer(source: Any, model_id: str, folder: Path) -> Any:
    """og.Tokenizer of a loaded og.Model or of an og.Config (the folder's files alone)."""
    try:
        return _import_og().Tokenizer(source)
    except RuntimeError as exc:
        raise EngineError(
            f"model {model_id!r}: onnxruntime-genai could not load the tokenizer of {folder}: {exc}"
        ) from exc


class OnnxGenaiEngine(Engine):
    name = kind_of(OnnxGenaiModel)

    def __init__(
        self, model_id: str, config: OnnxGenaiModel, base_dir: Path, placement: Placement
    ) -> None:
        self.model_id, self.config, self.placement = model_id, config, placement
        self.device = placement.key  # cpu, gpu, npu, or npu->gpu
        self._dir = _model_dir(config, base_dir)
        self._og: Any = None
        self._model: Any = None
        self._tokenizer: OnnxGenaiTokenizer | None = None
        self._worker: GenerationWorker | None = None
        self._context, self._vocab_size = config.context_length or 0, 0
        self._eos: frozenset[int] = frozenset()
        self._backend = ""

    def load(self) -> EngineInfo:
        og = self._og = _import_og()
        genai = _read_genai_config(self._dir, self.model_id)
        self._context = self._context_length(genai)
        self._vocab_size = int(_model_section(genai).get("vocab_size", 0))
        split = hybrid_split(genai)
        providers = self._providers(og, split)
        try:
            self._model = og.Model(self._og_config(og, providers, split))
        except RuntimeError as exc:
            raise EngineError(
                f"model {self.model_id!r}: onnxruntime-genai could not load {self._dir}: {exc}"
            ) from exc
        self._tokenizer = OnnxGenaiTokenizer(self.model_id, self._dir, self._model, self._context)
        self._eos = self._tokenizer.eos
        self._backend = _backend(og.__version__, providers, split, self.config.options.n_threads)
        self._worker = GenerationWorker(self.model_id, self._generate)
        return self.info()

    def info(self) -> EngineInfo:
        return EngineInfo(
            engine=self.name,
            model=self.model_id,
            device=self.placement.label,
            backend=self._backend or "onnxruntime-genai (not loaded)",
            context_length=self._context,
            source=str(self._dir),
            # Weights only: onnxruntime-genai allocates its KV cache per generation.
            memory_bytes=_folder_bytes(self._dir) if self._backend else None,
        )

    def tokenizer(self) -> OnnxGenaiTokenizer | None:
        return self._tokenizer

    def _loaded_tokenizer(self) -> OnnxGenaiTokenizer:
        if self._tokenizer is None:
            raise ServiceUnavailableError(f"model {self.model_id!r} is not loaded")
        return self._tokenizer

    def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        # logprobs and logit_bias never reach here: the kind declares it honours neither, so
        # the planner leaves this engine out of a request that asks for them.
        tokenizer = self._loaded_tokenizer()
        if self._worker is None:
            raise ServiceUnavailableError(f"model {self.model_id!r} is not loaded")
        return self._worker.stream(job.encoded_by(tokenizer))

    async def close(self) -> None:
        if self._worker is not None:
            await asyncio.to_thread(self._worker.close)  # joins its thread: off the event loop
        # Dropping the last references frees the ONNX Runtime sessions and their memory.
        self._worker = self._model = self._tokenizer = None

    # --- loading ---------------------------------------------------------------------------------

    def _context_length(self, genai: dict[str, Any]) -> int:
        built = _built_context(genai, self._dir, self.model_id) or 0
        wanted = self.config.context_length
        if wanted is not None and built and wanted > built:
            # The graph's rotary tables stop at `built` positions: more would read past them.
            raise EngineError(
                f"model {self.model_id!r}: context_length {wanted} is more than the {built} "
                f"tokens the model was built for ({self._dir / _GENAI_CONFIG}): "
                "lower it or remove the key"
            )
        return wanted or built

    def _providers(self, og: Any, split: HybridSplit | None) -> tuple[Provider, ...]:
        if split is not None and self.device != split.device:
            raise ServiceUnavailableError(
                f"model {self.model_id!r} is a hybrid model ({split.evidence} in "
                f"{_GENAI_CONFIG}): it runs only with prefill on the {split.prefill} and decode "
                f"on the {split.decode} (device hybrid), not on {self.device!r}",
                code="device_unavailable",
            )
        if split is None and self.device == "npu->gpu":
            raise ServiceUnavailableError(
                f"model {self.model_id!r} declares no prefill/decode split in its "
                f"{_GENAI_CONFIG}: device hybrid needs a hybrid model (such as AMD's Ryzen AI "
                "hybrid models); route this one to cpu, gpu or npu",
                code="device_unavailable",
            )
        providers = select_providers(self.model_id, self.device, found_providers(og))
        if self.config.options.provider_options and (split or providers == (CPU,)):
            raise EngineError(
                f"model {self.model_id!r}: options.provider_options apply to the gpu or npu "
                f"provider a route's device selects; device {self.device!r} takes none: "
                "remove them"
            )
        return providers

    def _og_config(
        self, og: Any, providers: tuple[Provider, ...], split: HybridSplit | None
    ) -> Any:
        config = og.Config(str(self._dir))
        if split is None:  # a hybrid model's providers are part of the model: keep them
            config.clear_providers()  # no provider left means the CPU
            for provider in providers:
                self._append_provider(config, provider)
        threads = self.config.options.n_threads
        if threads:
            session = {"intra_op_num_threads": threads}
            config.overlay(json.dumps({"model": {"decoder": {"session_options": session}}}))
        return config

    def _append_provider(self, config: Any, provider: Provider) -> None:
        if provider == CPU:
            return
        config.append_provider(provider.genai_name)
        for key, value in (*provider.options, *self.config.options.provider_options.items()):
            config.set_provider_option(provider.genai_name, key, value)

    # --- runs on the worker thread -------------------------------------------------------------

    def _generate(self, job: GenerationJob) -> Iterator[Delta]:
        self._check_prompt(job.prompt_tokens)
        options = _search_options(job, self._context)
        generator = self._generator(job, options)
        generator.append_tokens(list(job.prompt_tokens))  # the prefill
        stops, produced = StopMatcher(job.stop), 0
        finish: FinishReason = "length"
        decoder = self._loaded_tokenizer().decoder()
        while produced < job.max_tokens and not generator.is_done():
            if job.cancelled.is_set():
                finish = "cancelled"
                break
            generator.generate_next_token()
            token = int(generator.get_next_tokens()[0])
            if token in self._eos:
                finish = "stop"
                break
            produced += 1
            text = stops.feed(decoder.decode(token))
            if text:
                yield Delta(text)
            if stops.stopped:
                finish = "stop"
                break
        else:  # the model (or the guidance, at the end of the JSON) ended before the limits
            room = len(job.prompt_tokens) + produced < options["max_length"]
            if generator.is_done() and produced < job.max_tokens and room:
                finish = "stop"
        yield Delta(
            stops.flush(),
            finish_reason=finish,
            completion_tokens=produced,
            stop_sequence=stops.matched,
        )

    def _generator(self, job: GenerationJob, options: dict[str, Any]) -> Any:
        params = self._og.GeneratorParams(self._model)
        params.set_search_options(**options)
        constraint = job.response_format.constraint() if job.response_format else None
        if constraint is None:
            return self._og.Generator(self._model, params)
        try:  # ONNX Runtime GenAI's guidance keeps the output in the JSON Schema
            # Compact JSON: with flexible whitespace, small models pad the end with newlines
            # until max_tokens (llguidance's own option, read from the schema's root).
            compact = {**constraint, "x-guidance": {"whitespace_flexible": False}}
            params.set_guidance("json_schema", json.dumps(compact))
            return self._og.Generator(self._model, params)  # compiles the grammar
        except RuntimeError as exc:
            raise BadRequestError(
                f"response_format: onnxruntime-genai cannot constrain the output to this JSON "
                f"Schema ({clipped(str(exc), 200)}): remove or simplify that part of the schema",
                param="response_format",
            ) from exc

    def _check_prompt(self, tokens: tuple[int, ...]) -> None:
        # onnxruntime-genai reads embeddings of out-of-range ids without checking them.
        bad = next((t for t in tokens if not 0 <= t < self._vocab_size), None)
        if self._vocab_size and bad is not None:
            raise EngineError(
                f"model {self.model_id!r}: prompt token {bad} is outside the vocabulary "
                f"(0..{self._vocab_size - 1})"
            )


def _search_options(job: GenerationJob, context: int) -> dict[str, Any]:
    # min_p, frequency_penalty and presence_penalty have no onnxruntime-genai equivalent.
    options: dict[str, Any] = {
        # Sized per job: the KV cache is allocated for max_length up front.
        "max_length": min(len(job.prompt_tokens) + job.max_tokens, context),
        "do_sample": job.temperature > 0,
        "top_p": job.top_p,
        "top_k": job.top_k,  # 0 disables top-k, as in llama.cpp
        "repetition_penalty": job.repeat_penalty,
    }
    if job.temperature > 0:
        options["temperature"] = job.temperature
    if job.seed is not None:
        options["random_seed"] = job.seed
    return options


def inspect_onnx_genai(model_id: str, config: OnnxGenaiModel, base_dir: Path) -> ModelFacts:
    """A model folder's facts from its genai_config.json: the context it was built for, and
    the devices its options rule out."""
    folder = _model_dir(config, base_dir)
    built = _built_context(_read_genai_config(folder, model_id), folder, model_id)
    refused = {}
    if config.options.provider_options:
        refused["cpu"] = (
            "options.provider_options apply to the gpu or npu provider a route's device "
            "selects; the cpu takes none: remove them, or route the model to gpu or npu"
        )
    return ModelFacts(built, f"{folder / _GENAI_CONFIG}", refused_devices=refused)


def _model_dir(config: OnnxGenaiModel, base_dir: Path) -> Path:
    """The model folder: `source` names it, or its genai_config.json (pkg: sources name files)."""
    source = config.source
    path = resolve_source(source, base_dir, config.revision)
    folder = path.parent if path.is_file() else path
    if not (folder / _GENAI_CONFIG).is_file():
        raise ModelFileMissingError(
            f"model {source}: {folder} has no {_GENAI_CONFIG}: point source at an ONNX Runtime "
            "GenAI model folder (`python -m zest.engines.convert` makes one from the bundled "
            "SmolLM2)"
        )
    return folder


def _read_genai_config(folder: Path, model_id: str) -> dict[str, Any]:
    path = folder / _GENAI_CONFIG
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EngineError(f"model {model_id!r}: cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise EngineError(f"model {model_id!r}: {path} is not a JSON object")
    return data


def _model_section(genai: dict[str, Any]) -> dict[str, Any]:
    section = genai.get("model")
    return section if isinstance(section, dict) else {}


def _built_context(genai: dict[str, Any], folder: Path, model_id: str) -> int | None:
    """The context the model was built for (model.context_length; None: not said)."""
    value = _model_section(genai).get("context_length")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EngineError(
            f"model {model_id!r}: model.context_length in {folder / _GENAI_CONFIG} is "
            f"{shown(value)}: it must be a whole number of tokens above 0 (the context the "
            "model was built for): correct the file, or build the model again"
        )
    return value


def _backend(
    version: str, providers: tuple[Provider, ...], split: HybridSplit | None, threads: int | None
) -> str:
    names = " + ".join(p.ort_name for p in providers)
    if split is not None:
        where = f"prefill {split.prefill} -> decode {split.decode}"
        return f"onnxruntime-genai {version} (hybrid: {where}; {names})"
    count = "default threads" if not threads else f"{threads} thread{'' if threads == 1 else 's'}"
    return f"onnxruntime-genai {version} ({names}, {count})"


def _folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
