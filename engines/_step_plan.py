"""Every step of the llama.cpp batch from one pure function, counted in steps (issue 35).

`plan_step` takes what runs (the sequences holding a slot), what waits for one (requests not
started yet, and preempted sequences whose KV state waits in host memory), the free slots,
the step's token budgets (the cost model's, engines/_step_cost.py: the one place the
machine's speed enters) and the step counter, and answers with the step: the requests to
drop (their clients left: they steer nothing), the sequences to preempt, the waiting requests
that take a slot, and each running sequence's rows (decode rows, or a chunk of its prompt).
The scheduler (engines/_llama_batch.py) applies the answer; tests prove the rules by counting
steps, on any machine.

Admission. Waiting requests take free slots by route priority, then arrival; one that has
waited WAIT_AGING_STEPS steps goes first, whatever its priority (the aging rule: a steady flow
of higher requests cannot starve it of slots). A request's n choices are admitted together:
a member takes a slot only when the free slots hold every member not running yet, and
nothing behind it takes a free slot meanwhile.

Preemption. A waiting request with no free slot takes the slot of the lowest-priority running
sequence below its own (among equals, one never shielded before one that was, then the latest
arrival): the victim's state is saved and it waits again, first among its priority. A sequence
that was preempted, or that was admitted by the aging rule, is shielded: it keeps its slot for
SHIELD_STEPS steps after it took it, so it is never preempted twice in a row and moves on
between preemptions (it has rows at least every AGING_STEPS steps while it runs), so it
finishes. A shield for good would not do: under a steady flow of higher requests every slot
soon holds a shielded sequence, and the higher requests wait for one to end.

Rows. Route priorities are known at load: each job carries the highest priority of the routes
its model serves (`peak`), so a lower request's prompt never takes a whole `n_batch` while a
higher request may arrive, and no burst's first request waits behind one. The work at the
highest priority running *leads*; the rest is lower.

- Nothing higher can come (the leading priority is the model's peak, and nothing higher
  waits): the leading work fills the step up to `full` (n_batch): its decode rows first (one
  each, then their speculative drafts), then its prompts' chunks, oldest first; lower work
  beside it gets at most `beside` tokens (its decode rows first), so urgent work's steps stay
  about as short as they are alone, and lower decode rows sit out while they would not.
- Something higher may come (or waits): the whole step stays within `guarded` tokens, so the
  higher request waits at most one short step for its own (leading work first, then lower).
- The aging rule: a sequence that sat out AGING_STEPS steps in a row gets its row (or a chunk
  of at least MIN_CHUNK of its prompt) in this step, before anything else and within `full`.

So a step is never empty while a sequence runs (the leading work always gets a row), never
holds more than `full` tokens, and no running sequence waits more than AGING_STEPS steps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "AGING_STEPS",
    "MIN_CHUNK",
    "SHIELD_STEPS",
    "WAIT_AGING_STEPS",
    "Running",
    "StepBudget",
    "StepPlan",
    "StepState",
    "Waiting",
    "plan_step",
]

# A running sequence has a row at least once every AGING_STEPS steps.
AGING_STEPS = 8
# ...and a prompt's chunk in such a step holds at least this many of its tokens.
MIN_CHUNK = 8
# A request that waited this many steps for a slot takes the next free one first.
WAIT_AGING_STEPS = 32
# A shielded sequence (preempted before, or admitted by aging) keeps its slot this many steps.
SHIELD_STEPS = 32


@dataclass(frozen=True)
class StepBudget:
    """Tokens a step may carry (the cost model's answer for this machine)."""

    full: int  # the most any step holds (n_batch)
    guarded: int  # the whole step, while a request of higher priority may arrive (or waits)
    beside: int  # lower work's tokens beside the leading work, when nothing higher can come

    def __post_init__(self) -> None:
        if not 1 <= self.guarded <= self.full or not 0 <= self.beside <= self.full:
            raise ValueError(f"a step budget needs 1 <= guarded <= full, 0 <= beside: {self}")


@dataclass(frozen=True)
class Running:
    """A sequence holding a slot."""

    key: int
    priority: int
    arrival: int  # lower: came first
    remaining: int = 0  # prompt tokens not in the KV cache yet (0: decoding)
    rows: int = 1  # decode rows it would take: its token, then its speculative draft
    last_served: int = 0  # the step of its last rows (or of its admission)
    shielded: bool = False  # preempted before, or admitted by aging: see SHIELD_STEPS
    started: int = 0  # the step it took its slot
    abandoned: bool = False  # its client left
    group: int | None = None  # the request's n choices it belongs to
    peak: int | None = None  # the highest route priority its model serves (None: not known)

    @property
    def decoding(self) -> bool:
        return self.remaining == 0


@dataclass(frozen=True)
class Waiting:
    """A request waiting for a slot: not started yet, or preempted."""

    key: int
    priority: int
    arrival: int
    remaining: int  # prompt tokens to compute once it runs (0: a preempted decoding sequence)
    since: int = 0  # the step it began waiting (its arrival, or its preemption)
    preempted: bool = False
    abandoned: bool = False
    group: int | None = None
    group_size: int = 1
    peak: int | None = None


@dataclass(frozen=True)
class StepState:
    running: tuple[Running, ...]
    waiting: tuple[Waiting, ...]
    free: int  # slots free before this step (an abandoned running sequence frees one more)
    step: int  # the step being planned


@dataclass(frozen=True)
class StepPlan:
    dropped: tuple[int, ...] = ()  # abandoned: retired, or dropped from the waiting list
    preempted: tuple[int, ...] = ()  # leave their slots (state saved), waiting again
    admitted: tuple[int, ...] = ()  # take a slot, in this order
    shielded: tuple[int, ...] = ()  # of the admitted: not preempted for SHIELD_STEPS steps
    # (key, tokens) in batch order: decode rows (a token and its draft), then prompt chunks.
    rows: tuple[tuple[int, int], ...] = ()

    @property
    def tokens(self) -> int:
        return sum(tokens for _, tokens in self.rows)


def plan_step(state: StepState, budget: StepBudget) -> StepPlan:
    """The next step (see the module's docstring for the rules)."""
    running = [r for r in state.running if not r.abandoned]
    waiting = [w for w in state.waiting if not w.abandoned]
    everyone: list[Running | Waiting] = [*state.running, *state.waiting]
    dropped = tuple(x.key for x in everyone if x.abandoned)
    free = state.free + len(state.running) - len(running)
    preempted, admitted = _admit(running, waiting, free, state.step)
    gone = {v.key for v in preempted}
    started = [_started(w, state.step) for w in admitted]
    after = [r for r in running if r.key not in gone] + started
    left = [w for w in waiting if w not in admitted]
    ceiling = max(_priorities(after, left), default=0)
    return StepPlan(
        dropped=dropped,
        preempted=tuple(v.key for v in preempted),
        admitted=tuple(w.key for w in admitted),
        shielded=tuple(r.key for r in started if r.shielded),
        rows=_rows(after, ceiling, budget, state.step),
    )


def _priorities(running: Iterable[Running], waiting: Iterable[Waiting]) -> list[int]:
    """Every priority present or expected: the live requests' own, and their models' peak."""
    found = []
    items: list[Running | Waiting] = [*running, *waiting]
    for item in items:
        found.append(item.priority)
        if item.peak is not None:
            found.append(item.peak)
    return found


def _aged(waiting: Waiting, step: int) -> bool:
    return step - waiting.since >= WAIT_AGING_STEPS


def _admission_order(waiting: Sequence[Waiting], step: int) -> list[Waiting]:
    """Aged requests first (by arrival), then by priority and arrival."""
    return sorted(
        waiting,
        key=lambda w: (0, 0, w.arrival) if _aged(w, step) else (1, -w.priority, w.arrival),
    )


def _admit(
    running: Sequence[Running], waiting: Sequence[Waiting], free: int, step: int
) -> tuple[list[Running], list[Waiting]]:
    """(victims, admitted): free slots by admission order; a request with none takes a lower
    running sequence's slot (never for a group: its members wait for free slots)."""
    victims = sorted(
        (r for r in running if not (r.shielded and step - r.started < SHIELD_STEPS)),
        key=lambda r: (r.priority, r.shielded, -r.arrival),
    )
    members = Counter(r.group for r in running if r.group is not None)
    preempted: list[Running] = []
    admitted: list[Waiting] = []
    blocked = False  # a request ahead waits for free slots: nothing behind it takes one
    for request in _admission_order(waiting, step):
        need = 1 if request.group is None else request.group_size - members[request.group]
        if not blocked and need <= free:
            free -= 1
        elif request.group is None and victims and victims[0].priority < request.priority:
            preempted.append(victims.pop(0))
        else:
            blocked = True
            continue
        admitted.append(request)
        if request.group is not None:
            members[request.group] += 1
    return preempted, admitted


def _started(request: Waiting, step: int) -> Running:
    return Running(
        key=request.key,
        priority=request.priority,
        arrival=request.arrival,
        remaining=request.remaining,
        last_served=step,
        shielded=request.preempted or _aged(request, step),
        started=step,
        group=request.group,
        peak=request.peak,
    )


@dataclass
class _Grants:
    """Tokens granted so far in the step, by sequence."""

    full: int
    tokens: dict[int, int] = field(default_factory=dict)

    @property
    def used(self) -> int:
        return sum(self.tokens.values())

    def give(self, running: Running, wanted: int, cap: int) -> None:
        """Up to `wanted` more tokens for `running`, the step staying within `cap`."""
        room = min(cap, self.full) - self.used
        granted = self.tokens.get(running.key, 0)
        more = max(min(wanted - granted, room), 0)
        if more:
            self.tokens[running.key] = granted + more


def _rows(
    running: Sequence[Running], ceiling: int, budget: StepBudget, step: int
) -> tuple[tuple[int, int], ...]:
    if not running:
        return ()
    lead = max(r.priority for r in running)
    by_rank = sorted(running, key=lambda r: (-r.priority, r.arrival))
    leading = [r for r in by_rank if r.priority == lead]
    lower = [r for r in by_rank if r.priority < lead]
    guarded = lead < ceiling
    grants = _Grants(max(budget.full, len(running)))  # a row for each sequence always fits
    aged = [r for r in running if step - r.last_served >= AGING_STEPS]
    for r in aged:  # the aging rule, before anything else: a row each, then their chunks
        grants.give(r, 1, grants.full)
    for r in aged:
        grants.give(r, 1 if r.decoding else min(r.remaining, MIN_CHUNK), grants.full)
    cap = budget.guarded if guarded else grants.full
    _fill(grants, leading, cap, drafts=True)
    if lower:
        cap = budget.guarded if guarded else grants.used + budget.beside
        _fill(grants, lower, cap, drafts=False)
    given = grants.tokens
    decode = [(r.key, given[r.key]) for r in running if r.decoding and r.key in given]
    chunks = [(r.key, given[r.key]) for r in by_rank if not r.decoding and r.key in given]
    return tuple(decode + chunks)


def _fill(grants: _Grants, work: Sequence[Running], cap: int, *, drafts: bool) -> None:
    """Decode rows first (one each, then drafts), then prompts' chunks, in `work`'s order."""
    for r in work:
        if r.decoding:
            grants.give(r, 1, cap)
    if drafts:
        for r in work:
            if r.decoding:
                grants.give(r, r.rows, cap)
    for r in work:
        if not r.decoding:
            grants.give(r, r.remaining, cap)
