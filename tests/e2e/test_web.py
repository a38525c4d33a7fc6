"""The web page at / in a real headless browser: Debian's Chromium, driven by Playwright for
Python with the system browser (no browser download). It loads without console errors, shows
an emulated device as emulated, a route's SLO state and its rules, streams a playground answer
with what served it and the routing decision (with its trace), draws the live figures, and
asks for a key where the server has keys (a wrong one is refused)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

from tests.e2e.conftest import REPO, Server, start_server, stop_server
from tests.upstream import Behaviour, Proxy

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Chromium's own background traffic would knock on a closed network at every start.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
KEY = "sk-zest-web-1"
# Where the tests leave their screenshots, to be looked at (ZEST_WEB_SHOTS, else a temp folder).
SHOTS = Path(os.environ.get("ZEST_WEB_SHOTS") or tempfile.mkdtemp(prefix="zest-web-"))
# The screenshot the docs show (docs/getting-started.md), taken anew by each run.
DOCS_SHOT = REPO / "docs" / "img" / "web-page.png"
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed: run make browser"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


# The default routes, with an slo on chat that every request misses (TTFT) and meets (decode),
# and a rule that sends chat's requests asking for a summary to the summarization route.
CHAT_SLO = "    slo: {ttft_p95_s: 0.001, min_tokens_per_s: 0.01}\n"
CHAT_RULES = """\
    rules:
      - id: summaries
        when: {keywords_any: [summarize], not: {has_tools: true}}
        to: summarization
        outputs: {reason: asked}
"""


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("web")
    routes = (REPO / "routes.yaml").read_text()
    description = "    description: General assistant chat.\n"
    assert description in routes
    chat = description + CHAT_SLO + CHAT_RULES
    (folder / "routes.yaml").write_text(routes.replace(description, chat))
    env = {"ZEST_EMULATE_DEVICES": "npu=cpu:1", "ZEST_API_KEYS": ""}
    running = start_server(folder / "routes.yaml", folder / "zest.log", env)
    yield running
    stop_server(running)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("web-keyed") / "zest.log"
    env = {"ZEST_EMULATE_DEVICES": "", "ZEST_API_KEYS": KEY}
    running = start_server(REPO / "routes.yaml", log, env)
    yield running
    stop_server(running)


class Opened:
    """A page of the server's, with what its console and scripts reported."""

    def __init__(self, browser: Browser, server: Server) -> None:
        self.page: Page = browser.new_page(viewport={"width": 1200, "height": 800})
        self.problems: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.problems.append(f"pageerror: {error}"))
        self.page.goto(f"{server.base_url}/")

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            # A failed load's location is the resource that failed: the test can tell which.
            where = message.location.get("url", "")
            self.problems.append(f"{message.type}: {message.text} ({where})")

    def tab(self, name: str) -> None:
        self.page.click(f"nav button[data-tab={name}]")


@pytest.fixture
def opened(browser: Browser, emulated: Server) -> Iterator[Opened]:
    page = Opened(browser, emulated)
    yield page
    page.page.close()


def test_the_status_shows_usage_by_client_task_and_model(
    browser: Browser, emulated: Server
) -> None:
    """An open loopback server shows everyone's usage (GET /v1/usage); a request made before
    the page opens is in it, counted for the caller `anonymous` (no named client)."""
    body = {"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    assert httpx.post(f"{emulated.v1}/chat/completions", json=body, timeout=600).status_code == 200
    page = Opened(browser, emulated)
    try:
        row = page.page.locator("#usage tbody tr", has_text="anonymous")
        row.first.wait_for()
        cells = row.first.locator("td").all_text_contents()
        assert cells[:3] == ["anonymous", "chat", "smollm2"]
        assert int(cells[3].split(" / ")[0]) >= 1  # requests in the last minute
        assert page.problems == []
    finally:
        page.page.close()


def test_the_status_shows_readiness_devices_emulated_ones_labelled_and_models(
    opened: Opened,
) -> None:
    page = opened.page
    page.wait_for_selector("#readiness.ok")
    assert page.text_content("#readiness") == "ready"
    npu = page.locator("#devices tbody tr", has_text="npu")
    assert npu.locator("td").first.text_content() == "npu emulated"  # the name, and the tag
    assert npu.locator(".tag").text_content() == "emulated"
    page.wait_for_selector("#loaded tbody tr")
    assert page.locator("#loaded tbody tr").first.locator("td").first.text_content() == "smollm2"
    assert "/routes.yaml: loaded at " in (page.text_content("#routes-file") or "")
    assert opened.problems == []


def test_the_routes_tab_shows_each_task_s_plan(opened: Opened) -> None:
    opened.tab("routes")
    opened.page.fill("#prompt-tokens", "600")
    opened.page.click("#explain-form button")
    plans = opened.page.locator(".plan")
    plans.first.wait_for()
    tasks = [plans.nth(i).get_attribute("data-task") for i in range(plans.count())]
    assert sorted(str(task) for task in tasks) == [
        "autocomplete",
        "chat",
        "summarization",
    ]
    chat = opened.page.locator(".plan[data-task=chat]")
    assert "smollm2 on " in (chat.locator("li").first.text_content() or "")
    assert opened.problems == []


def test_the_routes_tab_lists_each_route_s_rules_once(opened: Opened) -> None:
    opened.tab("routes")
    table = opened.page.locator(".plan[data-task=chat] .rules")
    table.wait_for()
    opened.page.wait_for_timeout(5_500)  # the tab refreshes every 5 s: the table is replaced
    assert table.count() == 1
    rows = table.locator("tbody tr")
    assert [rows.nth(i).get_attribute("data-rule") for i in range(rows.count())] == [
        "summaries",
        "default",
    ]
    assert rows.nth(0).locator("td").all_text_contents() == [
        "summaries",
        'keywords_any: ["summarize"] and not(has_tools: true)',
        "summarization",
        '{"reason":"asked"}',
    ]
    assert rows.nth(1).locator("td").all_text_contents() == [
        "default",
        "no rule matched",
        "chat",
        "",
    ]
    assert opened.page.locator(".plan[data-task=summarization] .rules").count() == 0
    assert opened.problems == []


def test_the_routes_tab_shows_how_a_route_stands_against_its_slo(
    opened: Opened, emulated: Server
) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    assert httpx.post(f"{emulated.v1}/chat/completions", json=body, timeout=600).status_code == 200
    opened.tab("routes")
    slo = opened.page.locator(".plan[data-task=chat] .slo")
    ttft = slo.locator(".badge[data-objective=ttft_p95]")
    ttft.wait_for()
    assert (slo.text_content() or "").startswith(
        "SLO: TTFT p95 ≤ 0.001 s, decode ≥ 0.01 tokens/s over the last 5m ("
    )
    assert (ttft.text_content() or "").endswith(" s: breached")
    assert "bad" in (ttft.get_attribute("class") or "")
    decode = slo.locator(".badge[data-objective=tokens_per_s]")
    assert (decode.text_content() or "").endswith(" tokens/s: ok")
    assert opened.page.locator(".plan[data-task=autocomplete] .slo").count() == 0
    assert opened.problems == []


def test_a_playground_answer_streams_in_with_what_served_it(opened: Opened) -> None:
    page = opened.page
    page.wait_for_selector("#readiness.ok")
    opened.tab("playground")
    page.select_option("#task", "chat")
    page.fill("#max-tokens", "12")
    page.fill("#prompt", "Name a colour.")
    page.click("#send")
    page.wait_for_selector("#send:not([disabled])", timeout=60_000)
    reply = page.locator(".turn.assistant").last.text_content() or ""
    assert reply.strip()
    served = dict(
        zip(
            page.locator("#served dt").all_text_contents(),
            page.locator("#served dd").all_text_contents(),
            strict=True,
        )
    )
    assert served["x-zest-route"].startswith("task=chat; model=smollm2; device=")
    assert served["x-request-id"].startswith("req_")
    assert '"completion_tokens"' in served["usage"]
    assert page.locator(".turn.error").count() == 0
    assert opened.problems == []
    page.screenshot(path=str(DOCS_SHOT))  # the viewport: the answer and what served it


def served_rows(page: Page) -> dict[str, str]:
    return dict(
        zip(
            page.locator("#served dt").all_text_contents(),
            page.locator("#served dd").all_text_contents(),
            strict=True,
        )
    )


def test_the_playground_shows_the_routing_decision_and_its_trace(opened: Opened) -> None:
    page = opened.page
    page.wait_for_selector("#readiness.ok")
    opened.tab("playground")
    page.select_option("#task", "chat")
    page.fill("#max-tokens", "8")
    page.check("#route-trace")
    page.fill("#prompt", "Please summarize: the cat sat on the mat all day.")
    page.click("#send")
    page.wait_for_selector("#send:not([disabled])", timeout=60_000)
    assert page.locator(".turn.error").count() == 0
    served = served_rows(page)
    assert served["x-zest-rule"] == "summaries"
    assert served["x-zest-route"].startswith("task=summarization; model=smollm2; device=")
    assert served["decision"] == 'rule summaries → route summarization, outputs {"reason":"asked"}'
    assert page.locator("#trace li").all_text_contents() == [
        'keywords_any: ["summarize"]: true',
        "has_tools: true: false",
    ]
    page.uncheck("#route-trace")
    page.fill("#prompt", "Name a colour.")
    page.click("#send")
    page.wait_for_selector("#send:not([disabled])", timeout=60_000)
    served = served_rows(page)
    assert served["x-zest-rule"] == "default"
    assert served["decision"] == "default (no rule matched) → route chat"
    assert page.locator("#trace").count() == 0  # no trace unless asked for
    assert opened.problems == []


def test_the_live_figures_chart_the_requests_served(opened: Opened, emulated: Server) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    assert httpx.post(f"{emulated.v1}/chat/completions", json=body, timeout=600).status_code == 200
    opened.tab("live")
    label = opened.page.locator("#chart-requests text.summary")
    label.wait_for()
    assert (label.text_content() or "").startswith("max ")
    assert opened.page.locator("#chart-requests polyline").count() >= 1
    assert opened.page.locator("#chart-requests text.tick-x").all_text_contents()[-1] == "now"
    assert opened.page.locator("#chart-requests text.tick-y").all_text_contents()[0] == "0"
    assert opened.page.locator("#live circle").count() == 0
    opened.page.screenshot(path=str(SHOTS / "live.png"), full_page=True)
    assert opened.problems == []


CHART_OF_GAPS = """() => {
  const svg = document.getElementById("chart-ttft");
  const t0 = Date.UTC(2030, 0, 1, 12, 0) / 1000;
  chart(svg, [0, 10, 20, 30, 40, 50].map((s) => t0 + s), [null, 2, null, 1, 3, null], String);
  const texts = (cls) => [...svg.querySelectorAll(`text.${cls}`)].map((t) => t.textContent);
  return {
    lines: [...svg.querySelectorAll("polyline")].map((p) => p.getAttribute("points")),
    areas: svg.querySelectorAll("polygon.area").length,
    dots: svg.querySelectorAll("circle").length,
    values: texts("tick-y"),
    times: texts("tick-x"),
    summary: texts("summary"),
  };
}"""


def test_a_chart_has_time_and_value_axes_and_leaves_gaps_empty(opened: Opened) -> None:
    """Buckets without data are gaps, and a lone bucket is a line over its ten seconds (a
    narrow bar), not a dot: [—, 2, —, 1, 3, —] is two runs, each bucket 262/6 units wide."""
    opened.tab("live")
    opened.page.locator("#chart-ttft text.summary").wait_for()
    drawn = opened.page.evaluate(CHART_OF_GAPS)
    assert drawn["lines"] == [  # y: 84 at 0 up to 16 at the top, 5
        "77.7,56.8 121.3,56.8",
        "165.0,70.4 208.7,70.4 208.7,43.2 252.3,43.2",
    ]
    assert (drawn["areas"], drawn["dots"]) == (2, 0)
    assert drawn["values"] == ["0", "2.5", "5"]  # 0, half and a round top
    assert len(drawn["times"]) == 3
    assert drawn["times"][-1] == "now"
    assert drawn["summary"] == ["max 3, last 3"]
    assert opened.problems == []


TABLE_AND_CARD_RIGHT = """() => {
  const table = document.getElementById("devices"), card = table.closest("article");
  const padding = parseFloat(getComputedStyle(card).paddingRight);
  return [table.getBoundingClientRect().right, card.getBoundingClientRect().right - padding];
}"""


@pytest.mark.parametrize("width", [1200, 700, 400])
def test_the_devices_table_fits_its_card(browser: Browser, emulated: Server, width: int) -> None:
    """With emulated devices ("emulated (ZEST_EMULATE_DEVICES)"), at a laptop's width and a
    phone's."""
    opened = Opened(browser, emulated)
    page = opened.page
    try:
        page.set_viewport_size({"width": width, "height": 800})
        page.wait_for_selector("#devices tbody tr")
        table, card = page.evaluate(TABLE_AND_CARD_RIGHT)
        assert table <= card + 0.5, f"the table ends at {table}, its card at {card}"
        if width == 1200:
            page.screenshot(path=str(SHOTS / "status.png"), full_page=True)
    finally:
        page.close()
    assert opened.problems == []


@pytest.fixture(scope="module")
def endless() -> Iterator[Proxy]:
    """An upstream whose answer never ends until its client leaves (then `left` is set)."""
    running = Proxy("http://127.0.0.1:9/v1", Behaviour(endless="and then "))
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory, endless: Proxy) -> Iterator[Server]:
    """A server whose chat task is that upstream: an answer Stop always finds running, however
    slow the machine (the bundled model's 300 tokens could end before the click)."""
    folder = tmp_path_factory.mktemp("web-held")
    routes = folder / "routes.yaml"
    routes.write_text(
        "version: 1\n"
        "models:\n"
        f"  teller: {{engine: remote, base_url: '{endless.v1}', model: teller}}\n"
        "routes:\n"
        "  chat: {kind: chat, model: teller, privacy: allow_remote, max_tokens: 100000}\n"
    )
    running = start_server(routes, folder / "zest.log", {"ZEST_EMULATE_DEVICES": ""})
    yield running
    stop_server(running)


def test_a_stopped_answer_is_marked_as_stopped(
    browser: Browser, held: Server, endless: Proxy
) -> None:
    endless.reset()
    endless.behaviour = Behaviour(endless="and then ")
    opened = Opened(browser, held)
    page = opened.page
    try:
        page.wait_for_selector("#readiness.ok")
        opened.tab("playground")
        page.select_option("#task", "chat")
        page.fill("#max-tokens", "100000")  # no cap the stream could reach before the click
        page.fill("#prompt", "Write a long story about a dragon and a knight.")
        page.click("#send")
        page.wait_for_function(
            "() => (document.querySelector('.turn.assistant')?.textContent || '')"
            ".includes('and then and then')"
        )  # the answer has begun, and never ends
        page.click("#stop")
        page.wait_for_selector("#send:not([disabled])")
        reply = page.locator(".turn.assistant").last
        assert "stopped" in (reply.get_attribute("class") or "")
        assert reply.locator(".mark").text_content() == "stopped"
        assert page.locator(".turn.error").count() == 0
        # The stop reached the upstream: zest closed its stream (a hang guard, not a speed bound).
        assert endless.left.wait(timeout=300)
        page.screenshot(path=str(SHOTS / "playground-stopped.png"), full_page=True)
    finally:
        page.close()
    assert opened.problems == []


def test_a_server_with_keys_asks_for_one_and_refuses_a_wrong_one(
    browser: Browser, keyed: Server
) -> None:
    opened = Opened(browser, keyed)
    page = opened.page
    try:
        page.wait_for_selector("#key-dialog[open]")
        assert "missing API key" in (page.text_content("#key-reason") or "")
        # Readiness is public: the badge tells it before a key is given.
        page.wait_for_selector("#readiness.ok")
        assert page.text_content("#readiness") == "ready"
        page.fill("#key-input", "sk-wrong")
        page.click("#key-save")
        page.wait_for_selector("#key-dialog[open]")
        assert "The key was refused: invalid API key" in (page.text_content("#key-reason") or "")
        page.fill("#key-input", KEY)
        page.click("#key-save")
        page.wait_for_selector("#readiness.ok")
        page.wait_for_selector("#loaded tbody tr")
        page.reload()  # the key is kept for the tab's session: no second prompt
        page.wait_for_selector("#readiness.ok")
        assert not page.locator("#key-dialog").is_visible()
        # A key of ZEST_API_KEYS is no named client: usage is refused (403) and the page says why.
        page.wait_for_function(
            "document.getElementById('usage-note').textContent.startsWith('Usage is shown')"
        )
    finally:
        page.close()
    # The refusals show in the console as the 401s they are, the usage's 403, and nothing else.
    assert all(
        "401" in problem or ("403" in problem and "/v1/usage" in problem)
        for problem in opened.problems
    ), opened.problems
    assert any("401" in problem for problem in opened.problems), opened.problems
