"""`zest alerts`: Prometheus alerting rules for the slo of every route, as YAML.

The rules read the histograms zest exports, summed over models, devices and instances, so they
judge a fleet of zest nodes as one: the route's p95 time to first token over its slo window
(`zest_time_to_first_token_seconds`) and the median decode rate (`zest_decode_tokens_per_second`),
the figures zest's own window judges per node (`zest_slo_ok`). Prometheus estimates a quantile
inside a bucket by interpolation: a target on a bucket bound is judged exactly.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from zest.errors import CommandError
from zest.gateway.cli._init import ROUTES_HELP, routes_file
from zest.gateway.cli._settings import settings_from
from zest.router import RoutesFile, Slo, load_routes, parse_seconds

__all__ = ["add_alerts_command", "alert_rules", "prometheus_duration"]

GROUP = "zest-slo"


@dataclass(frozen=True)
class _Objective:
    """How one objective of an slo becomes a rule."""

    alert: str
    metric: str  # the histogram judged
    quantile: float
    fires: str  # the comparison with the target that fires the alert
    what: str
    shown: str  # the value in the annotations (a Prometheus template)
    unit: str


_OBJECTIVES = {
    "ttft_p95": _Objective(
        "ZestSloTtftP95Breached",
        "zest_time_to_first_token_seconds",
        0.95,
        ">",
        "p95 time to first token",
        '{{ printf "%.3g" $value }} s',
        " s",
    ),
    "tokens_per_s": _Objective(
        "ZestSloDecodeRateBreached",
        "zest_decode_tokens_per_second",
        0.5,
        "<",
        "median decode rate",
        '{{ printf "%.3g" $value }} tokens/s',
        " tokens/s",
    ),
}


def prometheus_duration(seconds: float) -> str:
    """Seconds as a Prometheus duration, which takes whole units only: 5m, 90s, 1500ms."""
    millis = round(seconds * 1000)
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if millis >= size and millis % size == 0:
            return f"{millis // size}{unit}"
    return f"{millis}ms"


def alert_rules(config: RoutesFile, *, pending: str = "1m") -> dict[str, Any]:
    """One rule group: a rule per objective of each route's slo (its own or the file's)."""
    rules = []
    for task in config.routes:
        slo = config.slo_of(task)
        if slo is not None:
            rules += [
                _rule(task, slo, *objective, pending) for objective in slo.objectives().items()
            ]
    return {"groups": [{"name": GROUP, "rules": rules}]}


def _rule(task: str, slo: Slo, objective: str, target: float, pending: str) -> dict[str, Any]:
    how = _OBJECTIVES[objective]
    window = prometheus_duration(slo.window)
    rate = f'sum by (le) (rate({how.metric}_bucket{{task="{task}"}}[{window}]))'
    bound = "at most" if how.fires == ">" else "at least"
    return {
        "alert": how.alert,
        "expr": f"histogram_quantile({how.quantile:g}, {rate}) {how.fires} {target:g}",
        "for": pending,
        "labels": {"severity": "warning", "task": task},
        "annotations": {
            "summary": f"zest route {task} misses its SLO: {how.what} {how.fires} "
            f"{target:g}{how.unit}",
            "description": f"The {how.what} of route {task} over the last {window} is "
            f"{how.shown} (target: {bound} {target:g}{how.unit}).",
        },
    }


def add_alerts_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    command = commands.add_parser(
        "alerts",
        help="print Prometheus alerting rules (YAML) for the slo of every route",
    )
    command.add_argument("--routes", type=Path, help=ROUTES_HELP)
    command.add_argument(
        "--for",
        dest="pending",
        default="1m",
        metavar="DURATION",
        help="how long a rule's condition must hold before it fires (default 1m)",
    )
    command.set_defaults(func=_alerts)


def _alerts(args: argparse.Namespace) -> int:
    try:
        pending = parse_seconds(args.pending, "--for")
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    loaded = load_routes(routes_file(settings_from(routes=args.routes).routes))
    rules = alert_rules(loaded.config, pending=prometheus_duration(pending))
    if not rules["groups"][0]["rules"]:
        raise CommandError(
            f"{loaded.path}: no route has an slo: add one to a route, e.g. "
            "slo: {ttft_p95_s: 5, min_tokens_per_s: 10, window: 5m}"
        )
    print(f"# Prometheus alerting rules for the SLOs of {loaded.path} (zest alerts)")
    print(yaml.safe_dump(rules, sort_keys=False, allow_unicode=True, width=1000), end="")
    return 0
