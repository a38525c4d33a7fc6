"""A task's model file as Ollama's /api/pull and /api/delete see it: what pulling it means
(its routes.yaml `source`, fetched by zest's own puller) and removing a copy zest pulled.

- `hf:ORG/REPO/FILE`: downloaded into (or removed from) the Hugging Face cache;
- `cache:FILE` of a model a package ships in chunks: assembled into zest's cache (pkg:NAME);
- any other source (a path, pkg:DIST/FILE, another cache: file) is not zest's to fetch: a
  pull finds it there (or says how to get it), a delete is refused (remove it yourself).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from zest.engines import hf_hub_cache_dir, resolve_source, zest_cache_dir
from zest.engines.assembled import ASSEMBLED
from zest.errors import BadRequestError, ModelBusyError, ModelFileMissingError, UnknownTaskError
from zest.gateway.serving._runtime import Runtime
from zest.router import LoadedRoutes, find_route

__all__ = ["ModelFile", "model_file", "remove_model_file"]


@dataclass(frozen=True)
class ModelFile:
    """A task's model: its id, its source, what `pull` takes to fetch it (None: nothing zest
    can fetch), the revision of an hf: source, and its path when it is here."""

    model_id: str
    source: str
    fetch: str | None
    revision: str
    path: Path | None


def model_file(routes: LoadedRoutes, task: str) -> ModelFile:
    """The model file of `task` (or of a model by id); an unknown name is a 404. A model
    without a file (a remote one) is a 400 saying so."""
    route = find_route(task, None, routes.config)
    model = routes.config.models[route.model]
    source = getattr(model, "source", None)
    if not isinstance(source, str):
        raise BadRequestError(
            f"{task!r} is served by model {route.model!r}, a remote model: it has no file to "
            "pull or delete",
            param="model",
        )
    revision = getattr(model, "revision", None) or "main"
    try:
        path: Path | None = resolve_source(source, routes.base_dir, revision)
    except ModelFileMissingError:
        path = None
    return ModelFile(route.model, source, _fetch_of(source), revision, path)


def _fetch_of(source: str) -> str | None:
    if source.startswith("hf:"):
        return source
    if source.startswith("cache:"):
        name = source.removeprefix("cache:")
        packaged = [package for package, m in ASSEMBLED.items() if m.file == name]
        return f"pkg:{packaged[0]}" if packaged else None
    return None


async def remove_model_file(runtime: Runtime, task: str) -> ModelFile:
    """Remove the copy zest pulled of `task`'s model (its engines unloaded first; a model
    serving requests is a 409). Refused for sources zest did not pull."""
    found = model_file(runtime.routes, task)
    if found.fetch is None:
        raise BadRequestError(
            f"model {found.model_id!r} comes from {found.source}, which zest did not pull: "
            "remove the file yourself and its entry from routes.yaml",
            param="model",
        )
    if found.path is None:
        raise UnknownTaskError(
            f"model {found.model_id!r} ({found.source}) is not here: there is nothing to delete"
        )
    entries = runtime.pool.find(found.model_id)
    if any(entry.busy for entry in entries):
        raise ModelBusyError(
            f"model {found.model_id!r} is serving requests: retry when they end",
            code="model_busy",
        )
    for entry in entries:
        await runtime.pool.unload(entry, "its file is deleted (DELETE /api/delete)")
    _remove(found.path)
    return found


def _remove(path: Path) -> None:
    """A cache: copy whole; an hf: file's snapshot link, and its blob when no other snapshot
    links to it (the Hub cache shares blobs between revisions)."""
    if _under(path, zest_cache_dir()):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        return
    blob = path.resolve()
    path.unlink()
    repo = next((p for p in path.parents if p.parent == hf_hub_cache_dir()), None)
    linked = repo is not None and any(
        link.is_symlink() and link.resolve() == blob for link in (repo / "snapshots").rglob("*")
    )
    if not linked and _under(blob, hf_hub_cache_dir()):
        blob.unlink(missing_ok=True)


def _under(path: Path, folder: Path) -> bool:
    try:
        return os.path.commonpath([path.resolve(), folder.resolve()]) == str(folder.resolve())
    except ValueError:
        return False
