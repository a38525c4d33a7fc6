"""The soak's arithmetic: per-minute figures, the one-line report of each minute, the summary
and its verdict. Pure: every input is passed in (outcomes, RSS samples, reloads)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .outcomes import Ending, Outcome, classify

__all__ = [
    "RSS_LIMIT_PCT",
    "Minute",
    "Reload",
    "by_minute",
    "format_minute",
    "growth_pct",
    "minute_of",
    "percentile",
    "reasons_to_fail",
    "rss_at",
    "summarize",
    "tally_minute",
]

RSS_LIMIT_PCT = 5.0  # RSS growth after the first minute at or above this fails the soak


@dataclass(frozen=True)
class Reload:
    """One reload the harness caused: how, and whether the new table came into force."""

    at: float  # seconds since the soak began
    trigger: str  # file | sighup | admin
    revision: int
    ok: bool
    took_s: float
    detail: str = ""


@dataclass
class Minute:
    minute: int  # 1-based
    requests: int = 0
    ok: int = 0
    disconnected: int = 0
    documented: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    rss_mb: float | None = None
    rss_growth_pct: float | None = None  # since the end of minute 1
    reloads: int = 0
    faults: list[str] = field(default_factory=list)


def percentile(values: Sequence[float], percent: int) -> float | None:
    """The `percent`th percentile, interpolated (statistics' inclusive method); None if empty."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


def minute_of(seconds: float, minutes: int) -> int:
    """The 1-based minute a moment belongs to; the drain after the last minute counts in it."""
    return min(max(int(seconds // 60) + 1, 1), max(minutes, 1))


def by_minute(outcomes: Iterable[Outcome], minutes: int) -> dict[int, list[Outcome]]:
    """Outcomes by the minute they ended in (every minute present, maybe empty)."""
    table: dict[int, list[Outcome]] = {m: [] for m in range(1, minutes + 1)}
    for outcome in outcomes:
        table[minute_of(outcome.ended, minutes)].append(outcome)
    return table


def growth_pct(baseline_kb: int | None, now_kb: int | None) -> float | None:
    if not baseline_kb or now_kb is None:
        return None
    return (now_kb - baseline_kb) / baseline_kb * 100


def rss_at(samples: Sequence[tuple[float, int]], moment: float) -> int | None:
    """The last RSS sample (seconds, kB) taken at or before `moment`."""
    before = [kb for at, kb in samples if at <= moment]
    return before[-1] if before else None


def tally_minute(
    minute: int,
    outcomes: Sequence[Outcome],
    *,
    rss_kb: int | None,
    baseline_kb: int | None,
    reloads: int = 0,
    faults: Iterable[str] = (),
) -> Minute:
    """One minute's figures from the requests that ended in it."""
    kinds = Counter(classify(outcome).kind for outcome in outcomes)
    failures = {k: n for k, n in kinds.items() if classify_failed(k)}
    documented = {k.split(":", 1)[1]: n for k, n in kinds.items() if k.startswith("documented:")}
    ttfts = _ttfts_ms(outcomes)
    return Minute(
        minute=minute,
        requests=len(outcomes),
        ok=kinds["ok"],
        disconnected=kinds["disconnected"],
        documented=dict(sorted(documented.items())),
        failures=dict(sorted(failures.items())),
        ttft_p50_ms=percentile(ttfts, 50),
        ttft_p95_ms=percentile(ttfts, 95),
        rss_mb=rss_kb / 1024 if rss_kb is not None else None,
        rss_growth_pct=growth_pct(baseline_kb, rss_kb) if minute > 1 else None,
        reloads=reloads,
        faults=list(dict.fromkeys(faults)),
    )


def classify_failed(kind: str) -> bool:
    return kind not in {"ok", "disconnected"} and not kind.startswith("documented:")


def _ttfts_ms(outcomes: Iterable[Outcome]) -> list[float]:
    return [o.ttft_s * 1000 for o in outcomes if o.ttft_s is not None and classify(o).kind == "ok"]


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in counts.items())


def _ms(value: float | None) -> str:
    return f"{value:.0f} ms" if value is not None else "-"


def format_minute(m: Minute) -> str:
    """The line printed at the end of each minute."""
    failed = sum(m.failures.values())
    documented = sum(m.documented.values())
    rss = f"{m.rss_mb:.1f} MB" if m.rss_mb is not None else "-"
    growth = f" ({m.rss_growth_pct:+.1f}% since minute 1)" if m.rss_growth_pct is not None else ""
    parts = [
        f"minute {m.minute}: {m.requests} requests ({m.ok} ok, {m.disconnected} disconnected, "
        f"{documented} documented errors{f': {_counts(m.documented)}' if documented else ''})",
        f"{failed} failures{f' ({_counts(m.failures)})' if failed else ''}",
        f"RSS {rss}{growth}",
        f"TTFT p50 {_ms(m.ttft_p50_ms)} p95 {_ms(m.ttft_p95_ms)}",
        f"reloads {m.reloads}",
        f"faults {','.join(m.faults) or '-'}",
    ]
    return "; ".join(parts)


def _per_route(outcomes: Sequence[Outcome]) -> dict[str, dict[str, Any]]:
    routes: dict[str, dict[str, Any]] = {}
    for route in sorted({o.request.route for o in outcomes}):
        mine = [o for o in outcomes if o.request.route == route]
        ttfts = _ttfts_ms(mine)
        routes[route] = {
            "requests": len(mine),
            "verdicts": dict(Counter(classify(o).kind for o in mine).most_common()),
            "served_by": dict(Counter(o.served_by for o in mine if o.served_by).most_common()),
            "ttft_p50_ms": percentile(ttfts, 50),
            "ttft_p95_ms": percentile(ttfts, 95),
        }
    return routes


def _per_fault(outcomes: Sequence[Outcome]) -> dict[str, dict[str, int]]:
    """For requests through the upstream: verdicts under each fault that ran beside them."""
    table: dict[str, Counter[str]] = {}
    for outcome in outcomes:
        if outcome.request.remote:
            for fault in outcome.faults:
                table.setdefault(str(fault), Counter())[classify(outcome).kind] += 1
    return {fault: dict(counts.most_common()) for fault, counts in table.items()}


def _disconnects(outcomes: Sequence[Outcome]) -> dict[str, int]:
    """The harness's disconnects by plan, and how many came after a first token."""
    dropped = [o for o in outcomes if o.ending is Ending.DROPPED]
    counts = Counter(str(o.request.drop) for o in dropped)
    counts["after_a_token"] = sum(1 for o in dropped if o.ttft_s is not None)
    return dict(sorted(counts.items()))


def _failed_requests(outcomes: Sequence[Outcome], limit: int) -> list[dict[str, Any]]:
    failed = [o for o in outcomes if classify(o).failed]
    return [{"verdict": classify(o).kind, **asdict(o)} for o in failed[:limit]]


def reasons_to_fail(
    failures: dict[str, int], growth: float | None, checks: Sequence[str]
) -> list[str]:
    """Why the soak failed (empty: it passed)."""
    reasons = [f"{n} request(s) failed: {kind}" for kind, n in failures.items()]
    if growth is not None and growth >= RSS_LIMIT_PCT:
        reasons.append(f"RSS grew {growth:.1f}% after the first minute (limit {RSS_LIMIT_PCT}%)")
    return reasons + list(checks)


def summarize(
    outcomes: Sequence[Outcome],
    minutes: Sequence[Minute],
    reloads: Sequence[Reload],
    *,
    baseline_kb: int | None,
    final_kb: int | None,
    checks: Sequence[str] = (),
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole run: totals, per route and per fault, reloads, RSS, and the verdict."""
    kinds = Counter(classify(o).kind for o in outcomes)
    failures = {k: n for k, n in sorted(kinds.items()) if classify_failed(k)}
    growth = growth_pct(baseline_kb, final_kb) if len(minutes) > 1 else None
    checks = [
        *checks,
        *(
            f"reload {r.revision} ({r.trigger}) did not come into force: {r.detail}"
            for r in reloads
            if not r.ok
        ),
    ]
    reasons = reasons_to_fail(failures, growth, checks)
    ttfts = _ttfts_ms(outcomes)
    triggers = Counter(f"{r.trigger} {'ok' if r.ok else 'failed'}" for r in reloads)
    return {
        "passed": not reasons,
        "reasons": reasons,
        "settings": settings or {},
        "requests": len(outcomes),
        "ok": kinds["ok"],
        "disconnected": kinds["disconnected"],
        "disconnects": _disconnects(outcomes),
        "documented": {
            k.split(":", 1)[1]: n for k, n in sorted(kinds.items()) if k.startswith("documented:")
        },
        "failures": failures,
        "ttft_p50_ms": percentile(ttfts, 50),
        "ttft_p95_ms": percentile(ttfts, 95),
        "rss": {
            "baseline_mb": baseline_kb / 1024 if baseline_kb else None,
            "final_mb": final_kb / 1024 if final_kb else None,
            "growth_pct": growth,
            "limit_pct": RSS_LIMIT_PCT,
        },
        "reloads": {"total": len(reloads), "by_trigger": dict(sorted(triggers.items()))},
        "routes": _per_route(outcomes),
        "remote_by_fault": _per_fault(outcomes),
        "checks": list(checks),
        "minutes": [asdict(m) for m in minutes],
        "reload_log": [asdict(r) for r in reloads],
        "failed_requests": _failed_requests(outcomes, 200),
    }
