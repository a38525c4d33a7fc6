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
from collections.abc import AsyncGenerator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from zest.engines import (
    ChoiceGroup,
    Delta,
    EngineInfo,
    GenerationJob,
    Message,
    Prompt,
    StageStats,
    Tokenizer,
)
from zest.errors import BadRequestError, ContextLengthExceededError, RequestError
from zest.gateway.serving._attempts import give_up_or_record
from zest.gateway.serving._conditions import ServingConditions
from zest.gateway.serving._drain import Activity
from zest.gateway.serving._events import RequestEvents
from zest.gateway.serving._requests import ChatMessage, SamplingFields
from zest.gateway.serving._routing import Routed, RouteInputs, route_by_content
from zest.gateway.serving._runtime import Runtime
from zest.gateway.serving._timeouts import Deadline, first_delta, next_delta
from zest.gateway.serving._tokens import Tokens
from zest.gateway.serving._tools import ToolUse
from zest.policies import (
    Budget,
    Fitted,
    Trimmed,
    fit_prompt,
    plan_budget,
    prompt_limit,
)
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
    **inputs: Any,
) -> list[Generation]:
    """The request's n generations, started together; choice i samples with seed + i when a
    seed is given, and `events` follow the first. A choice failing before its first token, or
    the caller giving up (the client left), stops every other choice, started or not."""
    bodies = [
        body if i == 0 or body.seed is None else body.model_copy(update={"seed": body.seed + i})
        for i in range(body.n)
    ]
    group = ChoiceGroup(body.n) if body.n > 1 else None  # admitted to the model's slots together
    if "routed" not in inputs:  # routed once: every choice is served by the same route
        inputs["routed"] = await route_request(runtime, name, kind, body, inputs)
    starts = [
        asyncio.ensure_future(
            start_generation(
                runtime,
                name,
                kind=kind,
                body=each,
                request_id=request_id if i == 0 else f"{request_id}-{i}",
                events=events if i == 0 else None,
                group=group,
                **inputs,
            )
        )
        for i, each in enumerate(bodies)
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
) -> Generation:
    """`routed`: the route chosen by the task's rules (None: decided here, `routing` being
    what the rules read, else the messages' or prompt's text); `privacy_of`: the route whose
    text this is (a routing condition's request): privacy only tightens."""
    events = events or RequestEvents()
    events.task_named(name)
    routes = runtime.routes  # this request's table, to its end, whatever a reload does
    if routed is None:
        inputs = {"messages": messages, "prompt": prompt, "tools": tools, "routing": routing}
        routed = await route_request(runtime, name, kind, body, inputs)
    if routed.ruled and routed.decision is not None:  # before anything may refuse the request
        events.routed(name, routed.decision.rule_label)
    name, route = routed.task, routed.route
    if privacy_of is not None:
        route = tightened(route, privacy_of)
    with _decision_told(routed, trace=bool(body.route_trace)):
        _check_tools(name, route, tools)
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
    gen.decision, gen.trace, gen.ruled = routed.decision, bool(body.route_trace), routed.ruled
    return gen


@contextlib.contextmanager
def _decision_told(routed: Routed, *, trace: bool) -> Iterator[None]:
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
    runtime: Runtime, name: str, kind: Kind, body: SamplingFields, inputs: dict[str, Any]
) -> Routed:
    """The route that serves this request: the task's own, or the one its rules choose."""
    routes = runtime.routes
    route = find_route(name, kind, routes.config)
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
        models, routes, name, route, given, count_tokens=count_tokens, oracle=runtime.oracle
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


def _check_tools(name: str, route: RouteConfig, tools: ToolUse | None) -> None:
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
        self.loading = True
        lease = await self.runtime.acquire(self.routes, attempt.model, attempt.placement)
        self.loading = False
        info, tokenizer = lease.info, lease.engine.tokenizer()
        try:
            fitted, budget, prompt = await asyncio.to_thread(self._fit, tokenizer, info)
        except BaseException:
            lease.release()
            raise
        label = f"{self.request_id} task={self.plan.task} model={info.model} device={info.device}"
        job = self._job(prompt, budget, label, attempt.model)
        stream = lease.stream(job)
        try:
            first = await first_delta(stream, self.deadline, f"{info.model} on {info.device}")
        except BaseException:
            await stream.aclose()
            raise
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

    def _fit(self, tokenizer: Tokenizer | None, info: EngineInfo) -> tuple[Fitted, Budget, Prompt]:
        """Budget this attempt with its own tokenizer and context (runs in a thread); the
        prompt to send, in the tokenizer's tokens (each variant is encoded once, and the
        planning count of the request's prompt is reused)."""
        route, requested = self.plan.route, self.body.requested_max_tokens()
        context = info.context_length or None  # 0: a remote model that declares none
        trimming = route.context.on_overflow == "trim" or self.body.trims_to_fit()
        limit = prompt_limit(
            task=self.plan.task,
            max_prompt_tokens=route.context.max_prompt_tokens,
            context_length=context,
            reserve=min(requested or route.max_tokens, route.max_tokens),
            trimming=trimming,
        )
        tokens = Tokens(self.prompt, tokenizer)
        if not trimming and (limit is not None or context is not None):
            most, why = (limit.tokens, limit.why) if limit else (context, "its context")
            _refuse_by_length(tokens, info.model, most or 0, why)
        fitted = fit_prompt(
            self.prompt.messages,
            count=tokens.count,
            limit=limit,
            trim=route.trim_mode if trimming else None,
            model=info.model,
        )
        if fitted.trimmed is not None and tokens.floor(self.prompt.messages) is not None:
            fitted = replace(fitted, trimmed=replace(fitted.trimmed, at_least=True))
        budget = plan_budget(
            prompt_tokens=fitted.prompt_tokens,
            requested=requested,
            route_cap=route.max_tokens,
            context_length=context,
            model=info.model,
        )
        prompt = tokens.variant(fitted.messages)
        if tokenizer is None:
            return fitted, budget, prompt
        prompt = prompt.encoded_by(tokenizer)
        if not prompt.tokens:  # nothing to prefill: a model needs at least one token
            raise BadRequestError("the prompt is empty: send some text", param="prompt")
        return fitted, budget, prompt

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


def _refuse_by_length(tokens: Tokens, model: str, most: int, why: str) -> None:
    """A prompt too long for the model by its length alone is refused before it is tokenized
    (an 8 MB prompt costs seconds of CPU to count, for an answer known in advance)."""
    floor, tokenizer = tokens.floor(tokens.prompt.messages), tokens.tokenizer
    if floor is None or tokenizer is None or floor <= most:
        return
    characters = sum(len(m["content"]) for m in tokens.prompt.messages)
    raise ContextLengthExceededError(
        f"the prompt is at least {floor} tokens ({characters} characters; no token of model "
        f"{model!r} spans more than {tokenizer.max_token_bytes} bytes), over the limit of "
        f"{most} ({why}): shorten the messages or the prompt"
    )


def _response_format(route: RouteConfig, body: SamplingFields) -> ResponseFormat | None:
    """The route's own format wins over the client's (a task that always answers in its
    schema); free text is no constraint."""
    chosen = route.response_format or body.response_format
    return chosen if chosen is not None and chosen.type != "text" else None
