"""Web pages elsewhere against a keyless zest on loopback, in a real browser: Debian's Chromium
driven by Playwright (no browser download), as in test_web.py.

- DNS rebinding: Chromium resolves rebind.evil.example to 127.0.0.1
  (--host-resolver-rules). The attacker's page is first served at
  http://rebind.evil.example:ZEST_PORT/ by the attacker's server (the answer its DNS gave
  first, played by Playwright's routing); its scripts then call that same origin, which is zest
  now. The browser lets them read every answer (same origin): zest must refuse them by their
  Host (403 host_not_allowed), and unload nothing. (With the name in ZEST_ALLOWED_HOSTS the
  same page unloads the model and reloads the routes: the attack is real.)
- Cross-site requests: a page served by another loopback server (another port, another origin)
  POSTs to /v1/admin/reload as a page may without asking: no-cors fetches with no body, a
  text/plain body and a form body, and a form submitted with enctype text/plain. zest must
  refuse each (403 origin_not_allowed, in its access log) and reload nothing (GET /v1/routes
  counts reloads).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Route, sync_playwright

from tests.e2e.conftest import REPO, Server, free_port, start_server, stop_server
from tests.e2e.test_web import CHROMIUM, FLAGS

REBOUND = "rebind.evil.example"
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed: run make browser"
)
# Chromium keeps a page it takes for a public one (the routed first answer) from calling
# loopback; Firefox and Safari do not, nor older Chromiums. zest must refuse on its own: the
# browser is run as those are.
WITHOUT_LOCAL_NETWORK_CHECKS = (
    "--disable-features=BlockInsecurePrivateNetworkRequests,LocalNetworkAccessChecks,"
    "PrivateNetworkAccessSendPreflights"
)
OPEN = {
    "ZEST_API_KEYS": "",
    "ZEST_ADMIN_KEY": "",
    "ZEST_CORS_ORIGINS": "",
    "ZEST_ALLOWED_HOSTS": "",
    "ZEST_EMULATE_DEVICES": "",
}

# Served at http://rebind.evil.example:ZEST_PORT/rebind.html: every call is same-origin.
REBIND_PAGE = """<!doctype html><title>rebind</title><script>
async function call(path, init) {
  const reply = await fetch(path, init);
  return {status: reply.status, body: await reply.text()};
}
(async () => {
  const json = {"content-type": "application/json"};
  try {
    window.results = {
      unload: await call("/v1/unload",
                         {method: "POST", headers: json, body: JSON.stringify({model: "smollm2"})}),
      loaded: await call("/v1/loaded", {}),
      reload: await call("/v1/admin/reload", {method: "POST"}),
    };
  } catch (error) {
    window.results = {error: String(error)};
  }
})();
</script>"""

# Served by the attacker's server, another origin: no answer can be read, none is needed.
RELOAD_PAGE = """<!doctype html><title>reload</title><script>
const target = "http://127.0.0.1:ZEST_PORT/v1/admin/reload";
const attempts = [
  {mode: "no-cors", method: "POST"},
  {mode: "no-cors", method: "POST", body: "{}", headers: {"content-type": "text/plain"}},
  {mode: "no-cors", method: "POST", body: new URLSearchParams({reload: "1"})},
];
(async () => {
  const types = [];
  for (const init of attempts) {
    try {
      types.push((await fetch(target, init)).type);
    } catch (error) {
      types.push(String(error));
    }
  }
  window.results = types;
})();
</script>"""

FORM_PAGE = """<!doctype html><title>form</title>
<form method="post" enctype="text/plain" action="http://127.0.0.1:ZEST_PORT/v1/admin/reload">
<input name="reload" value="1"></form>
<script>document.forms[0].submit();</script>"""


class Attacker:
    """A loopback HTTP server of the attacker's pages, on a port of its own."""

    def __init__(self, pages: dict[str, str]) -> None:
        class Pages(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                page = pages.get(self.path)
                body = (page or "not found").encode()
                self.send_response(200 if page else 404)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Pages)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def keyless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The default routes, no keys, bound to 127.0.0.1: the server a page must not drive."""
    log = tmp_path_factory.mktemp("browser-attacks") / "zest.log"
    running = start_server(REPO / "routes.yaml", log, OPEN)
    yield running
    stop_server(running)


@pytest.fixture(scope="module")
def attacker(keyless: Server) -> Iterator[Attacker]:
    port = keyless.base_url.rsplit(":", 1)[1]
    pages = {"/rebind.html": REBIND_PAGE, "/reload.html": RELOAD_PAGE, "/form.html": FORM_PAGE}
    running = Attacker({path: page.replace("ZEST_PORT", port) for path, page in pages.items()})
    yield running
    running.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        rules = f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=[*FLAGS, rules, WITHOUT_LOCAL_NETWORK_CHECKS]
        )
        yield launched
        launched.close()


def loaded_models(server: Server) -> list[str]:
    return [entry["model"] for entry in httpx.get(f"{server.v1}/loaded", timeout=30).json()["data"]]


def reloads(server: Server) -> int:
    count: int = httpx.get(f"{server.v1}/routes", timeout=30).json()["reloads"]
    return count


def reload_statuses(server: Server) -> list[str]:
    """The status of each POST /v1/admin/reload in the server's access log, in order."""
    return re.findall(r'"POST /v1/admin/reload HTTP/1.1" (\d+)', server.log())


def test_a_rebound_name_reads_and_unloads_nothing(
    browser: Browser, keyless: Server, attacker: Attacker
) -> None:
    assert "smollm2" in loaded_models(keyless)
    before = reloads(keyless)
    rebound = f"http://{REBOUND}:{keyless.base_url.rsplit(':', 1)[1]}"
    page = browser.new_page()
    try:
        # The name's first answer: the attacker's own server, serving its page.
        def first_answer(route: Route) -> None:
            route.fulfill(response=route.fetch(url=f"{attacker.url}/rebind.html"))

        page.route(f"{rebound}/rebind.html", first_answer)
        page.goto(f"{rebound}/rebind.html")
        page.wait_for_function("window.results !== undefined", timeout=30_000)
        results = page.evaluate("window.results")
        ui = page.goto(f"{rebound}/")  # zest's own web page, under the rebound name
        assert ui is not None
        assert ui.status == 403
    finally:
        page.close()
    for call in ("unload", "loaded", "reload"):
        assert results[call]["status"] == 403, results
        error = httpx.Response(403, content=results[call]["body"]).json()["error"]
        assert error["code"] == "host_not_allowed"
        assert error["message"].startswith(f"the Host '{rebound[7:]}' is not a name of this server")
    assert "smollm2" in loaded_models(keyless)
    assert reloads(keyless) == before


def test_a_page_of_another_origin_cannot_reload(
    browser: Browser, keyless: Server, attacker: Attacker
) -> None:
    before = reloads(keyless)
    logged = len(reload_statuses(keyless))
    page = browser.new_page()
    try:
        page.goto(f"{attacker.url}/reload.html")
        page.wait_for_function("window.results !== undefined", timeout=30_000)
        assert page.evaluate("window.results") == ["opaque"] * 3  # sent; unreadable to it
        page.goto(f"{attacker.url}/form.html")  # submits itself: the browser shows zest's answer
        page.wait_for_url(f"{keyless.v1}/admin/reload", timeout=30_000)
        answer = page.inner_text("body")
    finally:
        page.close()
    assert '"code":"origin_not_allowed"' in answer.replace(" ", "")
    # Each of the four reached zest and was refused.
    assert reload_statuses(keyless)[logged:] == ["403"] * 4, keyless.log()
    assert reloads(keyless) == before
    # The counter counts: the same request from a client that is not a web page reloads.
    assert httpx.post(f"{keyless.v1}/admin/reload", timeout=600).status_code == 200
    assert reloads(keyless) == before + 1
