"""The SHA-256 of a model's files, and the check of its routes.yaml pin (`sha256:`).

A model file's digest is what `sha256sum FILE` prints. A folder model's (onnx-genai) is the
SHA-256 of its manifest: one `DIGEST  RELATIVE/PATH` line per file in the folder (symlinks
followed, subfolders included), sorted by path in byte order, which is what this prints, run
in the folder (for names without a newline or a backslash, which sha256sum would escape):

    find -L . -type f -printf '%P\\0' | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum

Reading a model of several gigabytes takes seconds, so each file's digest is cached by its real
path, size and mtime_ns in `$ZEST_CACHE/digests.json`: a restart reads nothing again, and a
file rewritten (its size or mtime changed) is read anew. The cache trusts a file whose size and
mtime are unchanged; what the pin guards against is the wrong file, not tampering.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zest.engines._base import engine_kind
from zest.engines._sources import resolve_source, zest_cache_dir
from zest.errors import ModelDigestMismatchError, ModelFileMissingError
from zest.router import ModelConfig, RemoteModel

__all__ = [
    "DigestCache",
    "ModelDigest",
    "model_location",
    "model_sha256",
    "verify_model",
]

log = logging.getLogger("zest.engines")
CHUNK = 1 << 20  # read 1 MiB at a time: a model is never held in memory to hash it
MAX_ENTRIES = 4096  # the cache forgets the oldest entries beyond this many


@dataclass(frozen=True)
class ModelDigest:
    """A loaded model's SHA-256, and whether routes.yaml pins it (then it matched: a model
    whose files do not match its pin is never loaded)."""

    sha256: str
    pinned: bool


class DigestCache:
    """File digests by (real path, size, mtime_ns), kept in a small JSON file.

    Safe across threads (one lock) and, for what matters, across processes: the file is
    replaced whole (write, then rename), so a reader sees the old or the new table, and an
    entry lost to a concurrent writer only costs one more read of that file.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def sha256(self, file: Path) -> str:
        """The file's SHA-256: from the cache when its size and mtime are as recorded, else
        read (and recorded)."""
        real = os.path.realpath(file)
        stat = os.stat(real)  # before reading: a file changed while read is read again later
        entry = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        with self._lock:
            cached = self._read().get(real)
        if isinstance(cached, dict) and all(cached.get(k) == v for k, v in entry.items()):
            digest = cached.get("sha256")
            if isinstance(digest, str):
                return digest
        digest = _hash_file(real)
        with self._lock:
            entries = self._read()  # again: another process may have added its own
            entries.pop(real, None)
            entries[real] = {**entry, "sha256": digest}
            self._write(entries)
        return digest

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # none yet, unreadable or damaged: start afresh
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, entries: dict[str, Any]) -> None:
        kept = {path: e for path, e in entries.items() if os.path.exists(path)}
        text = json.dumps(dict(list(kept.items())[-MAX_ENTRIES:]), indent=1)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(prefix=".digests-", dir=self.path.parent)
        except OSError as exc:
            self._not_kept(exc)
            return
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(temporary, self.path)
        except OSError as exc:
            self._not_kept(exc)
            with contextlib.suppress(OSError):
                os.unlink(temporary)

    def _not_kept(self, exc: OSError) -> None:
        """A read-only cache costs a read of the model at each load, nothing more."""
        log.warning("cannot write the digest cache %s (%s): digests are not kept", self.path, exc)


def default_cache() -> DigestCache:
    return DigestCache(zest_cache_dir() / "digests.json")


def model_sha256(path: Path, cache: DigestCache | None = None) -> str:
    """The digest of a model file, or of a model folder's manifest (module docstring)."""
    cache = cache or default_cache()
    if not path.is_dir():
        return cache.sha256(path)
    lines = [f"{cache.sha256(path / name)}  {name}\n" for name in _folder_files(path)]
    return hashlib.sha256("".join(lines).encode("utf-8", "surrogateescape")).hexdigest()


def model_location(config: ModelConfig, base_dir: Path) -> Path:
    """The file or folder a local model loads from: its source, or for a folder model whose
    source names a file in the folder (onnx-genai's genai_config.json), that folder."""
    if isinstance(config, RemoteModel):
        raise ValueError(f"a remote model has no local files (engine {config.engine!r})")
    path = resolve_source(config.source, base_dir, config.revision)
    return path.parent if engine_kind(config.engine).folder_model and path.is_file() else path


def verify_model(
    model_id: str, config: ModelConfig, base_dir: Path, cache: DigestCache | None = None
) -> ModelDigest | None:
    """A local model's digest, checked against its pin (blocking: run it in a thread); None
    for a remote model. A mismatch raises ModelDigestMismatchError with both digests; a
    missing or unreadable file raises ModelFileMissingError, as loading it would."""
    if isinstance(config, RemoteModel):
        return None
    path = model_location(config, base_dir)
    try:
        actual = model_sha256(path, cache)
    except OSError as exc:
        raise ModelFileMissingError(
            f"model {model_id!r}: cannot read {path} ({exc.strerror or exc}): check that the "
            "file is there and readable"
        ) from exc
    if config.sha256 is not None and actual != config.sha256:
        raise ModelDigestMismatchError(
            f"model {model_id!r}: {path} is not the pinned model: expected sha256 "
            f"{config.sha256}, the file has {actual}: re-download the model, or fix "
            f"models.{model_id}.sha256",
            expected=config.sha256,
            actual=actual,
        )
    return ModelDigest(actual, pinned=config.sha256 is not None)


def _folder_files(folder: Path) -> list[str]:
    """Every file under `folder` (symlinks followed), as sorted relative POSIX paths."""
    found = []
    for top, _, names in os.walk(folder, onerror=_raise, followlinks=True):
        for name in names:
            path = Path(top, name)
            if path.is_file():
                found.append(path.relative_to(folder).as_posix())
    return sorted(found, key=os.fsencode)  # byte order, as `LC_ALL=C sort` has it


def _raise(error: OSError) -> None:
    raise error  # an unreadable subfolder: a manifest without it would not be the model's


def _hash_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
