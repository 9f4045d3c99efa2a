// warmrag console: chat, and the admin views once signed in. Plain JavaScript against
// the public API; every value from the service reaches the page as text, never as HTML.
"use strict";

const TOKEN_KEY = "warmrag.adminToken";
const API_KEY_KEY = "warmrag.apiKey";
const SVG_NS = "http://www.w3.org/2000/svg";
const HIT_RATE_OBJECTIVE = 0.95; // the cold-start design's warm hit-rate objective
// A chat's cache.served: where its context prefix came from.
const SERVED_LABELS = { warm: "warm hit", cached: "cached by vLLM", cold: "cold" };
const REFRESH_MS = 5000;
const CONFIRM_MS = 10000; // how long a delete button waits for its confirming click

const $ = (id) => document.getElementById(id);
const token = () => sessionStorage.getItem(TOKEN_KEY);

// ----- DOM helpers -------------------------------------------------------------------

function build(node, props, children) {
  for (const [name, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "text") node.textContent = String(value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

const el = (tag, props, ...children) => build(document.createElement(tag), props, children);
const svg = (tag, props, ...children) =>
  build(document.createElementNS(SVG_NS, tag), props, children);

const MAX_ROWS = 500;

/** Rows into a table body: at most MAX_ROWS, then a line saying how many more there are. */
function fill(tbody, rows, emptyText, columns) {
  const note = (text) => el("tr", {}, el("td", { colspan: columns, class: "muted", text }));
  const shown = rows.slice(0, MAX_ROWS);
  if (!rows.length) shown.push(note(emptyText));
  if (rows.length > MAX_ROWS) shown.push(note(`… and ${number(rows.length - MAX_ROWS)} more (filter to find them)`));
  tbody.replaceChildren(...shown);
}

const number = (n) => Number(n).toLocaleString("en-US");
const count = (n, noun, plural = `${noun}s`) => `${number(n)} ${n === 1 ? noun : plural}`;
const percent = (x) => (x === null || x === undefined ? "–" : `${(x * 100).toFixed(0)} %`);
const ms = (x) => (x >= 10000 ? `${(x / 1000).toFixed(1)} s` : `${Math.round(x)} ms`);
const clock = (epoch) => new Date(epoch * 1000).toLocaleTimeString([], { hour12: false });

function duration(seconds) {
  if (seconds <= 0) return "expired";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// ----- talking to the service --------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** "HTTP 422: documents.0.id: ..." from any of the service's error bodies. */
async function problem(resp) {
  let text = `HTTP ${resp.status}`;
  try {
    const body = await resp.json();
    const openai = body && typeof body.error === "object" ? body.error : null;
    const detail = openai ? openai.issues || openai.message : body.detail;
    if (Array.isArray(detail)) {
      text += ": " + detail.map((i) => `${(i.loc || []).join(".")}: ${i.msg}`).join("; ");
    } else if (detail) {
      text += `: ${detail}`;
    }
  } catch {
    // not JSON: the status says enough
  }
  return text;
}

async function api(path, { method = "GET", json, body, headers = {} } = {}) {
  const sent = { ...headers };
  if (token()) sent.Authorization = `Bearer ${token()}`;
  if (json !== undefined) {
    sent["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  }
  let resp;
  try {
    resp = await fetch(path, { method, headers: sent, body });
  } catch {
    throw new ApiError(0, "cannot reach the service");
  }
  if (!resp.ok) {
    const error = new ApiError(resp.status, await problem(resp));
    if (resp.status === 401) signOut("The service refused the admin token; sign in again.");
    throw error;
  }
  return resp.json();
}

/** Server-Sent Events from a fetch response: {event, data} per event. */
async function* sseEvents(resp) {
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer = (buffer + value).replace(/\r\n/g, "\n"); // a pair split across chunks too
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { event, data: data.join("\n") };
    }
  }
}

// ----- notices, session and pages ----------------------------------------------------

function notice(error) {
  const box = $("notice");
  box.textContent = error ? error.message || String(error) : "";
  box.hidden = !error;
}

function showSession() {
  const signedIn = Boolean(token());
  $("session-state").textContent = signedIn ? "admin: signed in" : "admin: not signed in";
  $("sign-out").hidden = !signedIn;
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  showSession();
  const error = $("login-error");
  error.textContent = message || "";
  error.hidden = !message;
  route();
}

const ADMIN_PAGES = {
  documents: loadDocuments,
  warmup: loadRegistry,
  graph: loadGraph,
  traffic: loadTraffic,
  jobs: loadJobs,
  "bad-cases": loadBadCases,
};
let refreshTimer = null;

function route() {
  const wanted = location.hash.slice(1) || "chat";
  const page = wanted in ADMIN_PAGES || wanted === "chat" ? wanted : "chat";
  const shown = page !== "chat" && !token() ? "login" : page;
  for (const section of document.querySelectorAll(".page")) {
    section.hidden = section.id !== `page-${shown}`;
  }
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("active", link.dataset.page === page);
  }
  clearInterval(refreshTimer);
  refreshTimer = null;
  notice(null);
  if (shown in ADMIN_PAGES) {
    ADMIN_PAGES[shown]().catch(notice);
    if (shown === "traffic") {
      refreshTimer = setInterval(() => loadTraffic().catch(notice), REFRESH_MS);
    }
  }
}

async function signIn(event) {
  event.preventDefault();
  const error = $("login-error");
  sessionStorage.setItem(TOKEN_KEY, $("admin-token").value.trim());
  try {
    await api("/admin/documents");
  } catch (e) {
    sessionStorage.removeItem(TOKEN_KEY);
    error.textContent = e.message;
    error.hidden = false;
    showSession();
    return;
  }
  $("admin-token").value = "";
  error.hidden = true;
  showSession();
  if (!location.hash || location.hash === "#chat") location.hash = "#documents";
  else route();
}

// ----- chat --------------------------------------------------------------------------

function chatFacts(done) {
  const cache = done.cache;
  const detail = { partial: "partly warm", evicted: "warm prefix evicted" }[cache.warm_state];
  const badges = el(
    "div",
    { class: "badges" },
    el("span", {
      class: `badge ${cache.served}`,
      "data-role": "warm",
      text: SERVED_LABELS[cache.served] + (detail ? ` (${detail})` : ""),
    }),
    el("span", {
      class: "badge",
      "data-role": "cached",
      text: `cached ${number(cache.cached_tokens)} of ${number(cache.prompt_tokens)} prompt tokens`,
    }),
    el("span", { class: "badge", "data-role": "ttft", text: `first token ${ms(done.timings.ttft_ms)}` }),
    el("span", { class: "badge", text: `retrieval ${ms(done.timings.retrieval_ms)}` }),
  );
  const passages = el(
    "ol",
    { class: "passages" },
    done.passages.map((p) =>
      el(
        "li",
        {},
        el(
          "details",
          {},
          el("summary", { text: `${p.doc_id} · score ${p.score.toFixed(3)}` }),
          el("pre", { text: p.text }),
        ),
      ),
    ),
  );
  const triples = done.triples.length
    ? el("ul", { class: "triples" }, done.triples.map((t) => el("li", { text: t.join(" — ") })))
    : el("p", { class: "muted", text: "No graph facts were added to this prompt." });
  return [
    badges,
    el("h3", { text: "Passages" }),
    passages,
    el("h3", { text: "Graph facts" }),
    triples,
  ];
}

let stopChat = null;

async function ask(question) {
  const text = el("div", { class: "text streaming" });
  const card = el("article", { class: "answer", "data-state": "streaming", "data-tokens": 0 },
    el("div", { class: "q", text: question }), text);
  $("answers").prepend(card);
  const headers = { "Content-Type": "application/json", Accept: "text/event-stream" };
  const key = sessionStorage.getItem(API_KEY_KEY);
  if (key) headers.Authorization = `Bearer ${key}`;
  let tokens = 0;
  const abort = new AbortController();
  stopChat = () => abort.abort();
  try {
    let resp;
    try {
      resp = await fetch("/v1/chat", {
        method: "POST",
        headers,
        body: JSON.stringify({ question, stream: true }),
        signal: abort.signal,
      });
    } catch {
      throw new ApiError(0, abort.signal.aborted ? "stopped" : "cannot reach the service");
    }
    if (!resp.ok) throw new ApiError(resp.status, await problem(resp));
    let done = null;
    for await (const { event, data } of sseEvents(resp)) {
      const payload = JSON.parse(data);
      if (event === "token") {
        text.textContent += payload.text;
        card.dataset.tokens = String(++tokens);
      } else if (event === "done") {
        done = payload;
      } else if (event === "error") {
        throw new ApiError(0, `${payload.component}: ${payload.error}`);
      }
    }
    if (!done) throw new ApiError(0, "the answer was cut off");
    text.textContent = done.answer;
    if (done.finish_reason === "repeat") {
      card.append(el("p", { class: "note", text: "The answer began to repeat itself and was stopped there." }));
    }
    card.append(...chatFacts(done));
    card.dataset.state = "done";
    card.dataset.warmState = done.cache.warm_state;
    card.dataset.served = done.cache.served;
  } catch (e) {
    const message = abort.signal.aborted ? "stopped" : e.message;
    card.append(el("p", { class: "error", text: message }));
    card.dataset.state = "error";
  } finally {
    text.classList.remove("streaming");
    stopChat = null;
  }
}

async function onAsk(event) {
  event.preventDefault();
  const question = $("question").value.trim();
  const button = $("ask");
  if (!question || button.disabled) return; // one chat at a time (Enter while streaming)
  button.disabled = true;
  $("stop").hidden = false;
  try {
    await ask(question);
  } finally {
    button.disabled = false;
    $("stop").hidden = true;
  }
}

// ----- documents ---------------------------------------------------------------------

let documentIds = [];

function outcome(file, ids, result, error) {
  const table = $("outcomes");
  table.hidden = false;
  let text = error;
  if (!error) {
    const parts = [];
    for (const kind of ["added", "updated", "unchanged"]) {
      if (result[kind].length) parts.push(`${kind} ${result[kind].length}`);
    }
    text = `${parts.join(", ")} (KB version ${result.kb_version})`;
  }
  table.tBodies[0].append(
    el("tr", { class: error ? "failed" : "ok" },
      el("td", { text: file }), el("td", { text: ids.join(", ") || "–" }), el("td", { text })),
  );
}

function progress(done, total, label) {
  $("progress-box").hidden = false;
  $("progress").max = Math.max(total, 1);
  $("progress").value = done;
  $("progress-text").textContent = label;
}

/** The id `warmrag ingest FOLDER` gives a file: its path below the chosen folder. */
function uploadPath(file) {
  const relative = file.webkitRelativePath || "";
  return relative.includes("/") ? relative.slice(relative.indexOf("/") + 1) : file.name;
}

async function upload(event) {
  event.preventDefault();
  const files = Array.from($("files").files);
  if (!files.length) return;
  const button = $("upload");
  button.disabled = true;
  let failed = 0;
  try {
    for (const [i, file] of files.entries()) {
      progress(i, files.length, `${i} of ${files.length} files · ${file.name}`);
      const path = uploadPath(file);
      try {
        const result = await api(`/admin/documents/files?path=${encodeURIComponent(path)}`, {
          method: "POST",
          body: file,
          headers: { "Content-Type": "application/octet-stream" },
        });
        outcome(path, result.documents, result, null);
      } catch (e) {
        failed += 1;
        outcome(path, [], null, e.message);
        if (e.status === 401) return;
      }
    }
    progress(files.length, files.length,
      `${files.length} of ${files.length} files${failed ? ` · ${failed} failed` : ""}`);
    $("files").value = "";
  } finally {
    button.disabled = false;
    await loadDocuments().catch(notice);
  }
}

async function paste(event) {
  event.preventDefault();
  const id = $("paste-id").value.trim();
  const title = $("paste-title").value.trim();
  const doc = { id, text: $("paste-text").value, metadata: title ? { title } : {} };
  const button = $("paste");
  button.disabled = true;
  try {
    const result = await api("/admin/documents", { method: "POST", json: { documents: [doc] } });
    outcome(`pasted: ${id}`, [id], result, null);
    $("paste-form").reset();
  } catch (e) {
    outcome(`pasted: ${id}`, [], null, e.message);
  } finally {
    button.disabled = false;
    await loadDocuments().catch(notice);
  }
}

function deleteButton(id) {
  let armed = null;
  const button = el("button", { type: "button", class: "danger", text: "Delete" });
  button.addEventListener("click", async () => {
    if (!armed) {
      button.classList.add("armed");
      button.textContent = "Confirm delete";
      armed = setTimeout(() => {
        armed = null;
        button.classList.remove("armed");
        button.textContent = "Delete";
      }, CONFIRM_MS);
      return;
    }
    clearTimeout(armed);
    armed = null;
    button.disabled = true;
    try {
      const result = await api(`/admin/documents/${encodeURIComponent(id)}`, { method: "DELETE" });
      outcome(`deleted: ${id}`, [id], { added: [], updated: [], unchanged: [], kb_version: result.kb_version }, null);
    } catch (e) {
      outcome(`deleted: ${id}`, [], null, e.message);
    } finally {
      button.disabled = false;
      button.classList.remove("armed");
      button.textContent = "Delete";
    }
    await loadDocuments().catch(notice);
  });
  return button;
}

function showDocuments() {
  const needle = $("doc-filter").value.trim().toLowerCase();
  const shown = documentIds.filter((id) => id.toLowerCase().includes(needle));
  fill(
    $("documents").tBodies[0],
    shown.map((id) => el("tr", { "data-id": id }, el("td", { text: id }), el("td", {}, deleteButton(id)))),
    needle ? "No document id matches." : "The knowledge base is empty.",
    2,
  );
}

async function loadDocuments() {
  const list = await api("/admin/documents");
  documentIds = list.documents;
  $("doc-count").textContent = `${number(list.count)} · KB version ${list.kb_version}`;
  showDocuments();
}

// ----- warm registry -----------------------------------------------------------------

async function loadRegistry() {
  const reg = await api("/admin/warmup");
  const budget = reg.budget ? ` of a ${number(reg.budget.max_tokens)}-token budget` : "";
  $("registry-summary").textContent =
    `${count(reg.entries.length, "warm prefix", "warm prefixes")} · ${count(reg.warm_tokens, "token")}${budget} · ` +
    `${count(reg.pending_changes, "pending change")} · KB version ${reg.kb_version}`;
  const declined = Object.entries(reg.declined || {}).map(([reason, n]) => `${number(n)} ${reason.replaceAll("_", " ")}`);
  if (reg.truncated) declined.push(`${count(reg.truncated, "context")} warmed only up to the per-entry share`);
  $("registry-declined").textContent = declined.length
    ? `Not warmed since start: ${declined.join(" · ")}.`
    : "Warmup has declined nothing since start.";
  $("registry-declined").classList.toggle("warning", Object.keys(reg.declined || {}).length > 0);
  const rows = reg.entries
    .slice()
    .sort((a, b) => b.hits - a.hits || a.ttl_s - b.ttl_s)
    .map((e) => {
      const docs = [...new Set(e.doc_ids)];
      return el(
        "tr",
        { "data-fingerprint": e.fingerprint },
        el("td", {}, e.queries.length ? e.queries.map((q) => el("div", { text: q })) : el("span", { class: "muted", text: "–" })),
        el("td", { text: `${docs.join(", ")} (${count(e.chunk_ids.length, "chunk")})` }),
        el("td", {
          class: "num",
          text: e.partial
            ? `${number(e.prefix_tokens)} of ${number(e.context_tokens)}, partly warm (${number(e.cached_block_tokens)} in full blocks)`
            : `${number(e.prefix_tokens)} (${number(e.cached_block_tokens)} in full blocks)`,
        }),
        el("td", { class: "num", text: duration(e.ttl_s) }),
        el("td", { class: "num", text: e.hits }),
        el("td", { text: residencyText(e) }),
      );
    });
  fill($("registry").tBodies[0], rows, "Nothing is warm yet.", 6);
  const kv = reg.residency;
  $("registry-residency").textContent = kv
    ? `vLLM holds (from its KV events): ${Object.entries(kv.entries).map(([s, n]) => `${number(n)} ${s}`).join(" · ")}` +
      ` · ${count(kv.retouches, "re-touch", "re-touches")} · ${count(kv.evicted_rewarms, "re-warm")} on eviction` +
      (kv.unknown_periods ? ` · events lost ${kv.unknown_periods}×` : "")
    : "vLLM publishes no KV events: residency is inferred from chats.";
  return reg;
}

// "warm", or why it waits; with KV events, how much of it vLLM holds.
function residencyText(e) {
  const where = e.replica ? `${e.residency} on ${e.replica}` : e.residency;
  if (!e.kv) return where;
  const held = e.kv === "partial" ? `partial (${e.kv_resident_blocks} of ${e.kv_blocks} blocks)` : e.kv;
  return `${where}; vLLM: ${held}`;
}

function declinedText(reports) {
  const totals = {};
  for (const r of reports) for (const [reason, n] of Object.entries(r.declined || {})) totals[reason] = (totals[reason] || 0) + n;
  const parts = Object.entries(totals).map(([reason, n]) => `${number(n)} ${reason.replaceAll("_", " ")}`);
  return parts.length ? `; not warmed: ${parts.join(", ")}` : "";
}

async function runCycle() {
  const button = $("run-cycle");
  button.disabled = true;
  $("cycle-result").textContent = "Running a warm cycle…";
  try {
    const reports = await api("/admin/warmup", { method: "POST" });
    const sum = (field) => reports.reduce((n, r) => n + r[field], 0);
    const kinds = reports.map((r) => r.kind).join(", ") || "nothing to do";
    $("cycle-result").textContent =
      `Cycle done (${kinds}): warmed ${sum("rewarmed")}, extended ${sum("extended")}, ` +
      `retired ${sum("retired")}, ${number(sum("prefill_tokens"))} prefill tokens` +
      (sum("truncated") ? `, ${sum("truncated")} warmed only up to the per-entry share` : "") +
      declinedText(reports) + ".";
  } catch (e) {
    $("cycle-result").textContent = e.message;
  } finally {
    button.disabled = false;
    await loadRegistry().catch(notice);
  }
}

// ----- knowledge graph ---------------------------------------------------------------

let suggestTimer = null;

async function suggestEntities() {
  const q = $("entity").value.trim();
  const found = await api(`/admin/kg/entities?limit=12&q=${encodeURIComponent(q)}`);
  $("entity-names").replaceChildren(...found.entities.map((e) => el("option", { value: e.name })));
  return found;
}

async function loadGraph() {
  const found = await suggestEntities();
  const top = found.entities.slice(0, 6).map((e) => e.name).join(", ");
  $("graph-summary").textContent =
    `${number(found.node_count)} entities, ${number(found.edge_count)} triples.` +
    (top ? ` Best connected: ${top}.` : "");
}

function drawNeighbourhood(around) {
  const view = $("graph-view");
  const cx = 320, cy = 210, radius = 160;
  const others = new Map();
  const add = (name, label) => {
    if (!others.has(name)) others.set(name, []);
    others.get(name).push(label);
  };
  for (const t of around.outgoing) add(t.object, t.predicate);
  for (const t of around.incoming) add(t.subject, `${t.predicate} (in)`);
  const names = [...others.keys()].slice(0, 18);
  const parts = [];
  names.forEach((name, i) => {
    const angle = (2 * Math.PI * i) / names.length - Math.PI / 2;
    const x = cx + radius * Math.cos(angle), y = cy + radius * 0.78 * Math.sin(angle);
    const labels = others.get(name);
    parts.push(svg("line", { x1: cx, y1: cy, x2: x, y2: y }));
    parts.push(svg("text", { x: (cx + x) / 2, y: (cy + y) / 2 - 3, "text-anchor": "middle",
      text: labels.length > 1 ? `${labels.length} facts` : labels[0] }));
    parts.push(svg("circle", { cx: x, cy: y, r: 5, fill: "#2456c8" }));
    parts.push(svg("text", { x, y: y + (y > cy ? 16 : -9), "text-anchor": "middle", class: "node",
      text: name.length > 28 ? `${name.slice(0, 27)}…` : name }));
  });
  parts.push(svg("circle", { cx, cy, r: 8, fill: "#c2410c" }));
  parts.push(svg("text", { x: cx, y: cy + 24, "text-anchor": "middle", class: "center", text: around.entity.name }));
  view.replaceChildren(...parts);
}

async function showEntity(event) {
  event.preventDefault();
  const name = $("entity").value.trim();
  try {
    const around = await api(`/admin/kg/around?limit=100&entity=${encodeURIComponent(name)}`);
    const triples = [...around.outgoing, ...around.incoming];
    $("graph-summary").textContent =
      `${around.entity.name}: ${count(around.total, "triple")}` +
      (around.total > triples.length ? ` (the first ${triples.length} shown)` : "");
    drawNeighbourhood(around);
    fill(
      $("graph-triples").tBodies[0],
      triples.map((t) =>
        el("tr", {}, el("td", { text: t.subject }), el("td", { text: t.predicate }),
          el("td", { text: t.object }), el("td", { text: t.doc_id }))),
      "No triples.",
      4,
    );
  } catch (e) {
    $("graph-summary").textContent = e.message;
    $("graph-view").replaceChildren();
    fill($("graph-triples").tBodies[0], [], "No triples.", 4);
  }
}

// ----- traffic -----------------------------------------------------------------------

function drawHitRate(summary) {
  const W = 720, H = 200, left = 36, bottom = 22, top = 10;
  const plotW = W - left - 8, plotH = H - top - bottom;
  const n = summary.slices.length;
  const step = plotW / n;
  const y = (rate) => top + plotH * (1 - rate);
  const parts = [];
  for (const rate of [0, 0.5, 1]) {
    parts.push(svg("text", { x: left - 4, y: y(rate) + 3, "text-anchor": "end", text: percent(rate) }));
    parts.push(svg("line", { x1: left, x2: W - 8, y1: y(rate), y2: y(rate), stroke: "#e5e9f0" }));
  }
  summary.slices.forEach((s, i) => {
    if (!s.chats) return;
    parts.push(svg("rect", {
      x: left + i * step + step * 0.1, y: y(s.hit_rate), width: Math.max(step * 0.8, 1),
      height: plotH * s.hit_rate + 0.5, fill: s.hit_rate >= HIT_RATE_OBJECTIVE ? "#15803d" : "#c2410c",
    }, svg("title", { text: `${clock(s.start)}: ${s.chats} chats, ${percent(s.hit_rate)} warm` })));
  });
  parts.push(svg("line", { x1: left, x2: W - 8, y1: y(HIT_RATE_OBJECTIVE), y2: y(HIT_RATE_OBJECTIVE),
    stroke: "#b42318", "stroke-dasharray": "5 4" }));
  const ticks = [[0, "start"], [Math.floor(n / 2), "middle"], [n - 1, "end"]];
  for (const [i, anchor] of ticks) {
    const x = anchor === "start" ? left : anchor === "end" ? W - 8 : left + i * step + step / 2;
    parts.push(svg("text", { x, y: H - 6, "text-anchor": anchor, text: clock(summary.slices[i].start) }));
  }
  $("hit-rate").replaceChildren(...parts);
}

function drawHeatmap(target, summary, key, rgb, max) {
  const W = 360, H = 260, left = 46, bottom = 22, top = 6;
  const rows = summary.bucket_edges_ms.length;
  const n = summary.slices.length;
  const cellW = (W - left - 6) / n, cellH = (H - top - bottom) / rows;
  const parts = [];
  summary.slices.forEach((s, i) => {
    s[key].forEach((count, b) => {
      const low = summary.bucket_edges_ms[b];
      const range = b === rows - 1 ? `≥ ${low} ms` : `${low}–${low + summary.bucket_ms} ms`;
      const alpha = count ? 0.18 + 0.82 * (count / max) : 0;
      parts.push(svg("rect", {
        x: left + i * cellW, y: top + (rows - 1 - b) * cellH, width: cellW + 0.3, height: cellH + 0.3,
        fill: count ? `rgba(${rgb}, ${alpha.toFixed(3)})` : "#f3f5f8",
        "data-count": count,
      }, svg("title", { text: `${clock(s.start)}, ${range}: ${count} chats` })));
    });
  });
  for (const b of [0, 5, 10, 15, rows - 1]) {
    const low = summary.bucket_edges_ms[b];
    parts.push(svg("text", { x: left - 4, y: top + (rows - 1 - b) * cellH + cellH * 0.75,
      "text-anchor": "end", text: b === rows - 1 ? `≥${low} ms` : `${low} ms` }));
  }
  parts.push(svg("text", { x: left, y: H - 6, text: clock(summary.slices[0].start) }));
  parts.push(svg("text", { x: W - 6, y: H - 6, "text-anchor": "end", text: clock(summary.slices[n - 1].start) }));
  target.replaceChildren(...parts);
}

async function loadTraffic() {
  const [windowS, sliceS] = $("traffic-window").value.split(":");
  const summary = await api(`/admin/traffic?window_s=${windowS}&slice_s=${sliceS}`);
  $("traffic-summary").textContent =
    `${count(summary.chats, "chat")} in the window, ${number(summary.warm)} warm ` +
    `(hit rate ${percent(summary.hit_rate)}; objective ${percent(HIT_RATE_OBJECTIVE)}).`;
  const counts = summary.slices.flatMap((s) => [...s.warm_buckets, ...s.cold_buckets]);
  const max = Math.max(1, ...counts);
  drawHitRate(summary);
  drawHeatmap($("heat-warm"), summary, "warm_buckets", "194, 65, 12", max);
  drawHeatmap($("heat-cold"), summary, "cold_buckets", "37, 99, 235", max);
}

// ----- jobs and bad cases ------------------------------------------------------------

async function loadJobs() {
  const [reg, reports] = await Promise.all([api("/admin/warmup"), api("/admin/warmup/reports")]);
  fill(
    $("jobs").tBodies[0],
    reg.jobs.map((j) => el("tr", {}, el("td", { text: j.id }),
      el("td", { text: j.next_run_time ? new Date(j.next_run_time).toLocaleString() : "paused" }))),
    "The scheduler has no jobs (warmup off, or not started).",
    2,
  );
  const recent = reports.slice(-50).reverse();
  fill(
    $("reports").tBodies[0],
    recent.map((r) => el("tr", {},
      el("td", { text: new Date(r.started_at * 1000).toLocaleString() }), el("td", { text: r.kind }),
      el("td", { class: "num", text: r.entries_checked }), el("td", { class: "num", text: r.affected }),
      el("td", { class: "num", text: r.rewarmed }), el("td", { class: "num", text: r.extended }),
      el("td", { class: "num", text: r.retired }), el("td", { class: "num", text: number(r.prefill_tokens) }),
      el("td", { class: "num", text: ms(r.total_ms) }))),
    "No cycle has done anything yet.",
    9,
  );
}

async function loadBadCases() {
  const bad = await api("/admin/bad-cases");
  $("bad-summary").textContent =
    `${count(bad.total, "bad case")} kept: chats slower than ${ms(bad.ttft_threshold_ms)} to ` +
    "their first token, and chats whose warm prefix vLLM had evicted. Grouped by question similarity.";
  fill(
    $("bad-cases").tBodies[0],
    bad.groups.map((g) => {
      const x = g.example;
      return el("tr", {},
        el("td", { class: "num", text: g.count }),
        el("td", { text: Object.entries(g.reasons).map(([k, v]) => `${k} ${v}`).join(", ") }),
        el("td", {}, g.questions.map((q) => el("div", { text: q }))),
        el("td", { text: `first token ${ms(x.ttft_ms)} · ${x.warm_state} · cached ` +
          `${number(x.cached_tokens)} of ${number(x.prompt_tokens)} · retrieval ${ms(x.retrieval_ms)}` }));
    }),
    "No bad cases.",
    4,
  );
}

// ----- start -------------------------------------------------------------------------

function start() {
  $("chat-form").addEventListener("submit", onAsk);
  $("stop").addEventListener("click", () => stopChat && stopChat());
  $("question").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      $("chat-form").requestSubmit();
    }
  });
  $("api-key").value = sessionStorage.getItem(API_KEY_KEY) || "";
  $("api-key").addEventListener("change", (e) => {
    if (e.target.value) sessionStorage.setItem(API_KEY_KEY, e.target.value);
    else sessionStorage.removeItem(API_KEY_KEY);
  });
  $("login-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", () => signOut(null));
  $("upload-form").addEventListener("submit", upload);
  $("paste-form").addEventListener("submit", paste);
  $("doc-filter").addEventListener("input", showDocuments);
  $("run-cycle").addEventListener("click", runCycle);
  $("refresh-registry").addEventListener("click", () => loadRegistry().catch(notice));
  $("graph-form").addEventListener("submit", showEntity);
  $("entity").addEventListener("input", () => {
    clearTimeout(suggestTimer);
    suggestTimer = setTimeout(() => suggestEntities().catch(notice), 250);
  });
  $("traffic-window").addEventListener("change", () => loadTraffic().catch(notice));
  window.addEventListener("hashchange", route);
  showSession();
  route();
  document.body.dataset.ready = "true";
}

start();
