"""`zest bench`'s report as text (with the targets of the comparison, met or not) and its plot."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from zest.bench import _grammar_cost, _quality
from zest.bench._compare import row
from zest.bench._routing import TARGET_P50_MS
from zest.bench._workload import Level

__all__ = ["format_report", "plot", "targets"]

PEER = "llama-server"


def format_report(report: dict[str, Any]) -> str:
    lines: list[str] = []
    parts = (
        _cold,
        _ceiling,
        _levels,
        _targets,
        _mixed,
        _prefix,
        _speculation,
        _zest_alone,
        _routing,
        _backends,
        _quality.report_lines,
        _grammar_cost.report_lines,
    )
    for part in parts:
        lines += part(report)
    return "\n".join(lines)


def _cold(report: dict[str, Any]) -> list[str]:
    cold = report.get("cold")
    if not cold:
        return []
    return [
        f"cold start: process start -> ready {cold['ready_s_p50']:.2f} s "
        f"(of which model load {cold['model_load_s_p50']:.2f} s)"
    ]


def _ceiling(report: dict[str, Any]) -> list[str]:
    ceiling = report.get("ceiling")
    if not ceiling:
        return []
    steps = ", ".join(f"{k} seq {ms:.1f} ms" for k, ms in ceiling["decode_step_ms"].items())
    prefill = ", ".join(f"{n} tokens {tps:.0f} tok/s" for n, tps in ceiling["prefill_tps"].items())
    return [f"ceiling (llama_decode alone): decode step {steps}; prefill {prefill}"]


def _by_level(report: dict[str, Any]) -> dict[tuple[str, int], Level]:
    levels = [Level(**level) for level in report.get("levels", [])]
    return {(lv.server, lv.concurrency): lv for lv in levels}


def _levels(report: dict[str, Any]) -> list[str]:
    by = _by_level(report)
    if not by:
        return []
    limits = report.get("ceiling", {}).get("aggregate_tps", {})
    lines = []
    for lv in by.values():
        limit = limits.get(lv.concurrency) or limits.get(str(lv.concurrency))
        share = f"  ({lv.aggregate_tps / limit:.0%} of the ceiling)" if limit else ""
        lines.append(row(lv) + share)
    raw, one = report["raw_llama_cpp"], by.get(("zest", 1))
    if one:
        lines.append(
            f"raw llama-cpp-python: TTFT p50 {raw['ttft_p50_ms']:.1f} ms, decode "
            f"{raw['decode_tps_p50']:.1f} tok/s"
        )
    if one and one.overhead_p50_ms is not None:
        lines.append(
            f"zest gateway overhead at 1 stream (TTFT minus the engine's own prefill, same "
            f"requests): p50 {one.overhead_p50_ms:.1f} ms"
        )
    return lines


def targets(report: dict[str, Any]) -> list[tuple[str, float, str, bool]]:
    """(target, measured ratio, how it reads, met) for each target of the comparison that
    this report has the figures for."""
    by, found = _by_level(report), []
    raw = report.get("raw_llama_cpp")
    one, peer_one = by.get(("zest", 1)), by.get((PEER, 1))
    if one and peer_one:
        ratio = one.ttft_p50_ms / peer_one.ttft_p50_ms
        found.append((f"1 stream: TTFT p50 <= 1.0x {PEER}", ratio, "x", ratio <= 1.0))
    if one and raw:
        ratio = one.decode_tps_p50 / raw["decode_tps_p50"]
        found.append(("1 stream: decode >= 0.97x raw llama-cpp-python", ratio, "x", ratio >= 0.97))
    for streams in (4, 8):
        mine, theirs = by.get(("zest", streams)), by.get((PEER, streams))
        if not (mine and theirs):
            continue
        ratio = mine.aggregate_tps / theirs.aggregate_tps
        found.append((f"{streams} streams: aggregate >= 1.25x {PEER}", ratio, "x", ratio >= 1.25))
        ratio = mine.ttft_p95_ms / theirs.ttft_p95_ms
        found.append((f"{streams} streams: TTFT p95 <= 0.9x {PEER}", ratio, "x", ratio <= 0.9))
    found += _mixed_targets(report.get("mixed"))
    speculation = report.get("speculation")
    if speculation:
        ratio = speculation["ratio"]
        found.append(("summarization: prompt lookup decode >= 1.5x", ratio, "x", ratio >= 1.5))
    found += _quality.targets(report, PEER)
    grammar = report.get("grammar")
    if grammar:
        ratio, most = grammar["ratio_p50"], _grammar_cost.TARGET_RATIO
        name = f"grammar: a neighbour beside the worst schema <= {most}x alone"
        found.append((name, ratio, "x", ratio <= most))
    hundred = _rules_row(report, 100)
    if hundred:
        p50 = hundred["p50_ms"]
        name = f"routing: 100 rules, decision p50 <= {TARGET_P50_MS} ms"
        found.append((name, p50, " ms", p50 <= TARGET_P50_MS))
    return found


# The interactive task's p95s beside the summaries over its p95s alone (issue 35): its first
# token, its last (the whole 16-token answer), and its first with every slot held (preemption).
MIXED_P95_RATIO = 2.0
MIXED_LAST_TOKEN_RATIO = 3.0
MIXED_FULL_RATIO = 3.0


def _mixed_targets(mixed: dict[str, Any] | None) -> list[tuple[str, float, str, bool]]:
    servers = (mixed or {}).get("servers", {})
    mine, theirs = servers.get("zest"), servers.get(PEER)
    found = []
    if mine:
        for key, what, most in (
            ("p95_ratio", "TTFT p95 loaded", MIXED_P95_RATIO),
            ("last_token_p95_ratio", "last token p95 loaded", MIXED_LAST_TOKEN_RATIO),
            ("full_p95_ratio", "TTFT p95 with every slot held", MIXED_FULL_RATIO),
        ):
            if key in mine:
                name = f"mixed: autocomplete {what} <= {most:.0f}x alone"
                found.append((name, mine[key], "x", mine[key] <= most))
    if mine and theirs and "summary_work_tps" in mine["loaded"] and _work_tps(theirs["loaded"]):
        ratio = _work_tps(mine["loaded"]) / _work_tps(theirs["loaded"])
        found.append((f"mixed: work tok/s (all tasks) >= 1.0x {PEER}", ratio, "x", ratio >= 1.0))
    return found


def _work_tps(loaded: dict[str, Any]) -> float:
    return float(loaded.get("summary_work_tps", 0.0) + loaded.get("autocomplete_work_tps", 0.0))


def _mixed(report: dict[str, Any]) -> list[str]:
    """The mixed phase as the issue's table: a row a server."""
    mixed = report.get("mixed")
    if not mixed:
        return []
    lines = [
        f"mixed: autocomplete 1/s ({mixed['autocomplete_tokens']} tokens) for "
        f"{mixed['seconds']} s alone, then beside {mixed['summaries']} looping summaries "
        f"({mixed['summary_tokens']} tokens), {mixed['rounds']} round(s):",
        f"  {'server':<14} {'TTFT p50/p95 alone':>20} {'beside summaries':>20} "
        f"{'p95 loaded/alone':>17} {'summaries tok/s':>16} {'work tok/s (sum. + autoc.)':>27}",
    ]
    for name, figures in mixed["servers"].items():
        idle, loaded = figures["idle"], figures["loaded"]
        lines.append(
            f"  {name:<14} {_p50_p95(idle):>20} {_p50_p95(loaded):>20} "
            f"{figures['p95_ratio']:>16.1f}x {loaded['summary_tps']:>16.1f} {_work(loaded):>27}"
        )
    return lines + _mixed_more(mixed) + _timeouts(mixed)


def _timeouts(mixed: dict[str, Any]) -> list[str]:
    """Autocompletes a server starved past the client's patience: counted until it gave up."""
    lines = []
    for name, figures in mixed["servers"].items():
        for spell in ("idle", "loaded", "full"):
            if count := (figures.get(spell) or {}).get("timeouts"):
                lines.append(
                    f"  {name}, {spell}: {count} autocomplete(s) got no byte for 900 s and were "
                    "given up; their times count until then (the p95 is a lower bound)"
                )
    return lines


def _mixed_more(mixed: dict[str, Any]) -> list[str]:
    """The whole answer's time, and the spell with every slot held (runs from before issue 35
    have neither)."""
    servers = {n: f for n, f in mixed["servers"].items() if "last_token_p95_ratio" in f}
    if not servers:
        return []
    lines = [
        f"  {'server':<14} {'last token p50/p95 alone':>26} {'beside summaries':>20} "
        f"{'p95 loaded/alone':>17} {'TTFT p50/p95, ' + str(mixed['slots']) + ' summaries':>26} "
        f"{'p95 /alone':>11}"
    ]
    for name, figures in servers.items():
        idle, loaded, full = figures["idle"], figures["loaded"], figures["full"]
        lines.append(
            f"  {name:<14} {_p50_p95(idle, 'last_token'):>26} "
            f"{_p50_p95(loaded, 'last_token'):>20} {figures['last_token_p95_ratio']:>16.1f}x "
            f"{_p50_p95(full):>26} {figures['full_p95_ratio']:>10.1f}x"
        )
    return lines


def _work(loaded: dict[str, Any]) -> str:
    """Tokens processed a second in the loaded window, prompt and completion, by task (runs
    from before the figure was kept have none)."""
    if "summary_work_tps" not in loaded:
        return "-"
    return f"{loaded['summary_work_tps']:.1f} + {loaded['autocomplete_work_tps']:.1f}"


def _p50_p95(figures: dict[str, Any], what: str = "ttft") -> str:
    return f"{figures[f'{what}_p50_ms']:,.0f} / {figures[f'{what}_p95_ms']:,.0f} ms"


def _rules_row(report: dict[str, Any], count: int) -> dict[str, Any] | None:
    rows = (report.get("routing") or {}).get("deterministic", [])
    return next((row for row in rows if row["rules"] == count), None)


def _targets(report: dict[str, Any]) -> list[str]:
    return [
        f"target {name}: {ratio:.2f}{unit} {'met' if met else 'NOT met'}"
        for name, ratio, unit, met in targets(report)
    ]


def _prefix(report: dict[str, Any]) -> list[str]:
    cache = report.get("prefix_cache")
    if not cache:
        return []
    return [
        f"prefix cache (1,000-token system prompt): TTFT cold {cache['cold_ttft_ms']:.1f}"
        f" ms, warm {cache['warm_ttft_ms']:.1f} ms "
        f"({cache['warm_ttft_ms'] / cache['cold_ttft_ms']:.0%} of cold)"
    ]


def _speculation(report: dict[str, Any]) -> list[str]:
    spec = report.get("speculation")
    if not spec:
        return []
    return [
        f"speculation (summarization, {spec['prompt_tokens']}-token article): decode "
        f"{spec['decode_tps_p50']:.1f} tok/s plain, {spec['lookup_decode_tps_p50']:.1f} with "
        f"prompt lookup ({spec['ratio']:.2f}x), {spec['acceptance']:.0%} of drafts accepted"
    ]


def _zest_alone(report: dict[str, Any]) -> list[str]:
    lines = [
        f"prefill {row['prompt_tokens']:.0f} tokens: {row['prefill_tps']:.0f} tok/s "
        f"(TTFT p50 {row['ttft_p50_ms']:.0f} ms)"
        for row in report.get("prefill", [])
    ]
    if decode := report.get("decode"):
        lines.append(
            f"decode (1 stream, {decode['tokens_p50']:.0f} tokens): "
            f"{decode['decode_tps_p50']:.1f} tok/s"
        )
    if latency := report.get("latency"):
        lines.append(
            f"end-to-end latency ({latency['requests']} requests of {latency['max_tokens']} "
            f"tokens, not streamed): p50 {latency['p50_ms']:.0f} ms, p95 {latency['p95_ms']:.0f} ms"
        )
    if sustained := report.get("sustained"):
        for minute in sustained["minutes"]:
            ttft = minute["ttft_p50_ms"]
            shown = "-" if ttft is None else f"{ttft:.0f} ms"
            lines.append(
                f"sustained minute {minute['minute']}: {minute['tokens_per_s']:.1f} tok/s, "
                f"{minute['requests']} requests, TTFT p50 {shown}, "
                f"RSS {minute.get('rss_mib') or 0:.0f} MiB"
            )
        lines.append(f"sustained drift: {sustained['drift_per_minute']:+.1%} tokens/s per minute")
    return lines


def _backends(report: dict[str, Any]) -> list[str]:
    """A line per backend: the engine's prefill and decode rates, the hybrid's handoff, and
    where ggml put the model and its KV cache."""
    found = report.get("backends")
    if not found:
        return []
    cpu = next((r for r in found["rows"] if r["route"] == "on-cpu"), None)
    lines = []
    for measured in found["rows"]:
        line = (
            f"backend {measured['device']} ({measured['prompt_tokens']}-token prompt, "
            f"{found['decode_tokens']} tokens): prefill {measured['prefill_tps_p50']:.1f} tok/s, "
            f"decode {measured['decode_tps_p50']:.1f} tok/s"
        )
        if cpu is not None and measured is not cpu and cpu["decode_tps_p50"]:
            line += f" ({measured['decode_tps_p50'] / cpu['decode_tps_p50']:.2f}x the cpu's)"
        if measured["handoff_ms_p50"] is not None:
            line += f", handoff {measured['handoff_ms_p50']:.1f} ms {measured['handoff_bytes']} B"
        places = sorted({f"{b['kind']}@{b['buffer']}" for b in measured["buffers"]})
        lines.append(line + (f"; buffers {', '.join(places)}" if places else ""))
    return lines


def _routing(report: dict[str, Any]) -> list[str]:
    routing = report.get("routing")
    if not routing:
        return []
    decisions = "; ".join(
        f"{row['rules']} rule{'s' if row['rules'] > 1 else ''} p50 {row['p50_ms']:.3f} ms, "
        f"p99 {row['p99_ms']:.3f} ms"
        for row in routing["deterministic"]
    )
    lines = [
        f"routing decision ({routing['message_chars']}-character message, no rule matching: "
        f"every rule evaluated): {decisions}"
    ]
    for kind in ("similar_to", "classify"):
        if found := routing.get(kind):
            lines.append(
                f"routing {kind} decision ({found['rounds']} each): cold p50 "
                f"{found['cold_p50_ms']:.1f} ms (p95 {found['cold_p95_ms']:.1f}), cached p50 "
                f"{found['cached_p50_ms']:.3f} ms (p95 {found['cached_p95_ms']:.3f})"
            )
    if skipped := routing.get("similar_to_skipped"):
        lines.append(f"routing similar_to: not measured: {skipped}")
    return lines


def plot(report: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            f"matplotlib is not installed: no plot ({path}); pip install matplotlib",
            file=sys.stderr,
        )
        return
    wanted = (
        (_throughput, "levels"),
        (_ttft, "levels"),
        (_prefill, "prefill"),
        (_sustained, "sustained"),
        (_mixed_ttft, "mixed"),
        (_mixed_tps, "mixed"),
    )
    panels = [draw for draw, key in wanted if report.get(key)]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for draw, axis in zip(panels, axes[0], strict=True):
        draw(report, axis)
        axis.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _series(report: dict[str, Any]) -> dict[str, list[Level]]:
    series: dict[str, list[Level]] = {}
    for level in _by_level(report).values():
        series.setdefault(level.server, []).append(level)
    return series


def _throughput(report: dict[str, Any], axis: Any) -> None:
    for server, levels in _series(report).items():
        xs = [lv.concurrency for lv in levels]
        axis.plot(xs, [lv.aggregate_tps for lv in levels], marker="o", label=server)
    limits = report.get("ceiling", {}).get("aggregate_tps", {})
    if limits:
        xs = sorted(int(k) for k in limits)
        ys = [limits.get(k) or limits[str(k)] for k in xs]
        axis.plot(xs, ys, linestyle="--", color="grey", label="ceiling (llama_decode alone)")
    axis.set(xlabel="concurrent streams", ylabel="aggregate tokens/s", title="Throughput")
    axis.legend()


def _ttft(report: dict[str, Any], axis: Any) -> None:
    for server, levels in _series(report).items():
        xs = [lv.concurrency for lv in levels]
        axis.plot(xs, [lv.ttft_p95_ms for lv in levels], marker="o", label=server)
    axis.set(xlabel="concurrent streams", ylabel="TTFT p95 (ms)", title="Time to first token")
    axis.legend()


def _prefill(report: dict[str, Any], axis: Any) -> None:
    rows = report["prefill"]
    sizes = [r["prompt_tokens"] for r in rows]
    axis.plot(sizes, [r["prefill_tps"] for r in rows], marker="o")
    axis.set(xscale="log", xlabel="prompt tokens", ylabel="tokens/s", title="zest prefill")
    axis.set_xticks(sizes, [f"{n:,}" for n in sizes])  # the sizes measured, no log-scale clutter
    axis.minorticks_off()


def _sustained(report: dict[str, Any], axis: Any) -> None:
    rows = report["sustained"]["minutes"]
    axis.plot([r["minute"] for r in rows], [r["tokens_per_s"] for r in rows], marker="o")
    axis.set(
        xlabel="minute",
        ylabel="aggregate tokens/s",
        title=f"Sustained, {report['sustained']['streams']} streams",
        ylim=(0, None),
    )


def _mixed_ttft(report: dict[str, Any], axis: Any) -> None:
    """Autocomplete TTFT p95 alone and beside the summaries, server by server (log scale)."""
    servers = report["mixed"]["servers"]
    names = list(servers)
    for offset, spell in ((-0.2, "idle"), (0.2, "loaded")):
        heights = [servers[name][spell]["ttft_p95_ms"] for name in names]
        label = "alone" if spell == "idle" else "beside the summaries"
        axis.bar([n + offset for n in range(len(names))], heights, width=0.4, label=label)
    axis.set_xticks(range(len(names)), names)
    axis.set(yscale="log", ylabel="autocomplete TTFT p95 (ms)", title="Mixed: interactive task")
    axis.legend()


def _mixed_tps(report: dict[str, Any], axis: Any) -> None:
    servers = report["mixed"]["servers"]
    names = list(servers)
    axis.bar(names, [servers[name]["loaded"]["summary_tps"] for name in names])
    axis.set(ylabel="summaries' tokens/s", title="Mixed: batch task")
