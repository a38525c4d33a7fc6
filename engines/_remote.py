"""The remote engine: an OpenAI-compatible upstream (vLLM, llama.cpp server, Ollama, Lemonade)
over httpx, its deltas streamed through as they arrive.

At this boundary:
- privacy: a job of a local_only route is refused, and so is everything while
  ZEST_PRIVACY=strict, before any byte leaves the machine (the planner already keeps such
  attempts out; this is the second line of defence);
- retries: a 429 or 5xx answer is retried with exponential backoff, honouring Retry-After, up to
  `retries` times and only before the first token; a Retry-After longer than
  `max_retry_wait_s` is not waited for;
- errors: the upstream's errors become zest's (`translate_status`: a 429 stays a 429, a 503
  stays a 503, each with the upstream's Retry-After), foreign ones are chained;
- logs: never the prompt, the completion or the key.

Remote models have no local tokenizer: zest budgets them with an approximate count (see
policies.approximate_tokens) and reports the upstream's own usage figures when it sends them.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import os
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import EventSource, SSEError

from zest.engines._base import (
    Delta,
    EmbeddingInput,
    Embeddings,
    Engine,
    EngineInfo,
    FinishReason,
    GenerationJob,
    Privacy,
    StageStats,
)
from zest.errors import (
    BadRequestError,
    ContextLengthExceededError,
    EngineError,
    GatewayTimeoutError,
    OverloadedError,
    PrivacyError,
    RequestError,
    ServiceUnavailableError,
    UpstreamRejectedError,
)
from zest.router import Placement, RemoteModel, kind_of

__all__ = ["CONTENT_PARTS", "RemoteEngine", "forwarded_message", "retry_delay", "translate_status"]

# A chat message's key for its content parts as the client sent them (JSON text), beside its
# text in `content`, when they hold more than text (images): the remote engine forwards them
# as they came; a local engine, which reads only the text, is never planned for them (the
# planner's `images` capability).
CONTENT_PARTS = "content_parts"

log = logging.getLogger("zest.engines")
_CONTEXT_HINTS = ("context length", "context window", "context_length", "maximum context")


class RemoteEngine(Engine):
    name = kind_of(RemoteModel)

    def __init__(
        self,
        model_id: str,
        config: RemoteModel,
        base_dir: Path,
        placement: Placement,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        strict_privacy: bool = False,
    ) -> None:
        """`transport`: httpx's (tests pass httpx.MockTransport: every fault without an
        upstream); `sleep`: how a retry waits (tests pass a fake clock's); `strict_privacy`:
        refuse to load or run (the Runtime arms it from Settings.privacy, ZEST_PRIVACY)."""
        self.model_id, self.config, self.placement = model_id, config, placement
        # The engine refuses on its own authority too, not only through the planner.
        self.strict_privacy = strict_privacy
        self._client: httpx.AsyncClient | None = None
        self._headers: dict[str, str] = {}
        self._transport, self._sleep = transport, sleep

    def load(self) -> EngineInfo:
        """Check what can be checked without a request: privacy and the key's variable."""
        self._refuse_if_strict()
        name = self.config.api_key_env
        if name is not None:
            # The variable routes.yaml names for this upstream's key: a secret kept out of the
            # file and out of Settings (each model names its own), read once, at load.
            key = os.environ.get(name)
            if not key:
                raise ServiceUnavailableError(
                    f"model {self.model_id!r}: the environment variable {name} "
                    f"(models.{self.model_id}.api_key_env) is not set: export it before "
                    "starting zest",
                    code="engine_not_configured",
                )
            self._headers = {"authorization": f"Bearer {key}"}
        return self.info()

    def info(self) -> EngineInfo:
        return EngineInfo(
            engine=self.name,
            model=self.model_id,
            device=self.placement.label,
            backend=f"OpenAI-compatible upstream {self.config.base_url} "
            f"(model {self.config.model})",
            context_length=self.config.context_length or 0,
            source=self.config.base_url,
        )

    def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        return self._stream(job)

    async def embed(
        self, texts: Sequence[EmbeddingInput], *, privacy: Privacy = "local_only"
    ) -> Embeddings:
        """The upstream's /embeddings for `texts` (what privacy allows, as for generation);
        token ids go as they came: the upstream knows its vocabulary."""
        self._refuse_if_strict()
        if privacy != "allow_remote":
            raise PrivacyError(
                f"model {self.model_id!r} is remote and this request's route is local_only: "
                "its input may not leave the machine"
            )
        client = self._client_now()
        body = {"model": self.config.model, "input": list(texts), "encoding_format": "float"}
        response = await self._send(client, client.build_request("POST", "/embeddings", json=body))
        raw = await response.aread()
        await response.aclose()
        if response.status_code != 200:
            raise translate_status(response.status_code, raw, self.model_id, self.config)
        try:
            answer = json.loads(raw)
            rows = sorted(answer["data"], key=lambda row: row["index"])
            vectors = tuple(tuple(float(x) for x in row["embedding"]) for row in rows)
        except (ValueError, KeyError, TypeError) as exc:
            raise EngineError(
                f"upstream {self.config.base_url} sent invalid embeddings: {exc}"
            ) from exc
        used = (answer.get("usage") or {}).get("prompt_tokens") or 0
        return Embeddings(vectors, int(used))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # --- one request -------------------------------------------------------------------------

    async def _stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        self._refuse_if_strict()  # logprobs never reach here: the kind does not honour them
        if job.privacy != "allow_remote":
            raise PrivacyError(
                f"model {self.model_id!r} is remote and this request's route is local_only: "
                "its prompt may not leave the machine"
            )
        started = time.perf_counter()
        reader = _Reader(job, started, self.config.base_url, self.config.timeouts.read_s)
        try:
            response = await self._open(job)
            try:
                async for delta in reader.read(response):
                    yield delta
            finally:
                await response.aclose()
        except (asyncio.CancelledError, GeneratorExit):
            if not reader.logged:  # stopped before its last delta: its line, as a local job's
                reader.log_line("cancelled", reader.chunks)
            raise

    def _refuse_if_strict(self) -> None:
        if self.strict_privacy:
            raise PrivacyError(
                f"model {self.model_id!r} is remote and ZEST_PRIVACY=strict: no remote engine "
                "may be reached"
            )

    def _client_now(self) -> httpx.AsyncClient:
        # Created on first use, in the event loop that serves requests.
        if self._client is None:
            timeouts = self.config.timeouts
            self._client = httpx.AsyncClient(
                base_url=self.config.base_url,
                headers=self._headers,
                timeout=httpx.Timeout(timeouts.read_s, connect=timeouts.connect_s),
                # At least as many connections as the runner lets requests through at once.
                limits=httpx.Limits(max_connections=max(self.config.max_in_flight, 10)),
                transport=self._transport,
            )
        return self._client

    async def _open(self, job: GenerationJob) -> httpx.Response:
        """POST the request; retry 429/5xx before the first token; return a 200 response."""
        client = self._client_now()
        path = "/completions" if job.prompt.kind == "completion" else "/chat/completions"
        retries = self.config.retries
        for attempt in range(retries + 1):
            request = client.build_request("POST", path, json=self._body(job))
            response = await self._send(client, request)
            if response.status_code == 200:
                return response
            body = await response.aread()
            await response.aclose()
            error = translate_status(response.status_code, body, self.model_id, self.config)
            _pass_on_retry_after(error, response)
            delay = retry_delay(response, attempt, self.config)
            if delay is None or attempt == retries:
                raise _spent(error, attempt)
            log.warning(
                "%s: upstream %s answered %d; retry %d of %d in %.2fs",
                job.label or "job",
                self.config.base_url,
                response.status_code,
                attempt + 1,
                retries,
                delay,
            )
            await self._sleep(delay)
        raise AssertionError("the loop returns or raises")

    async def _send(self, client: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
        url = self.config.base_url
        try:
            return await client.send(request, stream=True)
        except httpx.ReadTimeout as exc:
            raise GatewayTimeoutError(
                f"upstream {url} sent no answer within {self.config.timeouts.read_s:g}s "
                f"(models.{self.model_id}.timeouts.read_s)",
                code="first_token_timeout",
            ) from exc
        except httpx.PoolTimeout as exc:  # zest's own connections are all busy: not the upstream
            raise OverloadedError(
                f"every connection to upstream {url} is busy (none free within "
                f"{self.config.timeouts.connect_s:g}s): retry shortly, or lower "
                f"models.{self.model_id}.max_in_flight",
                retry_after=1,
            ) from exc
        except httpx.TransportError as exc:
            raise ServiceUnavailableError(
                f"upstream {url} is unreachable: {type(exc).__name__}: {exc}",
                code="upstream_unreachable",
            ) from exc

    def _body(self, job: GenerationJob) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.config.model,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": job.max_tokens,
            "temperature": job.temperature,
            "top_p": job.top_p,
            "frequency_penalty": job.frequency_penalty,
            "presence_penalty": job.presence_penalty,
        }
        if job.prompt.kind == "completion":
            body["prompt"] = job.prompt.text
            if job.prompt.suffix is not None:
                body["suffix"] = job.prompt.suffix
        else:
            body["messages"] = [forwarded_message(m) for m in job.prompt.messages]
        if job.stop:
            body["stop"] = list(job.stop)
        if job.logit_bias:
            body["logit_bias"] = {str(token): bias for token, bias in job.logit_bias}
        if job.response_format is not None:
            body["response_format"] = job.response_format.as_openai()
        if job.seed is not None:
            body["seed"] = job.seed
        return body


def forwarded_message(message: Mapping[str, str]) -> dict[str, Any]:
    """A chat message as the upstream gets it: its content parts as the client sent them
    (images included), or, when trimming cut its text, that text followed by its other parts."""
    sent: dict[str, Any] = {k: v for k, v in message.items() if k != CONTENT_PARTS}
    if CONTENT_PARTS not in message:
        return sent
    parts: list[dict[str, Any]] = json.loads(message[CONTENT_PARTS])
    texts = [part for part in parts if part.get("type") == "text"]
    if "".join(part["text"] for part in texts) != message["content"]:  # trimmed
        others = [part for part in parts if part.get("type") != "text"]
        parts = [{"type": "text", "text": message["content"]}, *others]
    sent["content"] = parts
    return sent


def _spent(error: RequestError, attempt: int) -> RequestError:
    if attempt and _unavailable(error):
        error.message += f" (after {attempt} retries)"
    return error


def _unavailable(error: RequestError) -> bool:
    """An upstream's 429 (overloaded) or 503 (upstream_unavailable): worth retrying later."""
    return isinstance(error, OverloadedError) or error.code == "upstream_unavailable"


def translate_status(status: int, body: bytes, model_id: str, config: RemoteModel) -> RequestError:
    """zest's error for an upstream's non-200 answer (its message quoted, never our prompt)."""
    message = _upstream_message(body)
    where = f"upstream {config.base_url}"
    if status == 429:
        return OverloadedError(f"{where} is overloaded ({status}): {message}")
    if status == 503:  # the upstream is down, not zest's client sending too much: a 503 too
        return ServiceUnavailableError(
            f"{where} is unavailable ({status}): {message}", code="upstream_unavailable"
        )
    if status >= 500:
        return EngineError(f"{where} failed ({status}): {message}")
    if status in (400, 413, 422) and _is_context_error(body, message):
        return ContextLengthExceededError(f"{where}, model {model_id!r}: {message}")
    if status in (400, 422):
        return BadRequestError(f"{where} refused the request ({status}): {message}")
    if status in (401, 403):
        return UpstreamRejectedError(
            f"{where} refused the credentials ({status}): check the key in the variable named "
            f"by models.{model_id}.api_key_env"
        )
    return UpstreamRejectedError(
        f"{where} answered {status}: {message}: check models.{model_id}.base_url and model"
    )


def _upstream_message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:300] or "no message"
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:300]
    if isinstance(data, dict) and data.get("detail"):
        return str(data["detail"])[:300]
    return str(error or data)[:300]


def _is_context_error(body: bytes, message: str) -> bool:
    return b"context_length_exceeded" in body or any(h in message.lower() for h in _CONTEXT_HINTS)


def retry_delay(response: httpx.Response, attempt: int, config: RemoteModel) -> float | None:
    """Seconds to wait before retrying this answer; None when it is not worth retrying."""
    status = response.status_code
    if status != 429 and status < 500:
        return None
    after = _retry_after(response.headers.get("retry-after"))
    if after is None:
        return min(config.backoff_s * 2.0**attempt, config.max_retry_wait_s)
    return after if after <= config.max_retry_wait_s else None


def _pass_on_retry_after(error: RequestError, response: httpx.Response) -> None:
    """An overloaded or unavailable upstream's own Retry-After goes on to zest's client,
    rounded up."""
    after = _retry_after(response.headers.get("retry-after"))
    if not _unavailable(error) or after is None:
        return
    seconds = max(1, math.ceil(after))
    if isinstance(error, OverloadedError):
        error.retry_after = seconds
    error.headers["retry-after"] = str(seconds)


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds: a number of seconds or an HTTP date."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:  # "nan" and "inf" parse as floats but say nothing: back off as without the header
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


class _Reader:
    """Turns the upstream's SSE stream into Deltas: the first carries the time to first token,
    the last the finish reason, the counts and the figures."""

    def __init__(self, job: GenerationJob, started: float, url: str, read_s: float) -> None:
        self.job, self.started, self.url, self.read_s = job, started, url, read_s
        self.first_ms: float | None = None
        self.first_at = 0.0
        self.chunks = 0
        self.finish: FinishReason | None = None
        self.usage: dict[str, Any] = {}
        self.logged = False  # the job's line is written

    async def read(self, response: httpx.Response) -> AsyncIterator[Delta]:
        done = False
        try:
            async for event in EventSource(response).aiter_sse():
                data = event.data.strip()
                if data == "[DONE]":
                    done = True
                    break
                if data and (text := self._take(json.loads(data))):
                    yield self._delta(text)
        except httpx.ReadTimeout:  # headers came, then nothing: a timeout, not a failure
            token = "first token" if self.first_ms is None else "next token"
            raise GatewayTimeoutError(
                f"upstream {self.url} sent its headers, then no {token} within {self.read_s:g}s "
                "(timeouts.read_s of the model)",
                code="first_token_timeout" if self.first_ms is None else "total_timeout",
            ) from None
        except SSEError as exc:  # not an event stream (a proxy's page, a JSON body)
            raise EngineError(f"upstream {self.url} did not answer with events: {exc}") from exc
        except httpx.TransportError as exc:
            raise EngineError(
                f"upstream {self.url}: the stream broke: {type(exc).__name__}: {exc}"
            ) from exc
        except ValueError as exc:
            raise EngineError(f"upstream {self.url} sent an invalid event: {exc}") from exc
        if not done and self.finish is None:
            raise EngineError(f"upstream {self.url}: the stream ended before it finished")
        yield self._final()

    def log_line(self, finish: str, completion: int, prompt: int | None = None) -> None:
        """The job's one line, as a local engine writes it."""
        self.logged = True
        log.info(
            "%s: finish=%s prompt_tokens=%s completion_tokens=%d max_tokens=%d seconds=%.3f",
            self.job.label or "job",
            finish,
            prompt if prompt is not None else "unknown",
            completion,
            self.job.max_tokens,
            time.perf_counter() - self.started,
        )

    def _take(self, event: dict[str, Any]) -> str:
        """The text of one event; records finish reason and usage; raises on an error event."""
        if "error" in event:
            raise EngineError(
                f"upstream {self.url} failed: {_upstream_message(json.dumps(event).encode())}"
            )
        self.usage = event.get("usage") or self.usage
        choices = event.get("choices") or []
        if not choices:
            return ""
        choice = choices[0]
        if choice.get("finish_reason"):
            self.finish = "length" if choice["finish_reason"] == "length" else "stop"
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        return str(text or "")

    def _delta(self, text: str) -> Delta:
        self.chunks += 1
        if self.first_ms is None:
            self.first_at = time.perf_counter()
            self.first_ms = (self.first_at - self.started) * 1000
            return Delta(text, stats=StageStats("remote", "remote", self.first_ms))
        return Delta(text)

    def _final(self) -> Delta:
        completion = int(self.usage.get("completion_tokens") or self.chunks)
        prompt = self.usage.get("prompt_tokens")
        decode_ms = (time.perf_counter() - self.first_at) * 1000 if self.first_ms else 0.0
        stats = StageStats(
            "remote",
            "remote",
            self.first_ms or 0.0,
            decode_ms=decode_ms,
            decode_tokens=max(completion - 1, 0),
        )
        self.finish = self.finish or "stop"
        self.log_line(self.finish, completion, prompt)
        return Delta(
            "",
            finish_reason=self.finish,
            completion_tokens=completion,
            stats=stats,
            prompt_tokens=int(prompt) if prompt is not None else None,
        )
