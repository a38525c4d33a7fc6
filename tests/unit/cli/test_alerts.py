"""`zest alerts`: the rules' structure, read back as YAML, and Prometheus' own promtool, which
checks them (`promtool check rules`) and runs them on synthetic histograms (`promtool test
rules`): the route whose requests are slow fires, the one whose requests are fast does not.

promtool comes from Debian's prometheus package (`make promtool`, which `make test` runs and
then requires it); run elsewhere without it, the promtool tests are skipped saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from zest.gateway.cli import main
from zest.gateway.cli._alerts import alert_rules, prometheus_duration
from zest.router import parse_routes

ROUTES = """\
version: 1
slo: {ttft_p95_s: 5, min_tokens_per_s: 10}
models:
  smollm2: {engine: llamacpp, source: m.gguf}
routes:
  chat: {kind: chat, model: smollm2, slo: {ttft_p95_s: 2.5, window: 2m}}
  autocomplete: {kind: completion, model: smollm2}
"""
TTFT_CHAT = (
    "histogram_quantile(0.95, sum by (le) "
    '(rate(zest_time_to_first_token_seconds_bucket{task="chat"}[2m]))) > 2.5'
)


def promtool() -> str:
    found = shutil.which("promtool") or str(Path(sys.executable).with_name("promtool"))
    if Path(found).exists():
        return found
    if os.environ.get("ZEST_REQUIRE_PROMTOOL"):
        pytest.fail("promtool is missing: run make promtool (Debian's prometheus package)")
    pytest.skip("promtool is not installed: run make promtool to check the rules with it")


@pytest.fixture
def rules_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    routes = tmp_path / "routes.yaml"
    routes.write_text(ROUTES)
    assert main(["alerts", "--routes", str(routes), "--for", "90s"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"# Prometheus alerting rules for the SLOs of {routes}")
    (tmp_path / "zest-slo.rules.yaml").write_text(printed)
    return tmp_path / "zest-slo.rules.yaml"


def test_every_objective_of_every_route_is_a_rule_on_the_histograms(rules_file: Path) -> None:
    document = yaml.safe_load(rules_file.read_text())
    (group,) = document["groups"]
    assert group["name"] == "zest-slo"
    rules: list[dict[str, Any]] = group["rules"]
    assert [(r["alert"], r["labels"]["task"]) for r in rules] == [
        ("ZestSloTtftP95Breached", "chat"),
        ("ZestSloTtftP95Breached", "autocomplete"),  # the file's slo: both objectives
        ("ZestSloDecodeRateBreached", "autocomplete"),
    ]
    assert rules[0] == {
        "alert": "ZestSloTtftP95Breached",
        "expr": TTFT_CHAT,
        "for": "90s",
        "labels": {"severity": "warning", "task": "chat"},
        "annotations": {
            "summary": "zest route chat misses its SLO: p95 time to first token > 2.5 s",
            "description": "The p95 time to first token of route chat over the last 2m is "
            '{{ printf "%.3g" $value }} s (target: at most 2.5 s).',
        },
    }
    assert rules[2]["expr"] == (
        "histogram_quantile(0.5, sum by (le) "
        '(rate(zest_decode_tokens_per_second_bucket{task="autocomplete"}[5m]))) < 10'
    )


def test_the_rules_name_only_metrics_zest_exports() -> None:
    from zest.gateway.http._metrics import Metrics

    exported = Metrics().scrape().decode()
    for rule in alert_rules(parse_routes(ROUTES, "r"))["groups"][0]["rules"]:
        metric = rule["expr"].split("rate(", 1)[1].split("{", 1)[0]
        assert f"# TYPE {metric.removesuffix('_bucket')} histogram" in exported


def test_a_file_without_slos_says_how_to_add_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(ROUTES.replace("slo: {ttft_p95_s: 5, min_tokens_per_s: 10}\n", "").replace(
        ", slo: {ttft_p95_s: 2.5, window: 2m}", ""
    ))  # fmt: skip
    assert main(["alerts", "--routes", str(routes)]) == 1
    assert capsys.readouterr().err == (
        f"zest: {routes.resolve()}: no route has an slo: add one to a route, e.g. "
        "slo: {ttft_p95_s: 5, min_tokens_per_s: 10, window: 5m}\n"
    )


def test_a_bad_for_duration_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["alerts", "--for", "soon"]) == 1
    assert "invalid --for 'soon': write seconds or a duration such as 30s" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("seconds", "written"),
    [(300, "5m"), (90, "90s"), (3600, "1h"), (1.5, "1500ms"), (0, "0ms"), (5400, "90m")],
)
def test_durations_are_written_in_whole_prometheus_units(seconds: float, written: str) -> None:
    assert prometheus_duration(seconds) == written


def test_promtool_checks_the_rules(rules_file: Path) -> None:
    checked = subprocess.run(
        [promtool(), "check", "rules", str(rules_file)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 3 rules found" in checked.stdout


def histogram(metric: str, task: str, per_minute: dict[str, int]) -> list[dict[str, str]]:
    """Ten minutes of a histogram's buckets scraped a minute apart, each (cumulative, as
    Prometheus buckets are) growing by its requests per minute."""
    labels = f'task="{task}",model="smollm2",device="cpu"'
    return [
        {"series": f'{metric}_bucket{{{labels},le="{le}"}}', "values": f"0+{count}x10"}
        for le, count in per_minute.items()
    ]


def test_promtool_fires_the_slow_route_only(rules_file: Path, tmp_path: Path) -> None:
    # chat's requests take 5-10 s to a first token (p95 past its 2.5 s target); autocomplete's
    # take 0.1-0.25 s and decode at 50-75 tokens/s (within its 5 s and 10 tokens/s).
    ttft, rate = "zest_time_to_first_token_seconds", "zest_decode_tokens_per_second"
    series = [
        *histogram(ttft, "chat", {"2.5": 0, "5": 0, "10": 6, "+Inf": 6}),
        *histogram(ttft, "autocomplete", {"0.1": 0, "0.25": 6, "+Inf": 6}),
        *histogram(rate, "autocomplete", {"10": 0, "50": 0, "75": 6, "+Inf": 6}),
    ]
    chat_alert = {
        "exp_labels": {"severity": "warning", "task": "chat"},
        # p95 of 5-10 s, interpolated in that bucket: 5 + 5 * 0.95 = 9.75
        "exp_annotations": {
            "summary": "zest route chat misses its SLO: p95 time to first token > 2.5 s",
            "description": "The p95 time to first token of route chat over the last 2m is "
            "9.75 s (target: at most 2.5 s).",
        },
    }
    tests = {
        "rule_files": [str(rules_file)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "8m", "alertname": alert, "exp_alerts": expected}
                    for alert, expected in [
                        ("ZestSloTtftP95Breached", [chat_alert]),
                        ("ZestSloDecodeRateBreached", []),
                    ]
                ],
            }
        ],
    }
    test_file = tmp_path / "slo-test.yaml"
    test_file.write_text(yaml.safe_dump(tests, sort_keys=False))
    ran = subprocess.run(
        [promtool(), "test", "rules", str(test_file)], capture_output=True, text=True, check=False
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "SUCCESS" in ran.stdout


def test_an_example_routes_file_has_the_slo_zest_alerts_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A new user finds an slo to start from in examples/routes/ (issue 33)."""
    example = Path(__file__).resolve().parents[3] / "examples" / "routes" / "lifecycle.yaml"
    assert main(["alerts", "--routes", str(example)]) == 0
    (group,) = yaml.safe_load(capsys.readouterr().out)["groups"]
    assert [(r["alert"], r["labels"]["task"]) for r in group["rules"]] == [
        ("ZestSloTtftP95Breached", "autocomplete"),
        ("ZestSloDecodeRateBreached", "autocomplete"),
    ]
