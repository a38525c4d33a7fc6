"""EnginePool's lifecycle rules, over engines that only count loads and closes (the real
engines load through the same pool in tests/e2e/test_lifecycle.py)."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncGenerator, Callable, Coroutine
from pathlib import Path
from typing import Any, ClassVar

import pytest

from zest.engines import Delta, Engine, EngineInfo, GenerationJob, ModelDigest
from zest.engines._pool import EnginePool, EngineSpec, ModelPolicy, describe
from zest.errors import (
    EngineError,
    ModelDigestMismatchError,
    OverloadedError,
    ServiceUnavailableError,
)
from zest.router import Device, LlamaCppModel, Placement, RemoteModel

CPU = Device("cpu", frozenset({"llamacpp"}), "test")
ON_CPU = Placement(CPU, CPU)


def sync(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


class LoadGate:
    """Holds loads until opened, and says when one has started: tests order events with it."""

    def __init__(self) -> None:
        self.started, self.opened = threading.Event(), threading.Event()

    async def wait_started(self) -> None:
        assert await asyncio.to_thread(self.started.wait, 10), "no load started within 10 s"


class CountingEngine(Engine):
    name = "counting"
    made: ClassVar[list[str]] = []
    loads: ClassVar[list[str]] = []
    closes: ClassVar[list[str]] = []

    def __init__(self, model_id: str, gate: LoadGate | None = None) -> None:
        self.model_id, self.placement, self._gate = model_id, ON_CPU, gate
        CountingEngine.made.append(model_id)
        self.hold: asyncio.Event | None = None  # set: a generation waits for it

    def load(self) -> EngineInfo:
        if self._gate is not None:
            self._gate.started.set()
            assert self._gate.opened.wait(10), "the test never opened the load gate"
        CountingEngine.loads.append(self.model_id)
        return self.info()

    def info(self) -> EngineInfo:
        return EngineInfo("counting", self.model_id, "cpu", "test", 64, "memory")

    async def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        if self.hold is not None:
            await self.hold.wait()
        yield Delta(text="x", finish_reason="stop", completion_tokens=1)

    async def close(self) -> None:
        CountingEngine.closes.append(self.model_id)


@pytest.fixture(autouse=True)
def _reset() -> None:
    CountingEngine.made, CountingEngine.loads, CountingEngine.closes = [], [], []


def spec(model_id: str, source: str = "m.gguf") -> EngineSpec:
    config = LlamaCppModel(engine="llamacpp", source=source)
    return EngineSpec(model_id, config, Path("/routes"), ON_CPU)


def pool(
    max_loaded: int | None = None,
    policies: dict[str, ModelPolicy] | None = None,
    gate: LoadGate | None = None,
    current: dict[str, EngineSpec] | None = None,
) -> tuple[EnginePool, list[float]]:
    """A pool over counting engines; `current` stands for the routes file in force (a test
    edits it as a reload would)."""
    now = [0.0]
    table = policies or {}
    made = EnginePool(
        lambda s: CountingEngine(s.model_id, gate),
        policy=lambda model: table.get(model, ModelPolicy()),
        current=None if current is None else current.get,
        max_loaded=max_loaded,
        clock=lambda: now[0],
    )
    return made, now


def loaded(engines: EnginePool) -> list[str]:
    return [entry.spec.model_id for entry in engines.loaded()]


async def use(engines: EnginePool, model_id: str) -> None:
    lease = await engines.acquire(spec(model_id))
    lease.release()


@sync
async def test_two_requests_for_an_unloaded_model_load_it_once() -> None:
    gate = LoadGate()
    engines, _ = pool(gate=gate)
    first_task = asyncio.ensure_future(engines.acquire(spec("a")))
    await gate.wait_started()  # the first request is loading the model ...
    second_task = asyncio.ensure_future(engines.acquire(spec("a")))  # ... when the second comes
    gate.opened.set()
    first, second = await asyncio.gather(first_task, second_task)
    assert CountingEngine.loads == ["a"]
    assert first.engine is second.engine


@sync
async def test_a_caller_that_gives_up_does_not_cancel_the_load_for_the_others() -> None:
    gate = LoadGate()
    engines, _ = pool(gate=gate)
    impatient = asyncio.ensure_future(engines.acquire(spec("a")))
    patient = asyncio.ensure_future(engines.acquire(spec("a")))
    await gate.wait_started()  # both callers have run up to waiting for the load by now
    impatient.cancel()
    with pytest.raises(asyncio.CancelledError):
        await impatient
    gate.opened.set()  # the load finishes only after the impatient caller has gone
    lease = await patient
    assert lease.info.model == "a"
    assert CountingEngine.loads == ["a"]


@sync
async def test_the_cap_unloads_the_least_recently_used_model() -> None:
    engines, now = pool(max_loaded=2)
    for model, at in (("a", 1.0), ("b", 2.0), ("a", 3.0)):  # a used again: b is now the oldest
        now[0] = at
        await use(engines, model)
    await use(engines, "c")
    assert CountingEngine.closes == ["b"]
    assert loaded(engines) == ["a", "c"]


@sync
async def test_a_pinned_model_is_never_the_one_evicted() -> None:
    engines, _ = pool(max_loaded=2, policies={"a": ModelPolicy(pinned=True)})
    for model in ("a", "b", "c"):
        await use(engines, model)
    assert CountingEngine.closes == ["b"]
    assert loaded(engines) == ["a", "c"]


@sync
async def test_a_busy_model_is_not_unloaded_under_its_request() -> None:
    engines, _ = pool(max_loaded=1)
    held = await engines.acquire(spec("a"))
    await use(engines, "b")  # over the cap for now: a is serving a request
    assert loaded(engines) == ["a", "b"]
    assert CountingEngine.closes == []
    held.release()
    await engines.sweep()  # the sweep brings the count back to the cap
    assert CountingEngine.closes == ["a"]


def test_two_first_requests_for_different_models_do_not_both_take_the_room(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A load in flight counts against the cap: the second waits for it to end, then decides
    with the first loaded (here busy with its request: over the cap, said, swept back)."""

    async def scenario() -> None:
        gate = LoadGate()
        engines, _ = pool(max_loaded=1, gate=gate)
        first = asyncio.ensure_future(engines.acquire(spec("a")))
        await gate.wait_started()
        second = asyncio.ensure_future(engines.acquire(spec("b")))
        await asyncio.sleep(0.05)
        assert CountingEngine.made == ["a"]  # b has not started beside a
        gate.opened.set()
        held, other = await asyncio.gather(first, second)
        assert CountingEngine.made == ["a", "b"]
        held.release()
        other.release()
        await engines.sweep()
        assert len(engines.loaded()) == 1

    asyncio.run(scenario())
    assert "goes over max_loaded_models=1" in caplog.text


@sync
async def test_a_queued_request_keeps_a_model_busy() -> None:
    engines, _ = pool(max_loaded=1)
    await use(engines, "a")
    entry = engines.loaded()[0]
    assert isinstance(entry.engine, CountingEngine)
    entry.engine.hold = asyncio.Event()
    running = asyncio.ensure_future(
        anext(entry.runner.stream(GenerationJob.greedy([1], max_tokens=1)))
    )
    await asyncio.sleep(0)  # admitted by the runner, generating
    assert entry.runner.pending == 1
    await use(engines, "b")
    assert CountingEngine.closes == []
    entry.engine.hold.set()
    assert (await running).finish_reason == "stop"


@sync
async def test_keep_alive_unloads_a_model_idle_that_long() -> None:
    engines, now = pool(policies={"a": ModelPolicy(keep_alive=30.0)})
    await use(engines, "a")
    await use(engines, "b")  # no keep_alive: stays
    now[0] = 29.0
    await engines.sweep()
    assert loaded(engines) == ["a", "b"]
    now[0] = 30.0
    await engines.sweep()
    assert loaded(engines) == ["b"]
    assert CountingEngine.closes == ["a"]


@sync
async def test_keep_alive_counts_from_the_end_of_the_last_request() -> None:
    engines, now = pool(policies={"a": ModelPolicy(keep_alive=10.0)})
    lease = await engines.acquire(spec("a"))
    now[0] = 60.0
    await engines.sweep()
    assert loaded(engines) == ["a"]  # busy all along
    lease.release()
    now[0] = 65.0
    await engines.sweep()
    assert loaded(engines) == ["a"]
    now[0] = 70.0
    await engines.sweep()
    assert loaded(engines) == []


@sync
async def test_a_pinned_model_ignores_keep_alive() -> None:
    engines, now = pool(policies={"a": ModelPolicy(keep_alive=1.0, pinned=True)})
    await use(engines, "a")
    now[0] = 100.0
    await engines.sweep()
    assert loaded(engines) == ["a"]


@sync
async def test_a_reload_retires_changed_models_once_their_requests_end() -> None:
    table = {"a": spec("a"), "b": spec("b")}
    engines, _ = pool(current=table)
    held = await engines.acquire(spec("a"))
    await use(engines, "b")
    table["a"] = spec("a", source="other.gguf")  # the reload
    retired = engines.retire_changed()
    assert [entry.spec.model_id for entry in retired] == ["a"]
    await engines.sweep()
    assert CountingEngine.closes == []  # the old a still serves its request
    lease = await engines.acquire(table["a"])  # a new request gets the new definition
    assert lease.engine is not held.engine
    assert CountingEngine.loads == ["a", "b", "a"]
    held.release()
    await engines.sweep()
    assert CountingEngine.closes == ["a"]
    assert [entry.retired for entry in engines.loaded()] == [False, False]


@sync
async def test_an_engine_draining_across_reloads_is_retired_once() -> None:
    """Each reload names only the engines it retires (the log says so once per engine), not
    those still finishing the requests of an earlier table."""
    table = {"a": spec("a")}
    engines, _ = pool(current=table)
    held = await engines.acquire(spec("a"))
    table["a"] = spec("a", source="new.gguf")
    assert [entry.spec.model_id for entry in engines.retire_changed()] == ["a"]
    for _ in range(5):  # more reloads while the old engine still serves its request
        assert engines.retire_changed() == []
    held.release()


@sync
async def test_a_model_removed_by_a_reload_and_put_back_is_kept() -> None:
    table = {"a": spec("a")}
    engines, _ = pool(current=table)
    await use(engines, "a")
    del table["a"]
    engines.retire_changed()
    table["a"] = spec("a")
    engines.retire_changed()
    await engines.sweep()
    assert loaded(engines) == ["a"]
    assert CountingEngine.closes == []


@sync
async def test_an_engine_loaded_for_an_older_table_goes_once_idle() -> None:
    table = {"a": spec("a", source="new.gguf")}  # the reload came before the old request loaded
    engines, _ = pool(current=table)
    lease = await engines.acquire(spec("a"))  # a request still on the old table
    assert engines.loaded()[0].retired
    lease.release()
    await engines.sweep()
    assert loaded(engines) == []


@sync
async def test_changing_keep_alive_or_pinned_does_not_reload_the_model() -> None:
    plain = LlamaCppModel(engine="llamacpp", source="m.gguf")
    tuned = LlamaCppModel(engine="llamacpp", source="m.gguf", keep_alive=5.0, pinned=True)
    root = Path("/routes")
    assert (
        EngineSpec("a", plain, root, ON_CPU).fingerprint
        == EngineSpec("a", tuned, root, ON_CPU).fingerprint
    )


def test_remote_models_do_not_count_toward_the_cap() -> None:
    remote = RemoteModel(engine="remote", base_url="http://127.0.0.1:9/v1", model="x")
    assert not EngineSpec("r", remote, Path("/routes"), ON_CPU).counts_toward_cap


@sync
async def test_the_stream_releases_its_lease_when_it_ends() -> None:
    engines, _ = pool()
    lease = await engines.acquire(spec("a"))
    assert engines.loaded()[0].busy
    deltas = [delta async for delta in lease.stream(GenerationJob.greedy((1,), max_tokens=1))]
    assert deltas[-1].finish_reason == "stop"
    assert not engines.loaded()[0].busy


class RefusingEngine(CountingEngine):
    """Refuses every job at admission, as a full queue does (429): when `stream` is called,
    before any generator exists (the batch scheduler submits before it streams)."""

    def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        raise OverloadedError("the model is at capacity", retry_after=1)


@sync
async def test_a_request_refused_at_admission_releases_its_lease() -> None:
    engines = EnginePool(lambda s: RefusingEngine(s.model_id), policy=lambda _: ModelPolicy())
    for _ in range(3):
        lease = await engines.acquire(spec("a"))
        with pytest.raises(OverloadedError):
            async for _delta in lease.stream(GenerationJob.greedy((1,), max_tokens=1)):
                pass
    [entry] = engines.loaded()
    assert (entry.busy, entry.leases) == (False, 0)  # idle: keep_alive and unload may act


def refuse_pin(spec: EngineSpec) -> ModelDigest | None:
    raise ModelDigestMismatchError(
        f"model {spec.model_id!r}: not the pinned model", expected="0" * 64, actual="1" * 64
    )


@sync
async def test_a_pin_that_does_not_match_fails_the_load_before_the_engine_reads_it() -> None:
    engines = EnginePool(lambda s: CountingEngine(s.model_id), verify=refuse_pin)
    for _ in range(2):  # each try checks again: a file put right serves without a restart
        with pytest.raises(ModelDigestMismatchError):
            await engines.acquire(spec("a"))
    assert CountingEngine.loads == []
    assert engines.load_failures == {spec("a").key: "model 'a': not the pinned model"}


class BrokenFileEngine(CountingEngine):
    """Fails its load as llama.cpp does on a file cut short (an EngineError, a 500)."""

    def load(self) -> EngineInfo:
        raise EngineError(f"model {self.model_id!r}: llama.cpp could not load m.gguf: bad")


class CrashingEngine(CountingEngine):
    def load(self) -> EngineInfo:
        raise RuntimeError("segment missing")


@sync
async def test_a_model_that_fails_to_load_is_a_503_naming_it_and_what_to_do() -> None:
    """A client that asked for a broken model gets a 503 it may retry elsewhere (never a 500
    engine_error), whatever the engine raised."""
    for kind, why in [
        (BrokenFileEngine, "model 'a': llama.cpp could not load m.gguf: bad"),
        (CrashingEngine, "model 'a': loading failed: RuntimeError: segment missing"),
    ]:
        engines = EnginePool(lambda s, made=kind: made(s.model_id))
        with pytest.raises(ServiceUnavailableError) as info:
            await engines.acquire(spec("a"))
        error = info.value
        assert (type(error), error.status_code, error.code) == (
            ServiceUnavailableError,
            503,
            "model_load_failed",
        )
        assert error.message == (
            f"{why}: model 'a' cannot serve until its files load: check them with `zest "
            "check`, replace what is broken, then reload the routes file"
        )
        assert engines.load_failures == {spec("a").key: error.message}


@sync
async def test_a_loaded_engine_lists_its_digest() -> None:
    verified = ModelDigest("f" * 64, pinned=True)
    engines = EnginePool(lambda s: CountingEngine(s.model_id), verify=lambda _: verified)
    await use(engines, "a")
    [entry] = engines.loaded()
    listed = describe(entry, 0.0, ModelPolicy())
    assert (listed["sha256"], listed["sha256_pinned"], listed["pinned"]) == ("f" * 64, True, False)


@sync
async def test_loaded_says_queued_for_the_requests_waiting_for_a_slot_only() -> None:
    """GET /v1/loaded's `queued`: what waits for a slot, not what runs too (issue 33)."""
    engines, _ = pool()
    await use(engines, "a")
    entry = engines.loaded()[0]
    assert isinstance(entry.engine, CountingEngine)
    entry.engine.hold = asyncio.Event()
    slots = 4  # options.parallel's default

    async def finish() -> str | None:
        deltas = entry.runner.stream(GenerationJob.greedy([1], max_tokens=1))
        return [delta async for delta in deltas][-1].finish_reason

    streams = [asyncio.ensure_future(finish()) for _ in range(slots + 1)]
    await asyncio.sleep(0)  # four admitted, generating; the fifth waits
    assert (entry.runner.pending, entry.runner.waiting) == (slots + 1, 1)
    assert describe(entry, 0.0, None)["queued"] == 1
    entry.engine.hold.set()
    assert await asyncio.wait_for(asyncio.gather(*streams), 10) == ["stop"] * (slots + 1)
    assert describe(entry, 0.0, None)["queued"] == 0
