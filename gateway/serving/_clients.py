"""Named clients at the gateway's edge: which tasks a client may call, and its limits, judged
before any model work (docs/teams.md).

A request of a named client is admitted once (all of its choices together) or refused: a task
its entry does not list is a 403; over a limit, a 429 with Retry-After and OpenAI's
x-ratelimit-* headers, and nothing held. Admitted, it holds a slot of the client's concurrent
requests and the completion tokens it may ask for (its max_tokens, bounded by the route's own),
reserved against the per-minute and per-day token limits; when it ends, the reservation is
settled to what it used (prompt + completion), and the slot is given back.

The per-minute and per-day limits are `limits`' fixed windows (a counter per client and limit,
its window started by its first hit), in this process's memory, or in a shared store named by
ZEST_LIMITS_STORAGE (Redis: every replica of a fleet counts against one limit). Concurrent
requests are counted by each replica: a replica that dies takes its slots with it. When the
store cannot be reached (an error, or no answer within ZEST_LIMITS_STORE_TIMEOUT_S), limited
clients are admitted without their limits or refused with a 503, as ZEST_LIMITS_ON_STORE_ERROR
says; the store is then left alone (no request waits on it) and probed until it answers again,
a warning is logged once a minute meanwhile, and readiness says degraded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from zest.engines import Delta
from zest.errors import LimitsUnavailableError, RateLimitedError, TaskNotAllowedError
from zest.gateway.serving._events import ForwardingEvents, RequestEvents
from zest.router import ClientConfig, ClientLimits

if TYPE_CHECKING:
    from limits import RateLimitItem
    from limits.aio.storage import Storage

__all__ = [
    "ADMIN",
    "ANONYMOUS",
    "Caller",
    "ClientGate",
    "Ticket",
    "format_reset",
]

log = logging.getLogger("zest.gateway")
OnStoreError = Literal["allow", "deny"]
MEMORY = "async+memory://"
PROBE_EVERY_S = 2.0  # a failing store is asked again this often (no request waits on it)
REPORT_EVERY_S = 60.0  # a failing store's warning, at most this often
# A reservation is given back only while its window surely lasts (a store's expiry is in whole
# seconds): never into the next window, where it would give the client more than its limit.
_SAME_WINDOW_MARGIN_S = 2.0
_SETTLE_TASKS: set[asyncio.Task[None]] = set()  # settlements running (kept from the collector)


@dataclass(frozen=True)
class Caller:
    """Who sends a request: a named client of the routes file (its entry as the table in force
    when the request arrived said), or a caller that is none (`anonymous`: a key of
    ZEST_API_KEYS, or none on an open server; `admin`: the admin key), which nothing limits."""

    name: str
    client: ClientConfig | None = None

    @property
    def local_only(self) -> bool:
        return self.client is not None and self.client.privacy == "local_only"


ANONYMOUS = Caller("anonymous")
ADMIN = Caller("admin")


@dataclass(frozen=True)
class _Window:
    """One of a client's limits as `limits` counts it: a fixed window's counter in its store,
    under the key and with the expiry its RateLimitItem gives (both made once per client)."""

    kind: Literal["requests", "tokens"]
    key: str  # the routes file's name of the limit (what a refusal names)
    amount: int
    expiry: int  # seconds
    counter: str  # the store's key

    @classmethod
    def of(
        cls, kind: Literal["requests", "tokens"], key: str, item: RateLimitItem, name: str
    ) -> _Window:
        return cls(kind, key, item.amount, item.get_expiry(), item.key_for(name, key))

    def cost(self, reserve: int) -> int:
        return 1 if self.kind == "requests" else reserve


@dataclass(frozen=True)
class _Stats:
    limit: int
    remaining: int
    reset_at: float  # wall clock, as `limits` says it


@dataclass
class Ticket:
    """What one admitted request holds: a slot of its client's concurrent requests (when the
    client has that limit) and the tokens reserved; released once, when every part (choice)
    has ended. `headers`: the x-ratelimit-* headers its answer carries."""

    caller: Caller
    gate: ClientGate | None = None
    reserved: int = 0
    windows: tuple[_Window, ...] = ()
    resets: tuple[float, ...] = ()  # each token window's reset when the tokens were reserved
    headers: dict[str, str] = field(default_factory=dict)
    holds_slot: bool = False
    parts: int = 0
    used: int = 0
    released: bool = False

    def observer(self, events: RequestEvents | None) -> RequestEvents:
        """The events of one part (choice) of the request: `events` told first, then the
        ticket, which counts what the part used and releases itself when all parts ended."""
        self.parts += 1
        return _TicketPart(self, events or RequestEvents())

    def part_ended(self, used: int) -> None:
        self.used += used
        self.parts -= 1
        if self.parts <= 0:
            self.release()

    def release(self) -> None:
        """Give the slot back and settle the tokens (once; later calls change nothing)."""
        if self.released:
            return
        self.released = True
        if self.gate is not None:
            self.gate.release(self)


class _Served(Protocol):
    """What a part's ticket reads of its generation (gateway/serving/_generation.py's
    Generation): named here, not imported, as the front door imports this module."""

    @property
    def cache(self) -> Literal["hit", "miss"] | None: ...

    @property
    def prompt_tokens(self) -> int: ...


class _TicketPart(ForwardingEvents):
    """Forwards a part's events, and tells the ticket what the part used when it ends: its
    prompt and completion tokens; cut short, its prompt and the pieces it streamed."""

    def __init__(self, ticket: Ticket, inner: RequestEvents) -> None:
        super().__init__(inner)
        self.ticket = ticket
        self.gen: _Served | None = None
        self.pieces = 0
        self.ended = False

    def first_token(self, gen: _Served) -> None:
        self.gen = gen
        super().first_token(gen)

    def delta(self, delta: Delta) -> None:
        super().delta(delta)
        self.pieces += 1 if delta.text else 0
        if delta.finish_reason is not None:
            self._end(delta.completion_tokens)

    def failed(self, error: BaseException) -> None:
        super().failed(error)
        self._end(self.pieces)

    def closed(self) -> None:
        super().closed()
        self._end(self.pieces)

    def _end(self, completion: int) -> None:
        if self.ended:
            return
        self.ended = True
        gen, self.gen = self.gen, None  # no cycle through the generation's events
        served = gen is not None and gen.cache != "hit"  # an answer from the cache costs none
        self.ticket.part_ended(gen.prompt_tokens + completion if served and gen else 0)


class ClientGate:
    """Admits the requests of named clients (one per runtime)."""

    def __init__(
        self,
        storage: str = "",
        *,
        on_store_error: OnStoreError = "allow",
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.uri = _async_uri(storage)
        self.on_store_error: OnStoreError = on_store_error
        self.timeout_s = timeout_s
        self.clock = clock
        self.running: dict[str, int] = {}  # each client's requests admitted and not ended
        self.store_problem: str | None = None  # why the store failed last (None: it answers)
        self._storage: Storage | None = None
        self._made: dict[tuple[str, ClientLimits], tuple[_Window, ...]] = {}
        self._reported_at: float | None = None
        self._unreported = 0
        self._probe: asyncio.Task[None] | None = None

    @property
    def shared(self) -> bool:
        return self.uri != MEMORY

    def describe(self) -> str:
        where = "in memory (this replica)" if not self.shared else _redacted(self.uri)
        return f"client limits: counted {where}; on a store error: {self.on_store_error}"

    def check_task(self, caller: Caller, task: str) -> None:
        """TaskNotAllowedError (403) unless the caller may call `task`."""
        client = caller.client
        if client is not None and not client.may_call(task):
            raise TaskNotAllowedError(_not_allowed(caller.name, client, task))

    async def admit(self, caller: Caller, task: str, *, reserve: int) -> Ticket:
        """Admit `caller`'s request of `task`, reserving `reserve` completion tokens, or raise:
        TaskNotAllowedError (403), RateLimitedError (429), LimitsUnavailableError (503)."""
        client = caller.client
        if client is None:
            return Ticket(caller)
        if not client.may_call(task):
            raise TaskNotAllowedError(_not_allowed(caller.name, client, task))
        limits = client.limits
        if not limits.any:
            return Ticket(caller)
        ticket = Ticket(caller, self, reserve)
        if limits.concurrent is not None:  # taken before any await: two at once see it
            self._check_slot(caller.name, limits.concurrent)
            self.running[caller.name] = self.running.get(caller.name, 0) + 1
            ticket.holds_slot = True
        windows = self._windows(caller.name, client)
        try:
            if windows:
                await self._hit(ticket, windows)
        except BaseException:  # refused: the slot is given back, nothing else was taken
            ticket.windows = ()
            ticket.release()
            raise
        return ticket

    def _check_slot(self, name: str, most: int) -> None:
        if self.running.get(name, 0) >= most:
            raise RateLimitedError(
                f"client {name!r} has {most} requests running, its limit "
                f"(clients.{name}.limits.concurrent: {most}): retry when one ends",
                limit="requests",
                headers={"retry-after": "1"},
            )

    def _windows(self, name: str, client: ClientConfig) -> tuple[_Window, ...]:
        """The client's windows, made once per client and limits (a reload that changes its
        limits counts anew: the amount is part of the key)."""
        found = self._made.get((name, client.limits))
        if found is None:
            found = self._made[(name, client.limits)] = _make_windows(name, client)
        return found

    async def _hit(self, ticket: Ticket, windows: tuple[_Window, ...]) -> None:
        """Hit every window, or none: one over its limit takes back the hits before it."""
        if self.store_problem is not None:  # failing: no request waits on it
            self._without_store(ticket.caller.name)
            return
        try:
            if self.shared:
                async with asyncio.timeout(self.timeout_s):
                    stats = await self._hit_all(ticket, windows)
            else:  # this process's memory: nothing to wait for
                stats = await self._hit_all(ticket, windows)
        except RateLimitedError:
            raise
        except Exception as exc:  # the store's error (or none in time): never a 500
            self._store_failed(exc)
            self._without_store(ticket.caller.name)
            return
        ticket.headers.update(_headers(windows, stats))
        tokens = [(w, s) for w, s in zip(windows, stats, strict=True) if w.kind == "tokens"]
        ticket.windows = tuple(w for w, _ in tokens)
        ticket.resets = tuple(s.reset_at for _, s in tokens)

    async def _hit_all(self, ticket: Ticket, windows: tuple[_Window, ...]) -> list[_Stats]:
        """As `limits`' FixedWindowRateLimiter hits: the counter plus the cost, over the limit
        when above it; the counts it answers are the headers' (no second read)."""
        storage = self._store()
        counts: list[int] = []
        for window in windows:
            cost = window.cost(ticket.reserved)
            counts.append(await storage.incr(window.counter, window.expiry, amount=cost))
            if counts[-1] > window.amount:  # counted all the same: taken back, every hit
                for hit in windows[: len(counts)]:
                    await storage.incr(hit.counter, hit.expiry, amount=-hit.cost(ticket.reserved))
                stats = [await self._stats(storage, w) for w in windows]
                raise self._refusal(ticket, window, windows, stats)
        return [
            _Stats(w.amount, max(0, w.amount - count), await storage.get_expiry(w.counter))
            for w, count in zip(windows, counts, strict=True)
        ]

    @staticmethod
    async def _stats(storage: Storage, window: _Window) -> _Stats:
        count = await storage.get(window.counter)
        return _Stats(
            window.amount, max(0, window.amount - count), await storage.get_expiry(window.counter)
        )

    def _refusal(
        self, ticket: Ticket, over: _Window, windows: tuple[_Window, ...], stats: list[_Stats]
    ) -> RateLimitedError:
        name, found = ticket.caller.name, stats[windows.index(over)]
        wait = max(1, math.ceil(found.reset_at - time.time()))
        cost = over.cost(ticket.reserved)
        asked = "1 request" if over.kind == "requests" else f"{cost} tokens (max_tokens)"
        message = (
            f"client {name!r} is over its limit clients.{name}.limits.{over.key}: "
            f"{found.limit}, {found.remaining} left, this request needs {asked}: retry in "
            f"{wait} s"
        )
        if over.kind == "tokens" and cost > found.limit:
            message += ", or ask for fewer max_tokens (this request could never fit)"
        headers = {**_headers(windows, stats), "retry-after": str(wait)}
        return RateLimitedError(message, limit=over.kind, headers=headers)

    def _store(self) -> Storage:
        """`limits`' asyncio storage, made on first use (inside the event loop): in memory
        (its synchronous one would start a timer thread per request to expire its counters),
        or shared, whose errors then come wrapped in `limits`' StorageError."""
        if self._storage is None:
            from limits.aio.storage import Storage
            from limits.storage import storage_from_string

            storage = storage_from_string(self.uri, wrap_exceptions=self.shared)
            assert isinstance(storage, Storage)  # an async+ URI: an asyncio storage
            self._storage = storage
        return self._storage

    def _without_store(self, name: str) -> None:
        """A limited client's request while the store fails: admitted without its limits
        (allow), or refused (deny)."""
        if self.on_store_error == "deny":
            raise LimitsUnavailableError(
                f"client {name!r} has limits, and their store cannot be reached "
                f"({self.store_problem}): the server refuses limited clients meanwhile "
                "(ZEST_LIMITS_ON_STORE_ERROR=deny); retry shortly"
            )

    def _store_failed(self, exc: BaseException) -> None:
        problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, TimeoutError):
            problem = f"no answer within {self.timeout_s:g} s"
        self.store_problem = problem
        self._report()
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._probe_until_back())

    def _report(self) -> None:
        """A warning at the first failure, then at most once a minute (with how many more)."""
        now = self.clock()
        if self._reported_at is not None and now - self._reported_at < REPORT_EVERY_S:
            self._unreported += 1
            return
        more = f" ({self._unreported} more since the last warning)" if self._unreported else ""
        log.warning(
            "client limits: the store %s cannot be reached (%s)%s: limited clients are %s "
            "until it answers (ZEST_LIMITS_ON_STORE_ERROR=%s)",
            _redacted(self.uri),
            self.store_problem,
            more,
            "admitted without their limits" if self.on_store_error == "allow" else "refused",
            self.on_store_error,
        )
        self._reported_at, self._unreported = now, 0

    async def _probe_until_back(self) -> None:
        while self.store_problem is not None:
            await asyncio.sleep(PROBE_EVERY_S)
            try:
                storage = self._store()
                async with asyncio.timeout(self.timeout_s):
                    answers = await storage.check()
            except Exception:
                answers = False
            if answers:
                log.info("client limits: the store %s answers again", _redacted(self.uri))
                self.store_problem = None
            else:
                self._report()

    def release(self, ticket: Ticket) -> None:
        """A request ended: its slot back at once, its tokens settled in the background."""
        name = ticket.caller.name
        if ticket.holds_slot:
            self.running[name] = max(0, self.running.get(name, 0) - 1)
        if not ticket.windows or ticket.used == ticket.reserved:
            return
        task = asyncio.ensure_future(self._settle(ticket))
        _SETTLE_TASKS.add(task)
        task.add_done_callback(_SETTLE_TASKS.discard)

    async def _settle(self, ticket: Ticket) -> None:
        """The settlement, in the background: nobody waits for it."""
        if self.store_problem is not None:
            return
        storage = self._store()
        try:
            async with asyncio.timeout(self.timeout_s):
                for key, expiry, change in self._changes(ticket):
                    await storage.incr(key, expiry, amount=change)
        except Exception as exc:
            self._store_failed(exc)

    @staticmethod
    def _changes(ticket: Ticket) -> list[tuple[str, int, int]]:
        """Count what the request used instead of what it reserved: more is added; less is
        given back while the window it was reserved in lasts (its reset, as the store said at
        the admission, is still ahead: the reservation is in the counter)."""
        change, now = ticket.used - ticket.reserved, time.time()
        return [
            (window.counter, window.expiry, change)
            for window, reset_at in zip(ticket.windows, ticket.resets, strict=True)
            if change > 0 or now < reset_at - _SAME_WINDOW_MARGIN_S
        ]

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe


def _make_windows(name: str, client: ClientConfig) -> tuple[_Window, ...]:
    from limits import RateLimitItemPerDay, RateLimitItemPerMinute

    limits, found = client.limits, list[_Window]()
    if limits.requests_per_minute is not None:
        rpm = RateLimitItemPerMinute(limits.requests_per_minute, namespace="zest")
        found.append(_Window.of("requests", "requests_per_minute", rpm, name))
    if limits.tokens_per_minute is not None:
        tpm = RateLimitItemPerMinute(limits.tokens_per_minute, namespace="zest")
        found.append(_Window.of("tokens", "tokens_per_minute", tpm, name))
    if limits.tokens_per_day is not None:
        tpd = RateLimitItemPerDay(limits.tokens_per_day, namespace="zest")
        found.append(_Window.of("tokens", "tokens_per_day", tpd, name))
    return tuple(found)


def _headers(windows: tuple[_Window, ...], stats: list[_Stats]) -> dict[str, str]:
    """OpenAI's x-ratelimit-* headers: the requests trio (requests_per_minute) and the tokens
    trio (of the token limit with the least left)."""
    now, headers = time.time(), {}
    found = list(zip(windows, stats, strict=True))
    for kind in ("requests", "tokens"):
        of_kind = [s for w, s in found if w.kind == kind]
        if not of_kind:
            continue
        tightest = min(of_kind, key=lambda s: s.remaining)
        headers[f"x-ratelimit-limit-{kind}"] = str(tightest.limit)
        headers[f"x-ratelimit-remaining-{kind}"] = str(tightest.remaining)
        headers[f"x-ratelimit-reset-{kind}"] = format_reset(tightest.reset_at - now)
    return headers


def format_reset(seconds: float) -> str:
    """A wait as OpenAI's reset headers write it: 250ms, 12.5s, 6m0s, 23h59m59s."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    if seconds < 60:
        return f"{math.ceil(seconds * 10) / 10:g}s"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes}m{secs}s" if hours else f"{minutes}m{secs}s"


def _not_allowed(name: str, client: ClientConfig, task: str) -> str:
    allowed = ", ".join(client.tasks) if isinstance(client.tasks, tuple) else "*"
    return (
        f"client {name!r} may not call task {task!r} (clients.{name}.tasks: {allowed}): call "
        f"one of its tasks, or ask for {task!r} to be added to clients.{name}.tasks in "
        "routes.yaml"
    )


def _async_uri(storage: str) -> str:
    """ZEST_LIMITS_STORAGE as `limits` names its asyncio storages (redis://... is
    async+redis://...); empty: this process's memory."""
    storage = storage.strip()
    if not storage or storage in (MEMORY, "memory://"):
        return MEMORY
    return storage if storage.startswith("async+") else f"async+{storage}"


def _redacted(uri: str) -> str:
    """A store's URI as logged: a password in it is not."""
    scheme, sep, rest = uri.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not sep or not at:
        return uri
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user + ':' if user else ''}[redacted]@{host}"
