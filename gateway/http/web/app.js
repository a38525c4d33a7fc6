// zest's web page: status, routes, a playground and live figures, from zest's own API.
// Plain JavaScript, no library, no network beyond this server. Text from the server is only
// ever set as text (never as HTML).
"use strict";

const KEY = "zest-api-key"; // sessionStorage: this tab only, gone when it closes
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// --- the API, with the key ------------------------------------------------------------------

class KeyRefused extends Error {}

function headers(extra = {}) {
  const key = sessionStorage.getItem(KEY);
  return key ? { ...extra, authorization: `Bearer ${key}` } : extra;
}

async function call(path, options = {}) {
  const answer = await fetch(path, { ...options, headers: headers(options.headers) });
  if (answer.status === 401) {
    const body = await answer.json().catch(() => ({}));
    askForKey(body.error ? body.error.message : "The server refused the request: send a key.");
    throw new KeyRefused("key refused");
  }
  return answer;
}

async function json(path) {
  const answer = await call(path);
  return answer.json();
}

let asking = false;
let declined = false; // the user cancelled: ask again only when they press Key

function askForKey(reason, { asked = false } = {}) {
  if (asking || (declined && !asked)) return;
  asking = true;
  const had = sessionStorage.getItem(KEY);
  $("key-reason").textContent = had ? `The key was refused: ${reason}` : reason;
  $("key-input").value = "";
  $("key-dialog").showModal();
}

function setUpKey() {
  $("key-button").addEventListener("click", () => askForKey("The API key this page sends:", { asked: true }));
  $("key-dialog").addEventListener("close", () => {
    asking = false;
    declined = $("key-dialog").returnValue !== "ok";
    if (!declined && $("key-input").value.trim()) {
      sessionStorage.setItem(KEY, $("key-input").value.trim());
      refreshAll();
    }
  });
}

// --- tabs -----------------------------------------------------------------------------------

function setUpTabs() {
  for (const button of document.querySelectorAll("nav button")) {
    button.addEventListener("click", () => {
      for (const other of document.querySelectorAll("nav button")) other.classList.remove("active");
      button.classList.add("active");
      for (const tab of document.querySelectorAll(".tab")) tab.hidden = tab.id !== button.dataset.tab;
      if (button.dataset.tab === "routes") explainAll();
      if (button.dataset.tab === "live") drawLive();
    });
  }
}

// --- status ---------------------------------------------------------------------------------

function megabytes(bytes) {
  return bytes === null || bytes === undefined ? "n/a" : `${Math.round(bytes / 1e6)} MB`;
}

function deviceLabel(device) {
  // An emulated or software device's label says so again: its name and the tag say it once.
  const tag = device.emulated ? "emulated" : device.software ? "software" : null;
  const cell = el("td", {}, tag ? device.name : device.label || device.name);
  if (tag) cell.append(" ", el("span", { class: "tag" }, tag));
  if (device.memory_total) cell.append(" ", el("span", { class: "muted" }, megabytes(device.memory_total)));
  return cell;
}

function fillRows(tbody, rows) {
  tbody.replaceChildren(...rows.map((cells) => el("tr", {}, ...cells.map((c) => (c instanceof Node ? c : el("td", {}, c))))));
}

let countdowns = [];

// Readiness is a public probe: asked without the key, so that the badge tells the truth on a
// server with keys before one is given (and whatever key this tab holds).
async function refreshReadiness() {
  const answer = await fetch("/v1/ready", { cache: "no-store" });
  showReadiness(await answer.json());
}

function showReadiness(ready) {
  const badge = $("readiness");
  badge.textContent = ready.status;
  const warn = ready.status === "loading" || ready.status === "degraded";
  badge.className = `badge ${ready.status === "ready" ? "ok" : warn ? "warn" : "bad"}`;
  $("ready-text").textContent = ready.status === "ready"
    ? "Every route can be served."
    : ready.ready
      ? "Every route serves; some routing rules take their on_error path."
      : `Not ready (${ready.status}).`;
  const problems = Object.entries(ready.unservable_routes || {}).map(([task, why]) => el("li", {}, `${task}: ${why}`));
  for (const [task, lost] of Object.entries(ready.degraded_rules || {})) {
    const rules = lost.rules.map((r) => `${r.task}.${r.rule}`).join(", ");
    problems.push(el("li", {}, `${task} (${lost.models.join(", ")}; rules ${rules}): ${lost.reason}`));
  }
  for (const error of ready.preload_errors || []) problems.push(el("li", {}, error));
  $("unservable").replaceChildren(...problems);
}

async function refreshStatus() {
  const [info, routes] = await Promise.all([json("/v1/system-info"), json("/v1/routes")]);
  fillRows($("devices").tBodies[0], info.devices.map((d) => [
    deviceLabel(d), d.engines.join(", ") || "none", d.detected_by,
  ]));
  countdowns = info.loaded.map((m) => ({ at: Date.now(), left: m.unloads_in_s, busy: m.busy }));
  fillRows($("loaded").tBodies[0], info.loaded.map((m, i) => [
    m.model, m.device, megabytes(m.memory_bytes), String(m.requests_in_flight),
    String(m.queued), el("td", { "data-countdown": i }, countdown(i)), m.backend,
  ]));
  $("no-models").hidden = info.loaded.length > 0;
  showRoutesFile(routes);
  await refreshUsage();
  return routes;
}

// Requests and tokens by client, task and model (GET /v1/usage): everyone's for the admin key,
// a client's own for its key; a key of ZEST_API_KEYS reads none (403).
async function refreshUsage() {
  const answer = await call("/v1/usage");
  if (answer.status === 403) {
    fillRows($("usage").tBodies[0], []);
    $("usage-note").textContent = "Usage is shown to the admin key, and to each named client its own.";
    return;
  }
  const usage = await answer.json();
  const windows = (row, field) => ["minute", "hour", "day"].map((w) => row[w][field]).join(" / ");
  fillRows($("usage").tBodies[0], usage.data.map((row) => [
    row.client, row.task, row.model, windows(row, "requests"), windows(row, "total_tokens"),
  ]));
  const clients = Object.entries(usage.clients).map(([name, c]) => {
    const set = Object.entries(c.limits).filter(([, v]) => v !== null).map(([k, v]) => `${k} ${v}`);
    return `${name}: ${c.running} running${set.length ? ` (${set.join(", ")})` : ""}`;
  });
  $("usage-note").textContent = usage.data.length || clients.length
    ? clients.join("; ")
    : "No request yet.";
}

function countdown(index) {
  const entry = countdowns[index];
  if (!entry || entry.left === null || entry.left === undefined) return "never (no keep_alive)";
  if (entry.busy) return "busy";
  const left = Math.max(entry.left - (Date.now() - entry.at) / 1000, 0);
  return `${Math.round(left)} s`;
}

function tickCountdowns() {
  for (const cell of document.querySelectorAll("[data-countdown]")) {
    cell.textContent = countdown(Number(cell.dataset.countdown));
  }
}

function showRoutesFile(routes) {
  const loaded = routes.loaded;
  const when = new Date(loaded.at * 1000).toLocaleTimeString();
  $("routes-file").textContent =
    `${routes.path}: loaded at ${when} (${loaded.trigger}), ${routes.reloads} reload(s) since start, ` +
    `${routes.watching ? "watched for changes" : "not watched (SIGHUP or the admin route reload it)"}.`;
  const error = routes.last_error;
  const lines = error
    ? [el("li", {}, `Last reload refused at ${new Date(error.at * 1000).toLocaleTimeString()} (${error.trigger}); the table above keeps serving:`),
      ...error.errors.map((e) => el("li", {}, e))]
    : [];
  $("reload-errors").replaceChildren(...lines);
}

// --- routes: each task's plan ---------------------------------------------------------------

let tasks = [];

async function explainAll() {
  const tokens = Number($("prompt-tokens").value) || 0;
  const [stats, routes, ...plans] = await Promise.all([
    json("/v1/stats"),
    json("/v1/routes"),
    ...tasks.map((t) => json(`/v1/routes/${encodeURIComponent(t.id)}/explain?prompt_tokens=${tokens}`)),
  ]);
  const rules = routes.rules || {};
  $("plans").replaceChildren(...plans.map((plan) => planCard(plan, (stats.slo || {})[plan.task], rules[plan.task])));
}

// A route's rules in order (first match wins), then the default: the route itself serves.
function rulesTable(task, rules) {
  const head = el("tr", {}, el("th", {}, "rule"), el("th", {}, "when"), el("th", {}, "to"), el("th", {}, "outputs"));
  const rows = rules.map((rule) => el("tr", { "data-rule": rule.id },
    el("td", {}, rule.id), el("td", { class: "when" }, rule.when), el("td", {}, rule.to),
    el("td", { class: "muted" }, Object.keys(rule.outputs).length ? JSON.stringify(rule.outputs) : "")));
  rows.push(el("tr", { "data-rule": "default" },
    el("td", {}, "default"), el("td", { class: "muted" }, "no rule matched"), el("td", {}, task), el("td", {})));
  return el("div", { class: "rules" },
    el("h3", {}, "Rules ", el("span", { class: "muted" }, "(top to bottom, the first that matches chooses the route)")),
    el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows)));
}

// The route's objectives and, once requests came, how its window stands against each.
function sloLine(slo, state) {
  const targets = [];
  if (slo.ttft_p95_s !== null) targets.push(`TTFT p95 ≤ ${slo.ttft_p95_s} s`);
  if (slo.min_tokens_per_s !== null) targets.push(`decode ≥ ${slo.min_tokens_per_s} tokens/s`);
  const line = el("p", { class: "slo" }, `SLO: ${targets.join(", ")} over the last ${slo.window_text}`);
  if (!state) return line;
  line.append(` (${state.requests} request${state.requests === 1 ? "" : "s"}):`);
  const units = { ttft_p95: " s", tokens_per_s: " tokens/s" };
  for (const [name, objective] of Object.entries(state.objectives)) {
    const value = objective.value === null ? "no data" : `${Number(objective.value.toPrecision(3))}${units[name] || ""}`;
    line.append(" ", el("span", { class: `badge ${objective.ok ? "ok" : "bad"}`, "data-objective": name },
      `${name} ${value}: ${objective.ok ? "ok" : "breached"}`));
  }
  return line;
}

function planCard(plan, sloState, rules) {
  const route = plan.route;
  const card = el("article", { class: "plan", "data-task": plan.task },
    el("h2", {}, `${plan.task} `, el("span", { class: "muted" }, `${route.kind}, ${route.model} (${plan.engine}), device ${route.device}`)),
    el("p", { class: "muted" }, `privacy ${route.privacy}; max_prompt_tokens ${route.context.max_prompt_tokens ?? "—"}, on_overflow ${route.context.on_overflow}; on_failure ${route.on_failure}`));
  if (plan.slo) card.append(sloLine(plan.slo, sloState));
  if (rules && rules.length) card.append(rulesTable(plan.task, rules));
  if (plan.budget) card.append(el("p", { class: "verdict" }, `For ${plan.prompt_tokens} tokens: ${plan.budget}`));
  const attempts = el("ol");
  for (const attempt of plan.attempts) {
    const item = el("li", {}, `${attempt.model} on ${attempt.device}: ${attempt.reason}`);
    if (attempt.emulated) item.append(" ", el("span", { class: "tag" }, "emulated"));
    if (attempt.budget) item.append(el("div", { class: "muted" }, attempt.budget));
    attempts.append(item);
  }
  card.append(attempts);
  for (const removed of plan.removed) card.append(el("div", { class: "muted" }, `left out: ${removed}`));
  if (plan.error) card.append(el("p", { class: "problems" }, `${plan.error.code}: ${plan.error.message}`));
  return card;
}

// --- playground -----------------------------------------------------------------------------

let turns = [];
let running = null; // the AbortController of the answer streaming now

function fillTasks(models) {
  tasks = models.data.filter((m) => m.zest && m.zest.type === "task" && m.zest.kind !== "embedding");
  $("task").replaceChildren(...tasks.map((t) => el("option", { value: t.id }, `${t.id} (${t.zest.kind})`)));
}

function currentKind() {
  const task = tasks.find((t) => t.id === $("task").value);
  return task ? task.zest.kind : "chat";
}

function showTurns() {
  $("history").replaceChildren(...turns.map((t) => el("div", { class: `turn ${t.role}${t.stopped ? " stopped" : ""}` },
    t.content, t.stopped ? el("span", { class: "mark", title: "Stop ended this answer early" }, "stopped") : null)));
}

function requestBody(text) {
  const body = { model: $("task").value, stream: true, stream_options: { include_usage: true },
    max_tokens: Number($("max-tokens").value) || 128 };
  if ($("temperature").value !== "") body.temperature = Number($("temperature").value);
  if ($("route-trace").checked) body.route_trace = true;
  if (currentKind() === "completion") return ["/v1/completions", { ...body, prompt: text }];
  const messages = turns.filter((t) => t.role !== "error").map(({ role, content }) => ({ role, content }));
  return ["/v1/chat/completions", { ...body, messages }];
}

const SERVED_HEADERS = ["x-zest-route", "x-zest-rule", "x-zest-plan", "x-zest-pipeline", "x-zest-trimmed", "x-zest-fallbacks", "x-zest-ignored", "x-request-id"];

function showServed(answer, usage, extension) {
  const rows = [];
  for (const name of SERVED_HEADERS) {
    const value = answer.headers.get(name);
    if (value) rows.push(el("dt", {}, name), el("dd", {}, value));
  }
  if (extension && "route_to" in extension) rows.push(...decisionRows(extension));
  if (usage) rows.push(el("dt", {}, "usage"), el("dd", {}, JSON.stringify(usage)));
  if (extension) rows.push(el("dt", {}, "zest"), el("dd", {}, JSON.stringify(extension)));
  $("served").replaceChildren(...rows);
}

// The routing decision of the zest object, and its trace when the request asked for one.
function decisionRows(zest) {
  const rule = zest.matched_rule === null ? "default (no rule matched)" : `rule ${zest.matched_rule}`;
  const outputs = Object.keys(zest.outputs || {}).length ? `, outputs ${JSON.stringify(zest.outputs)}` : "";
  const rows = [el("dt", {}, "decision"), el("dd", { id: "decision" }, `${rule} → route ${zest.route_to}${outputs}`)];
  if (zest.trace) {
    const entries = zest.trace.map((entry) => {
      const extra = ["score", "label", "cached", "error"].filter((k) => k in entry).map((k) => `${k} ${entry[k]}`);
      return el("li", { class: entry.result ? "held" : "" },
        `${entry.condition}: ${entry.result}${extra.length ? ` (${extra.join(", ")})` : ""}`);
    });
    rows.push(el("dt", {}, "trace"), el("dd", {}, el("ol", { id: "trace" }, ...entries)));
  }
  return rows;
}

async function send(event) {
  event.preventDefault();
  const text = $("prompt").value;
  if (!text.trim() || running) return;
  if (currentKind() === "completion") turns = [];
  turns.push({ role: "user", content: text });
  const reply = { role: "assistant", content: "" };
  turns.push(reply);
  $("prompt").value = "";
  showTurns();
  const [path, body] = requestBody(text);
  if (currentKind() === "chat") body.messages.pop(); // the empty reply being written
  running = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  try {
    await stream(path, body, reply);
  } catch (error) {
    if (error.name === "AbortError") reply.stopped = true; // Stop: the answer is cut short
    else if (!(error instanceof KeyRefused)) {
      turns.push({ role: "error", content: String(error.message || error) });
    }
  } finally {
    running = null;
    $("send").disabled = false;
    $("stop").disabled = true;
    showTurns();
  }
}

async function stream(path, body, reply) {
  const answer = await call(path, {
    method: "POST", body: JSON.stringify(body), signal: running.signal,
    headers: { "content-type": "application/json" },
  });
  if (!answer.ok) {
    const failed = await answer.json().catch(() => ({}));
    showServed(answer, null, null);
    throw new Error(failed.error ? `${answer.status} ${failed.error.code || ""}: ${failed.error.message}` : `HTTP ${answer.status}`);
  }
  let usage = null, extension = null;
  showServed(answer, null, null);
  for await (const data of events(answer.body)) {
    if (data === "[DONE]") break;
    const chunk = JSON.parse(data);
    if (chunk.error) throw new Error(`${chunk.error.code || "error"}: ${chunk.error.message}`);
    for (const choice of chunk.choices || []) {
      reply.content += choice.delta ? choice.delta.content || "" : choice.text || "";
    }
    if (chunk.usage) usage = chunk.usage;
    if (chunk.zest) extension = chunk.zest;
    showTurns();
  }
  showServed(answer, usage, extension);
}

async function* events(body) {
  // Server-sent events: "data: ..." lines, events separated by a blank line.
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
      if (data) yield data;
    }
  }
}

function setUpPlayground() {
  $("play-form").addEventListener("submit", send);
  $("prompt").addEventListener("keydown", (e) => { if (e.key === "Enter" && e.ctrlKey) send(e); });
  $("stop").addEventListener("click", () => running && running.abort());
  $("reset").addEventListener("click", () => { turns = []; showTurns(); $("served").replaceChildren(); });
  $("task").addEventListener("change", () => { turns = []; showTurns(); });
}

// --- live figures ---------------------------------------------------------------------------

// A chart of one figure over the window: a value axis (0, half, top) and a time axis (the
// window's start, middle and now). Each bucket's value is drawn over the bucket's ten seconds,
// filled down to 0, and buckets without data are left empty: a gap is a gap, and a lone bucket
// is a narrow bar (not a dot that could be anywhere).
const PLOT = { left: 34, right: 296, top: 16, bottom: 84 }; // in a viewBox of 300 × 100
const SVG_NS = "http://www.w3.org/2000/svg";

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function niceTop(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((m) => m * power).find((m) => m >= value);
}

function clock(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

function chart(svg, times, values, format, bucketSeconds = 10) {
  const known = values.filter((v) => v !== null && v !== undefined);
  const top = niceTop(Math.max(...known, 0));
  const width = (PLOT.right - PLOT.left) / Math.max(values.length, 1);
  const y = (v) => (PLOT.bottom - (v / top) * (PLOT.bottom - PLOT.top)).toFixed(1);
  const runs = [];
  let run = null;
  values.forEach((v, i) => {
    if (v === null || v === undefined) { run = null; return; }
    if (!run) runs.push((run = []));
    const x0 = PLOT.left + i * width;
    run.push(`${x0.toFixed(1)},${y(v)}`, `${(x0 + width).toFixed(1)},${y(v)}`);
  });
  svg.replaceChildren(
    svgEl("line", { class: "axis", x1: PLOT.left, y1: PLOT.top, x2: PLOT.left, y2: PLOT.bottom }),
    svgEl("line", { class: "axis", x1: PLOT.left, y1: PLOT.bottom, x2: PLOT.right, y2: PLOT.bottom }),
  );
  for (const v of [0, top / 2, top]) {
    svg.append(svgEl("line", { class: "grid", x1: PLOT.left, y1: y(v), x2: PLOT.right, y2: y(v) }));
    svg.append(svgEl("text", { class: "tick-y", x: PLOT.left - 3, y: Number(y(v)) + 3, "text-anchor": "end" }, format(v)));
  }
  if (times.length) {
    const start = times[0], end = times[times.length - 1] + bucketSeconds;
    const labels = [[PLOT.left, clock(start), "start"], [(PLOT.left + PLOT.right) / 2, clock((start + end) / 2), "middle"], [PLOT.right, "now", "end"]];
    for (const [x, text, anchor] of labels) svg.append(svgEl("text", { class: "tick-x", x, y: PLOT.bottom + 12, "text-anchor": anchor }, text));
  }
  for (const points of runs) {
    const first = points[0].split(",")[0], last = points[points.length - 1].split(",")[0];
    const base = `${last},${PLOT.bottom} ${first},${PLOT.bottom}`;
    svg.append(svgEl("polygon", { class: "area", points: `${points.join(" ")} ${base}` }));
    svg.append(svgEl("polyline", { points: points.join(" ") }));
  }
  const summary = known.length ? `max ${format(Math.max(...known))}, last ${format(known[known.length - 1])}` : "no data yet";
  svg.append(svgEl("text", { class: "summary", x: PLOT.right, y: 9, "text-anchor": "end" }, summary));
}

async function drawLive() {
  const history = await json("/v1/stats/history");
  const times = history.buckets.map((b) => b.t);
  const series = (key) => history.buckets.map((b) => b[key]);
  const count = (v) => String(Math.round(v * 10) / 10);
  const figure = (v) => v.toFixed(v >= 10 ? 0 : v >= 1 ? 1 : 2);
  chart($("chart-ttft"), times, series("ttft_p50_s"), figure, history.bucket_s);
  chart($("chart-rate"), times, series("tokens_per_s"), figure, history.bucket_s);
  chart($("chart-queue"), times, series("queue_depth"), count, history.bucket_s);
  chart($("chart-requests"), times, series("requests"), count, history.bucket_s);
}

// --- start ----------------------------------------------------------------------------------

async function refreshAll() {
  refreshReadiness().catch((e) => console.warn("zest page:", e));
  try {
    fillTasks(await json("/v1/models"));
    await refreshStatus();
    if (!$("routes").hidden) await explainAll();
    if (!$("live").hidden) await drawLive();
  } catch (error) {
    if (!(error instanceof KeyRefused)) console.warn("zest page:", error);
  }
}

function every(ms, work) {
  setInterval(() => work().catch((e) => { if (!(e instanceof KeyRefused)) console.warn("zest page:", e); }), ms);
}

document.addEventListener("DOMContentLoaded", () => {
  setUpKey();
  setUpTabs();
  setUpPlayground();
  $("explain-form").addEventListener("submit", (e) => { e.preventDefault(); explainAll(); });
  refreshAll();
  every(2000, refreshReadiness);
  every(2000, refreshStatus);
  every(5000, async () => { if (!$("live").hidden) await drawLive(); });
  every(5000, async () => { if (!$("routes").hidden) await explainAll(); });
  setInterval(tickCountdowns, 1000);
});
