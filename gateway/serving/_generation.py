"""From a validated request body to a running generation: route, plan, budget, try attempts.

The first delta is awaited before any response is sent, so every failure up to the first token
is still a plain JSON error with its status code, and a failing attempt can give way to the next
one (policies._fallback says which failures do). Each attempt is budgeted with its own model's
tokenizer and context: falling back to a smaller model trims (or overflows) for that model.
After the first token, failures end the stream with an error event, and so does
`timeouts.total_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from zest.engines import (
    ChoiceGroup,
    Delta,
    EngineInfo,
    GenerationJob,
    Lease,
    Message,
    Prompt,
    StageStats,
    Tokenizer,
)
from zest.errors import BadRequestError, RequestError
from zest.gateway.serving._abandoned import mark_handed_to_queue, stopped_line, written_when_stopped
from zest.gateway.serving._attempts import give_up_or_record
from zest.gateway.serving._clients import Caller
from zest.gateway.serving._conditions import ServingConditions
from zest.gateway.serving._door import Door, open_door
from zest.gateway.serving._drain import Activity
from zest.gateway.serving._events import RequestEvents
from zest.gateway.serving._held import hold
from zest.gateway.serving._requests import ChatMessage, SamplingFields
from zest.gateway.serving._routing import Routed, RouteInputs, route_by_content
from zest.gateway.serving._runtime import Runtime
from zest.gateway.serving._timeouts import Deadline, first_delta, next_delta
from zest.gateway.serving._tokens import Tokens
from zest.gateway.serving._tools import ToolUse
from zest.policies import Budget, Fitted, Trimmed, attempt_terms, fit_attempt
from zest.router import (
    Attempt,
    Decision,
    LoadedRoutes,
    Needs,
    Plan,
    ResponseFormat,
    RouteConfig,
    find_route,
    peak_priority,
    route_for_client,
    tightened,
)

__all__ = [
    "Generation",
    "build_prompt",
    "close_all",
    "request_needs",
    "start_choices",
    "start_generation",
]

log = logging.getLogger("zest.gateway")
Kind = Literal["chat", "completion"]


@dataclass
class Generation:
    """A generation whose first delta has arrived; `rest` streams the remainder."""

    plan: Plan
    attempt: Attempt
    info: EngineInfo
    budget: Budget
    first: Delta
    rest: AsyncGenerator[Delta, None]
    fallbacks: list[str] = field(default_factory=list)
    final_stats: StageStats | None = None
    trimmed: Trimmed | None = None
    deadline: Deadline | None = None
    # The prompt's size as the engine itself reported it (a remote upstream's usage).
    reported_prompt_tokens: int | None = None
    # The budget counted the prompt approximately (the model has no local tokenizer).
    counted_approximately: bool = False
    # The request's tools: the answer is their constrained JSON, read back into tool_calls.
    tools: ToolUse | None = None
    # Told what happens to the request: first token, each delta, how it ended.
    events: RequestEvents = field(default_factory=RequestEvents)
    # Its part in a graceful shutdown (None: not tracked, as in unit tests).
    activity: Activity | None = None
    # The engine's job: flagging it stops the generation without awaiting anything.
    job: GenerationJob | None = None
    # The routing decision that chose the route (a task without rules: the default), and
    # whether the request asked for its trace (route_trace, x-zest-route-trace).
    decision: Decision | None = None
    trace: bool = False
    ruled: bool = False  # the task has rules (they read the request's metadata)
    # The route's response cache: "hit" (this answer is a kept one, no engine ran), "miss"
    # (it may be kept), None (no cache, or the answer is not determined).
    cache: Literal["hit", "miss"] | None = None
    # Headers the answer carries for its caller (the client's x-ratelimit-*).
    headers: dict[str, str] = field(default_factory=dict)
    # Seconds the serving attempt waited for its engine: its load, when the request caused one.
    load_s: float = 0.0
    # Its stream is closed: the engine's slot is given back (serving/_held.py checks).
    released: bool = False

    @property
    def approximate(self) -> bool:
        """The budget was counted approximately (no local tokenizer) and not corrected."""
        return self.counted_approximately and self.reported_prompt_tokens is None

    @property
    def prompt_tokens(self) -> int:
        return self.reported_prompt_tokens or self.budget.prompt_tokens

    async def deltas(self) -> AsyncGenerator[Delta, None]:
        delta: Delta | None = self.first
        while delta is not None:
            if delta.finish_reason is not None:
                self.final_stats = delta.stats or self.final_stats
                self.reported_prompt_tokens = delta.prompt_tokens
            self.events.delta(delta)
            yield delta
            if delta.finish_reason is not None:
                return
            try:
                with self._awaiting():
                    delta = await next_delta(self.rest, self.deadline)
            except Exception as exc:
                self.events.failed(exc)
                if isinstance(exc, RequestError) and self.ruled and self.decision is not None:
                    # Its headers are the answer's own (what served it, x-zest-rule included).
                    exc.zest = decision_object(self.plan.task, self.decision, trace=self.trace)
                raise

    def _awaiting(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext() if self.activity is None else self.activity.awaiting()

    def stop(self) -> None:
        """Stop the generation without awaiting: the engine drops its job within a step, and
        it no longer counts as in flight (for a shutdown). Closing after it ends changes nothing."""
        self.events.closed()
        if self.activity is not None:
            self.activity.close()
        if self.job is not None:
            self.job.cancel()

    async def aclose(self) -> None:
        self.stop()
        # Running: a task awaits its next delta (a choice's pump), and that task's cancellation
        # closes it; closing it here would raise "already running".
        if not getattr(self.rest, "ag_running", False):
            await self.rest.aclose()
            self.released = True


async def close_all(gens: Sequence[Generation]) -> None:
    """Close every choice of a request. All are stopped before the first await, so a close
    that is itself cancelled (a response torn down as its client leaves) still stops them all."""
    for gen in gens:
        gen.stop()
    for gen in gens:
        await gen.aclose()


async def start_choices(
    runtime: Runtime,
    name: str,
    *,
    kind: Kind,
    body: SamplingFields,
    request_id: str,
    events: RequestEvents | None = None,
    prompts: Sequence[str] | None = None,
    caller: Caller | None = None,
    **inputs: Any,
) -> list[Generation]:
    """The request's n generations, started together; choice i samples with seed + i when a
    seed is given, and `events` follow the first. A choice failing before its first token, or
    the caller giving up (the client left), stops every other choice, started or not.
    `prompts` (a completions batch): n choices for each, in OpenAI's order (choice k is
    prompt k // n's), routed once by the prompts joined with newlines.
    `caller`: who sends it (every front door says; None: zest itself, a routing condition):
    admitted once for every choice, and answered from the route's cache when it can be."""
    door = None
    if caller is not None:
        door = await open_door(
            runtime,
            caller,
            name,
            kind=kind,
            body=body,
            inputs=inputs,
            prompts=len(prompts) if prompts is not None else 1,
        )
        if door.kept is not None:
            return door.replayed(name, events, Generation)
    try:
        return await _start_choices(
            runtime,
            name,
            kind=kind,
            body=body,
            request_id=request_id,
            events=events,
            door=door,
            prompts=prompts,
            inputs=inputs,
        )
    except BaseException:
        if door is not None:
            door.abandon()
        raise


async def _start_choices(
    runtime: Runtime,
    name: str,
    *,
    kind: Kind,
    body: SamplingFields,
    request_id: str,
    events: RequestEvents | None,
    door: Door | None,
    prompts: Sequence[str] | None,
    inputs: dict[str, Any],
) -> list[Generation]:
    caller = door.caller if door is not None else None
    if "routed" not in inputs:  # routed once: every choice is served by the same route
        read = inputs if prompts is None else {**inputs, "prompt": "\n".join(prompts)}
        with stopped_line(request_id, name):
            inputs["routed"] = await route_request(
                runtime, name, kind, body, read, request_id=request_id, caller=caller
            )
    starts = [
        asyncio.ensure_future(
            start_generation(
                runtime,
                name,
                kind=kind,
                body=each,
                request_id=request_id if k == 0 else f"{request_id}-{k}",
                events=events if k == 0 else None,
                group=group,
                caller=caller,
                door=door,
                choice=k,
                **{**inputs, **own},
            )
        )
        for k, (each, group, own) in enumerate(_choices(body, prompts))
    ]
    try:
        await asyncio.wait(starts, return_when=asyncio.FIRST_EXCEPTION)
    except asyncio.CancelledError:
        await _stop_starts(starts)
        raise
    errors = [
        error
        for start in starts
        if start.done() and not start.cancelled() and (error := start.exception()) is not None
    ]
    if not errors:
        return [start.result() for start in starts]
    await _stop_starts(starts)
    raise errors[0]


def _choices(
    body: SamplingFields, prompts: Sequence[str] | None
) -> Iterator[tuple[SamplingFields, ChoiceGroup | None, dict[str, Any]]]:
    """Each choice's body (seed + i for choice i of its prompt), the group every choice is
    admitted in together, and its own inputs (its prompt, in a batch). A batch is one group:
    its choices start together, as the request waits for each one's first token, so a part
    of it left waiting for the slots another part holds until the answer is read would never
    start (refused with 400 where the model's slots cannot hold it)."""
    bodies = [
        body if i == 0 or body.seed is None else body.model_copy(update={"seed": body.seed + i})
        for i in range(body.n)
    ]
    batch = [None] if prompts is None else list(prompts)
    size = body.n * len(batch)
    group = ChoiceGroup(size, prompts=len(batch)) if size > 1 else None
    for prompt in batch:
        own = {} if prompt is None else {"prompt": prompt}
        for each in bodies:
            yield each, group, own


async def _stop_starts(starts: list[asyncio.Task[Generation]]) -> None:
    """Cancel the choices still starting (each closes its own stream) and close the started."""
    for start in starts:
        if _started(start):
            start.result().stop()  # at once: the wait below may be cut short
        start.cancel()
    await asyncio.wait(starts)
    await close_all([start.result() for start in starts if _started(start)])


def _started(start: asyncio.Task[Generation]) -> bool:
    return start.done() and not start.cancelled() and start.exception() is None


@written_when_stopped
async def start_generation(
    runtime: Runtime,
    name: str,
    *,
    kind: Kind,
    body: SamplingFields,
    request_id: str,
    messages: list[ChatMessage] | None = None,
    prompt: str | None = None,
    suffix: str | None = None,
    tools: ToolUse | None = None,
    events: RequestEvents | None = None,
    group: ChoiceGroup | None = None,
    routed: Routed | None = None,
    routing: RouteInputs | None = None,
    privacy_of: RouteConfig | None = None,
    caller: Caller | None = None,
    door: Door | None = None,
    choice: int = 0,
) -> Generation:
    """`routed`: the route chosen by the task's rules (None: decided here, `routing` being
    what the rules read, else the messages' or prompt's text); `privacy_of`: the route whose
    text this is (a routing condition's request): privacy only tightens. `caller`: who sends
    it (every front door says; None: zest itself): admitted here unless `door` (start_choices')
    did, held to its privacy floor, its priority moved by its offset."""
    inputs: dict[str, Any] = {"messages": messages, "prompt": prompt, "suffix": suffix}
    inputs.update(tools=tools, routing=routing)
    own_door = caller is not None and door is None
    if own_door:
        assert caller is not None
        door = await open_door(runtime, caller, name, kind=kind, body=body, inputs=inputs)
        if door.kept is not None:
            return door.replayed(name, events, Generation)[0]
    if door is not None:
        events = door.observer(events, choice)
    try:
        gen = await _start_generation(
            runtime,
            name,
            kind=kind,
            body=body,
            request_id=request_id,
            inputs=inputs,
            events=events,
            group=group,
            routed=routed,
            privacy_of=privacy_of,
            caller=caller,
        )
    except BaseException:
        if own_door and door is not None:
            door.abandon()
        raise
    if door is not None:
        gen.cache, gen.headers = door.cache, door.ticket.headers
    return gen


async def _start_generation(
    runtime: Runtime,
    name: str,
    *,
    kind: Kind,
    body: SamplingFields,
    request_id: str,
    inputs: dict[str, Any],
    events: RequestEvents | None,
    group: ChoiceGroup | None,
    routed: Routed | None,
    privacy_of: RouteConfig | None,
    caller: Caller | None,
) -> Generation:
    messages, prompt, tools = inputs["messages"], inputs["prompt"], inputs["tools"]
    suffix = inputs["suffix"]
    events = events or RequestEvents()
    events.task_named(name)
    routes = runtime.routes  # this request's table, to its end, whatever a reload does
    if routed is None:
        routed = await route_request(
            runtime, name, kind, body, inputs, request_id=request_id, caller=caller
        )
    if routed.ruled and routed.decision is not None:  # before anything may refuse the request
        events.routed(name, routed.decision.rule_label)
    name, route = routed.task, routed.route
    if caller is not None:  # the client's floor and priority, whatever route serves it
        route = route_for_client(route, caller.name, caller.client)
    if privacy_of is not None:
        route = tightened(route, privacy_of)
    with decision_told(routed, trace=bool(body.route_trace)):
        check_tools(name, route, tools)
        asked = build_prompt(route, kind, messages, prompt, tools, suffix=suffix)
        deadline = Deadline.start(name, route.timeouts)
        counted = await runtime.count_prompt(routes, route.model, asked)
        needs = request_needs(route, body, tools, suffix, messages)
        plan = runtime.plan(routes, name, route, prompt_tokens=counted, needs=needs)
        walk = _Walk(runtime, routes, plan, asked, body, request_id, deadline, events, tools, group)
        activity = runtime.drain.track()  # a shutdown's grace covers the wait for a first token
        try:
            with activity.awaiting():
                gen = await walk.run()
        except BaseException:
            activity.close()
            raise
    gen.activity = activity
    hold(gen)  # closed when the request ends, if no path of it did
    gen.decision, gen.trace, gen.ruled = routed.decision, bool(body.route_trace), routed.ruled
    return gen


@contextlib.contextmanager
def decision_told(routed: Routed, *, trace: bool) -> Iterator[None]:
    """A request error raised once the task's rules chose the route is told their decision
    (a task without rules has nothing to tell)."""
    try:
        yield
    except RequestError as error:
        if routed.ruled and routed.decision is not None:
            tell_decision(error, routed.task, routed.decision, trace=trace)
        raise


def tell_decision(error: RequestError, task: str, decision: Decision, *, trace: bool) -> None:
    """An error answered once the rules chose a route says what they chose, as an answer does:
    x-zest-rule and x-zest-route (the route that was to serve) beside it, and the decision in
    the body's `zest` object (with its trace when the request asked for it)."""
    error.headers.setdefault("x-zest-rule", decision.rule_label)
    error.headers.setdefault("x-zest-route", f"task={task}")
    error.zest = decision_object(task, decision, trace=trace)


def decision_object(task: str, decision: Decision, *, trace: bool) -> dict[str, Any]:
    """An error body's `zest` object: the route that was to serve, and the decision."""
    return {"task": task, **decision.as_dict(with_trace=trace)}


async def route_request(
    runtime: Runtime,
    name: str,
    kind: Kind,
    body: SamplingFields,
    inputs: dict[str, Any],
    *,
    request_id: str = "-",
    caller: Caller | None = None,
) -> Routed:
    """The route that serves this request: the task's own, or the one its rules choose (the
    caller's privacy floor binds the rules' model-backed conditions too)."""
    routes = runtime.routes
    route = find_route(name, kind, routes.config)
    if caller is not None:
        route = route_for_client(route, caller.name, caller.client, priority=False)
    if not route.rules:
        return Routed(name, route, Decision(name, None), ruled=False)
    messages, prompt = inputs.get("messages"), inputs.get("prompt")
    given = inputs.get("routing") or RouteInputs(
        routing_text(messages, prompt),
        metadata=dict(body.metadata or {}),
        # The request sends tools (tool_choice none included: the rules read what was sent).
        has_tools=bool(getattr(body, "tools", None)) or inputs.get("tools") is not None,
        has_images=_has_images(messages),
    )

    async def count_tokens(over: int) -> int:  # only if a rule reaches a token condition
        asked = build_prompt(route, kind, messages, prompt, inputs.get("tools"))
        return await runtime.count_prompt(routes, route.model, asked, over=over)

    # Model-backed conditions run as requests of their own routes, through this front door.
    models = ServingConditions(runtime, start_generation)
    return await route_by_content(
        models,
        routes,
        name,
        route,
        given,
        count_tokens=count_tokens,
        oracle=runtime.oracle,
        request_id=request_id,
    )


def routing_text(messages: Sequence[ChatMessage] | None, prompt: str | None) -> str:
    """What the rules read: the last user message's text parts joined with newlines (chat),
    or the prompt (completions)."""
    if messages is None:
        return prompt or ""
    users = [m for m in messages if m.role == "user"]
    return users[-1].routing_text() if users else ""


def _has_images(messages: Sequence[ChatMessage] | None) -> bool:
    """An image part in any message, not only the last."""
    return any(message.has_images() for message in messages or ())


def request_needs(
    route: RouteConfig,
    body: SamplingFields,
    tools: ToolUse | None,
    suffix: str | None,
    messages: Sequence[ChatMessage] | None,
) -> Needs:
    """What the request asks of the engine that serves it: the planner leaves out attempts
    whose engine cannot honour it, instead of one refusing it mid-walk (explain plans with
    the same record, so it shows the same attempts)."""
    return Needs(
        images=_has_images(messages),
        logprobs=body.logprob_count() is not None,
        logit_bias=bool(body.biases()),
        structured_output=_response_format(route, body) is not None,
        tools=tools is not None,
        fill_in_middle=suffix is not None,
        multiple_choices=body.n > 1,
    )


def check_tools(name: str, route: RouteConfig, tools: ToolUse | None) -> None:
    if tools is None:
        return
    if route.tools == "deny":
        raise BadRequestError(
            f"task {name!r} does not accept tools (tools: deny in routes.yaml): send the "
            "request without tools, or allow them on the route",
            param="tools",
        )
    if route.response_format is not None:
        raise BadRequestError(
            f"task {name!r} answers in its own response_format (routes.yaml): it takes no "
            "tools; send the request without tools",
            param="tools",
        )


def build_prompt(
    route: RouteConfig,
    kind: Kind,
    messages: Sequence[ChatMessage] | None,
    prompt: str | None,
    tools: ToolUse | None = None,
    *,
    suffix: str | None = None,
) -> Prompt:
    """The request's prompt: a chat's messages (with the route's system prompt first, and the
    tools described), or a completion's text."""
    if kind == "completion" or messages is None:
        return Prompt.completion(prompt or "", suffix)
    chat: list[Message] = [m.as_sent() for m in messages]
    system = [p for p in (route.system_prompt, tools and tools.system_text()) if p]
    if system and chat[0]["role"] == "system":  # one system turn: templates expect one, first
        system.append(chat.pop(0)["content"])
    head: list[Message] = [{"role": "system", "content": "\n\n".join(system)}] if system else []
    for example in route.examples:  # few-shot turns: the route's, before the request's
        head += [
            {"role": "user", "content": example.user},
            {"role": "assistant", "content": example.assistant},
        ]
    return Prompt.chat(head + chat)


@dataclass
class _Walk:
    """One request walking its plan's attempts until one yields a first token."""

    runtime: Runtime
    routes: LoadedRoutes
    plan: Plan
    prompt: Prompt
    body: SamplingFields
    request_id: str
    deadline: Deadline
    events: RequestEvents
    tools: ToolUse | None = None
    group: ChoiceGroup | None = None
    fallbacks: list[str] = field(default_factory=list)
    loading: bool = False

    async def run(self) -> Generation:
        attempts = self.plan.attempts
        for index, attempt in enumerate(attempts):
            self.fallbacks += attempt.skipped
            self.events.attempt(attempt.model, attempt.device)
            try:
                gen = await self._try(attempt)
            except RequestError as error:
                mark_handed_to_queue(False)  # its job ended with the error; the next has none
                self._give_up_or_log(attempt, error, last=index + 1 == len(attempts))
                continue
            gen.fallbacks, gen.events = self.fallbacks, self.events
            self.events.first_token(gen)
            return gen
        raise AssertionError("a plan always has at least one attempt")

    def _give_up_or_log(self, attempt: Attempt, error: RequestError, *, last: bool) -> None:
        """Re-raise `error` unless it moves the request on; record why the attempt failed."""
        route = self.plan.route
        kind = give_up_or_record(
            error, attempt, route, self.fallbacks, last=last, loading=self.loading
        )
        log.warning(
            "%s task=%s: %s on %s failed before the first token (%s), trying the next attempt",
            self.request_id,
            self.plan.task,
            attempt.model,
            attempt.device,
            kind,
        )
        self.events.fell_back(kind)

    async def _try(self, attempt: Attempt) -> Generation:
        self.deadline.check()
        self.loading, asked = True, time.perf_counter()
        lease = await self.runtime.acquire(self.routes, attempt.model, attempt.placement)
        self.loading, load_s = False, time.perf_counter() - asked
        try:
            gen = await self._start(lease, attempt)
        except BaseException:  # whatever raised, and wherever: the slot is given back
            lease.release()
            raise
        gen.load_s = load_s
        return gen

    async def _start(self, lease: Lease, attempt: Attempt) -> Generation:
        """The attempt's generation on its leased engine, once its first delta came; a
        failure closes what it started (the caller releases the lease)."""
        info, tokenizer = lease.info, lease.engine.tokenizer()
        fitted, budget, prompt = await asyncio.to_thread(self._fit, tokenizer, info)
        label = f"{self.request_id} task={self.plan.task} model={info.model} device={info.device}"
        job = self._job(prompt, budget, label, attempt.model)
        mark_handed_to_queue()  # the runner has the job at once: it, or the engine, writes its line
        stream = lease.stream(job)
        try:
            first = await first_delta(stream, self.deadline, f"{info.model} on {info.device}")
            return Generation(
                self.plan,
                attempt,
                info,
                budget,
                first,
                stream,
                job=job,
                trimmed=fitted.trimmed,
                deadline=self.deadline,
                counted_approximately=tokenizer is None,
                tools=self.tools,
            )
        except BaseException:
            await stream.aclose()
            raise

    def _fit(self, tokenizer: Tokenizer | None, info: EngineInfo) -> tuple[Fitted, Budget, Prompt]:
        """Budget this attempt with its own tokenizer and context (runs in a thread), as
        explain judges it (policies.fit_attempt); the prompt to send, in the tokenizer's
        tokens (each variant is encoded once, and the planning count is reused)."""
        tokens = Tokens(self.prompt, tokenizer)
        fit = fit_attempt(
            self.prompt.messages,
            measure=tokens,
            terms=attempt_terms(
                self.plan.task,
                self.plan.route,
                info.model,
                info.context_length or None,  # 0: a remote model that declares none
                requested=self.body.requested_max_tokens(),
                trims_to_fit=self.body.trims_to_fit(),
                context_cap=self.body.context_cap(),
            ),
        )
        prompt = tokens.variant(fit.fitted.messages)
        if tokenizer is not None:
            prompt = prompt.encoded_by(tokenizer)
        return fit.fitted, fit.budget, prompt

    def _job(self, prompt: Prompt, budget: Budget, label: str, model: str) -> GenerationJob:
        route, body = self.plan.route, self.body
        defaults = route.sampling

        def pick(value: float | None, default: float) -> float:
            return default if value is None else value

        return GenerationJob(
            prompt=prompt,
            max_tokens=budget.max_tokens,
            temperature=pick(body.temperature, defaults.temperature),
            top_p=pick(body.top_p, defaults.top_p),
            top_k=body.top_k if body.top_k is not None else defaults.top_k,
            min_p=pick(body.min_p, defaults.min_p),
            repeat_penalty=pick(body.repeat_penalty, defaults.repeat_penalty),
            frequency_penalty=body.frequency_penalty or 0.0,
            presence_penalty=body.presence_penalty or 0.0,
            seed=body.seed if body.seed is not None else defaults.seed,
            # The route's stops always apply (they shape the task); the request may add more.
            stop=tuple(dict.fromkeys(defaults.stop + body.stops())),
            priority=route.priority,
            peak_priority=peak_priority(self.routes.config, model),
            label=label,
            privacy=route.privacy,
            logit_bias=body.biases(),
            logprobs=body.logprob_count(),
            speculative=route.speculative,
            group=self.group,
            response_format=self.tools.response_format()
            if self.tools
            else _response_format(route, body),
        )


def _response_format(route: RouteConfig, body: SamplingFields) -> ResponseFormat | None:
    """The route's own format wins over the client's (a task that always answers in its
    schema); free text is no constraint."""
    chosen = route.response_format or body.response_format
    return chosen if chosen is not None and chosen.type != "text" else None
