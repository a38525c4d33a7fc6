"""Ollama's /api/pull and /api/delete: a task's model file, fetched by zest's own puller
(`zest models pull`'s) with its progress as Ollama's NDJSON lines, or removed. Both are admin
routes, as POST /v1/load and /v1/unload are: they change what the server holds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Self

from litestar import Response, delete, post
from litestar.response import Stream

from zest.errors import PullError, RequestError, UnknownTaskError
from zest.gateway.http._dialect import DIALECT
from zest.gateway.http._exchange import event_stream
from zest.gateway.http._ollama import OLLAMA
from zest.gateway.http._ollama_shapes import NDJSON, ndjson_line
from zest.gateway.serving import (
    ModelFile,
    OllamaModelRequest,
    OllamaPullRequest,
    Runtime,
    disk_size,
    model_file,
    pull,
    remove_model_file,
)

__all__ = ["OLLAMA_PULL"]

log = logging.getLogger("zest.gateway")
ADMIN_OPT = {DIALECT: OLLAMA, "admin": True}
# A progress line at least every this much of a transfer (and at its end).
_STEP_FRACTION = 0.01
_STEP_BYTES = 8 << 20


class PullFailedError(RequestError):
    """The model's source could not be fetched: the message says why and what to do."""

    status_code = 502
    error_type = "pull_failed"
    outcome = "pull_failed"


class _LineBar:
    """One transfer's progress as Ollama's lines (`pulling NAME`, total, completed), sent to
    the event loop from the puller's thread; a line per 1% or 8 MB, and the last."""

    def __init__(self, send: Any, label: str, digest: str, total: int | None) -> None:
        self.send, self.total, self.completed, self.shown = send, total, 0, -1
        self.status, self.digest = label.replace("downloading", "pulling", 1), digest

    def update(self, count: int | None = None) -> None:
        self.completed += count or 0
        step = max(int((self.total or 0) * _STEP_FRACTION), _STEP_BYTES)
        if self.completed - self.shown >= step:
            self._line()

    def _line(self) -> None:
        self.shown = self.completed
        line = {"status": self.status, "digest": self.digest, "completed": self.completed}
        if self.total is not None:
            line["total"] = self.total
        self.send(line)

    def __enter__(self) -> Self:
        self._line()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is None and self.completed != self.shown:
            self._line()


class _LineBars:
    """serving.Bars drawing into `send` (called from the puller's thread)."""

    def __init__(self, send: Any, digest: str) -> None:
        self.send, self.digest = send, digest

    def transfer(self, label: str, total: int | None) -> _LineBar:
        return _LineBar(self.send, label, self.digest, total)

    def hub(self, label: str) -> Any:
        bars = self

        class HubBar(_LineBar):  # what huggingface_hub builds with tqdm's keywords
            def __init__(self, *args: Any, total: int | None = None, **kwargs: Any) -> None:
                super().__init__(bars.send, label, bars.digest, total)
                self.update(int(kwargs.get("initial") or 0))

        return HubBar


def _pulled_lines(found: ModelFile) -> list[dict[str, Any]]:
    """A file already here that zest cannot fetch: its one transfer, already complete."""
    assert found.path is not None
    size = disk_size(found.path)
    status = f"pulling {found.path.name}"
    return [{"status": status, "digest": found.source, "total": size, "completed": size}]


async def _pull_lines(found: ModelFile) -> AsyncIterator[bytes]:
    """Ollama's progress lines as the pull goes, ending with success (or an error line)."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def send(line: dict[str, Any]) -> None:  # from the puller's thread
        loop.call_soon_threadsafe(lines.put_nowait, line)

    def work() -> None:
        try:
            assert found.fetch is not None
            pull(found.fetch, revision=found.revision, bars=_LineBars(send, found.source))
            send({"status": "success"})
        except PullError as exc:
            send({"error": str(exc)})
        except Exception as exc:
            log.exception("pulling %s failed", found.source)
            send({"error": f"pulling {found.source} failed: {exc}"})
        finally:
            loop.call_soon_threadsafe(lines.put_nowait, None)

    yield ndjson_line({"status": "pulling manifest"})
    if found.fetch is None:
        for done in [*_pulled_lines(found), {"status": "success"}]:
            yield ndjson_line(done)
        return
    running = asyncio.ensure_future(asyncio.to_thread(work))
    try:
        while (line := await lines.get()) is not None:
            yield ndjson_line(line)
    finally:
        await asyncio.shield(running)  # a pull stopped halfway leaves no half file anyway


def _to_pull(runtime: Runtime, task: str) -> ModelFile:
    found = model_file(runtime.routes, task)
    if found.fetch is None and found.path is None:
        raise UnknownTaskError(
            f"model {found.model_id!r} of {task!r} is not here, and its source {found.source} "
            "is not one zest fetches (hf:ORG/REPO/FILE is): copy the file there, or point "
            "source at it"
        )
    return found


@post("/pull", status_code=200, opt=ADMIN_OPT)
async def ollama_pull(data: OllamaPullRequest, runtime: Runtime) -> Response[Any] | Stream:
    """Fetch the model file of the task named (its routes.yaml source): NDJSON progress
    lines, or (stream: false) one `{"status": "success"}` once it is here."""
    found = _to_pull(runtime, data.task())
    if data.stream:
        return event_stream(_pull_lines(found), {}, NDJSON)
    if found.fetch is not None:
        try:
            await asyncio.to_thread(pull, found.fetch, revision=found.revision)
        except PullError as exc:
            raise PullFailedError(str(exc)) from exc
    return Response({"status": "success"})


@delete("/delete", status_code=200, opt=ADMIN_OPT)
async def ollama_delete(data: OllamaModelRequest, runtime: Runtime) -> Response[None]:
    """Remove the copy zest pulled of the task's model file (the task stays in routes.yaml:
    a later pull fetches it again)."""
    await remove_model_file(runtime, data.task())
    return Response(None, status_code=200)


OLLAMA_PULL = [ollama_pull, ollama_delete]
