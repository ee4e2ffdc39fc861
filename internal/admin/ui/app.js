// fabric operator console: a hash-routed page per view, each a client of
// the admin JSON API (/api, /status). No build step, no dependencies.
"use strict";

const view = document.getElementById("view");
const tokenInput = document.getElementById("token");
const tokenState = document.getElementById("token-state");

const STATE_COLORS = {
  waiting: "#4a7bd0", delayed: "#8a6fd1", active: "#e39a1b", suspended: "#b0841a",
  completed: "#2e9a4b", failed: "#d03a3a", cancelled: "#6b7280", expired: "#9b3b8f",
  skipped: "#9ca3af", running: "#e39a1b", waiting_children: "#3aa0b5", rate_limited: "#c2671c", resumable: "#5a9e2f",
};

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function stateBadge(s) { return `<span class="state st-${esc(s)}" data-state="${esc(s)}">${esc(s || "?")}</span>`; }
function ms(v) {
  const n = Number(v);
  if (!v || !n) return "";
  return new Date(n).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}
function token() { return sessionStorage.getItem("fabric-admin-token") || ""; }
function showTokenState() { tokenState.textContent = token() ? "set" : "read-only"; }
tokenInput.value = token();
showTokenState();
tokenInput.addEventListener("input", () => {
  sessionStorage.setItem("fabric-admin-token", tokenInput.value.trim());
  showTokenState();
});
document.getElementById("token-form").addEventListener("submit", (e) => e.preventDefault());

async function api(path, opts = {}) {
  const headers = {};
  if (opts.body !== undefined) headers["Content-Type"] = "application/json";
  if (opts.method === "POST" && token()) headers["Authorization"] = "Bearer " + token();
  const resp = await fetch(path, { method: opts.method || "GET", headers,
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
  let data;
  try { data = await resp.json(); } catch { data = { error: resp.statusText }; }
  if (!resp.ok) {
    const err = new Error(data.error || resp.statusText);
    err.status = resp.status;
    throw err;
  }
  return data;
}

function fail(err) {
  view.innerHTML = `<div class="error-box" id="error">${esc(err.status ? "HTTP " + err.status + ": " : "")}${esc(err.message)}</div>`;
}

function table(id, headers, rows) {
  return `<table id="${id}"><thead><tr>${headers.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead>` +
    `<tbody>${rows.join("")}</tbody></table>`;
}

function kv(obj, keys) {
  const ks = keys || Object.keys(obj || {}).sort();
  const rows = ks.filter((k) => obj && obj[k] !== undefined && obj[k] !== "")
    .map((k) => `<tr><th>${esc(k)}</th><td class="mono" data-field="${esc(k)}">${esc(/_at$|_ms$|_until$|^ts$/.test(k) && Number(obj[k]) > 1e11 ? ms(obj[k]) + " (" + obj[k] + ")" : obj[k])}</td></tr>`);
  return rows.length ? `<table class="kv">${rows.join("")}</table>` : "<p>none</p>";
}

// ---- overview -------------------------------------------------------------

const throughput = [];
let overviewTimer = null;

async function overview() {
  const r = await api("/status");
  // The host's sampler keeps the last readings; without one (Postgres)
  // the chart is this page's own samples.
  const hist = await api("/api/throughput").then((h) => h.points.map((p) => p.per_second)).catch(() => null);
  if (hist) throughput.splice(0, throughput.length, ...hist.slice(-60));
  else throughput.push(r.throughput || 0);
  if (throughput.length > 60) throughput.shift();
  const c = r.census || { executions: {}, lag_ms: {} };
  const cards = Object.entries(c.executions || {}).map(([k, v]) => `<div class="card" data-count="${esc(k)}">${esc(k)}<b>${v}</b></div>`).join("");
  const plugins = (r.plugins || []).map((p) => `<tr data-plugin="${esc(p.name)}"><td>${p.state === "rejected" ? esc(p.name) : `<a class="plugin-link" href="#/plugin/${encodeURIComponent(p.name)}">${esc(p.name)}</a>`}</td><td>${esc(p.version)}</td>` +
    `<td>${esc(p.state)}</td><td class="num">${p.cycles ?? ""}</td><td class="num">${(c.lag_ms || {})[p.name] ?? ""}</td>` +
    `<td class="num">${p.faults ?? ""}</td><td>${esc(p.last_swap || "")}</td><td>${esc(p.reason || p.fault || "")}</td></tr>`);
  const rejected = (r.rejected || []).map((f) => `<tr><td class="mono">${esc(f.path)}</td><td>${esc(f.reason)}</td><td>${esc(f.error)}</td></tr>`);
  const max = Math.max(1, ...throughput);
  const step = 356 / Math.max(1, throughput.length - 1);
  const pts = throughput.map((v, i) => `${2 + i * step},${60 - (v / max) * 55}`).join(" ");
  view.innerHTML = `<h1>Overview</h1>
    <p>${esc(r.backend || "")} · census at ${esc(c.at || "")} · throughput <b id="throughput">${(r.throughput || 0).toFixed(1)}</b>/s
    ${r.error ? `<span class="error-box">${esc(r.error)}</span>` : ""}</p>
    <div class="cards">${cards}</div>
    <h2>Throughput (terminal executions per second, last ${throughput.length} readings, peak ${max.toFixed(1)})</h2>
    <svg id="throughput-chart" data-points="${throughput.length}" width="360" height="62" style="background:#fff;border:1px solid #dde1e8">
      <polyline fill="none" stroke="#2e9a4b" stroke-width="2" points="${pts}"/></svg>
    <h2>Plugins</h2>
    ${table("plugins", ["name", "version", "state", "cycles", "lag ms", "faults", "last swap", "reason"], plugins)}
    <h2>Rejected files</h2>
    ${rejected.length ? table("rejected", ["path", "reason", "error"], rejected) : "<p>none</p>"}`;
  overviewTimer = setTimeout(() => { if (location.hash === "" || location.hash === "#/") overview().catch(fail); }, 2000);
}

// ---- lanes -----------------------------------------------------------------

async function lanes() {
  const r = await api("/api/lanes");
  const cols = ["eligible", "delayed", "active", "suspended", "blocked:dependencies", "blocked:budget", "blocked:quota",
    "blocked:route", "blocked:operator", "terminal"];
  const rows = r.lanes.map((l) => `<tr data-lane="${esc(l.lane)}"><td><a href="#/executions?lane=${encodeURIComponent(l.lane)}">${esc(l.lane)}</a></td>` +
    cols.map((c) => `<td class="num"><a href="#/executions?lane=${encodeURIComponent(l.lane)}&state=${encodeURIComponent(c)}">${l.counts[c]}</a></td>`).join("") +
    `<td class="num">${l.total}</td><td>${esc(l.state)}</td></tr>`);
  view.innerHTML = `<h1>Lanes</h1>${table("lanes", ["lane", ...cols, "total", "state"], rows)}
    <p>FlowFabric keeps no lane state on Valkey, so lanes cannot be paused here.</p>`;
}

// ---- executions ------------------------------------------------------------

const STATES = ["", "eligible", "delayed", "active", "suspended", "blocked", "terminal", "completed", "failed", "cancelled", "expired", "skipped"];

async function executions(params) {
  const q = new URLSearchParams();
  for (const k of ["lane", "state", "flow", "limit", "cursor", "order"]) if (params.get(k)) q.set(k, params.get(k));
  if (!q.get("limit")) q.set("limit", "25");
  const [page, ls] = await Promise.all([api("/api/executions?" + q), api("/api/lanes")]);
  const laneOpts = ["", ...ls.lanes.map((l) => l.lane)].map((l) => `<option ${l === (params.get("lane") || "") ? "selected" : ""} value="${esc(l)}">${esc(l || "all lanes")}</option>`).join("");
  const stateOpts = STATES.map((s) => `<option ${s === (params.get("state") || "") ? "selected" : ""} value="${esc(s)}">${esc(s || "any state")}</option>`).join("");
  const rows = page.executions.map((e) => `<tr data-id="${esc(e.id)}"><td class="mono"><a class="exec-link" href="#/execution/${encodeURIComponent(e.id)}">${esc(e.id)}</a></td>` +
    `<td>${esc(e.lane)}</td><td>${stateBadge(e.state)}</td><td>${esc(e.kind)}</td><td class="num">${e.priority}</td>` +
    `<td class="num">${e.attempts}</td><td>${ms(e.created_at_ms)}</td>` +
    `<td>${e.flow_id ? `<a href="#/flow/${encodeURIComponent(e.flow_id)}">flow</a>` : ""}</td></tr>`);
  const next = new URLSearchParams(q);
  next.set("cursor", page.next_cursor || "");
  view.innerHTML = `<h1>Executions</h1>
    <form class="filters" id="filters">
      <label>lane<select name="lane">${laneOpts}</select></label>
      <label>state<select name="state">${stateOpts}</select></label>
      <label>flow<input name="flow" value="${esc(params.get("flow") || "")}" placeholder="flow id"></label>
      <label>page size<input name="limit" type="number" min="1" max="1000" value="${esc(q.get("limit"))}"></label>
      <label>order<select name="order"><option value="">oldest first</option><option value="desc" ${q.get("order") === "desc" ? "selected" : ""}>newest first</option></select></label>
      <button type="submit">Filter</button>
    </form>
    ${table("executions", ["id", "lane", "state", "kind", "priority", "attempts", "created", "flow"], rows)}
    <p>${page.executions.length} shown. ${page.next_cursor ? `<a id="next-page" href="#/executions?${next}">Next page →</a>` : "End of listing."}</p>`;
  document.getElementById("filters").addEventListener("submit", (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    const nq = new URLSearchParams();
    for (const [k, v] of f) if (v) nq.set(k, v);
    location.hash = "#/executions?" + nq;
  });
}

// ---- execution detail ------------------------------------------------------

async function execution(id) {
  const d = await api("/api/executions/" + encodeURIComponent(id));
  const st = d.core.public_state;
  const attempts = d.attempts.map((a) => (a.frames ||= [], a)).map((a) => `<tr data-attempt="${a.index}"><td class="num">${a.index}</td><td>${esc(a.fields.attempt_state)}</td>` +
    `<td>${ms(a.fields.started_at)}</td><td>${ms(a.fields.ended_at)}</td><td class="attempt-error">${esc(a.error)}</td>` +
    `<td>${a.frames.length} frames${a.stream_closed ? " (closed: " + esc(a.stream_closed) + ")" : ""}` +
    `${a.frames.length ? `<pre>${esc(a.frames.map((f) => f.id + " " + JSON.stringify(f.fields)).join("\n"))}</pre>` : ""}</td></tr>`);
  const history = d.lease_history.map((f) => `<tr><td>${ms(f.fields.ts)}</td><td>${esc(f.fields.event)}</td><td>${esc(f.fields.worker_id)}</td>` +
    `<td>${esc(f.fields.reason || "")}</td><td class="num">${esc(f.fields.lease_epoch || f.fields.new_lease_epoch || "")}</td></tr>`);
  const wps = d.waitpoints.map((w) => `<h3 class="mono">${esc(w.id)}</h3>${kv(w.fields)}`).join("");
  const flow = d.flow ? `<h2>Flow</h2><p>member of <a id="flow-link" href="#/flow/${encodeURIComponent(d.flow.flow_id)}">${esc(d.flow.flow_id)}</a></p>` +
    table("upstream", ["upstream", "kind", "state"], d.flow.upstream.map((e) => `<tr><td class="mono"><a href="#/execution/${encodeURIComponent(e.upstream_execution_id)}">${esc(e.upstream_execution_id)}</a></td><td>${esc(e.dependency_kind)}</td><td>${esc(e.state)}</td></tr>`)) : "";
  view.innerHTML = `<h1>Execution <span class="mono" id="exec-id">${esc(d.id)}</span> <span id="detail-state">${stateBadge(st)}</span></h1>
    <div class="actions">
      <button id="action-cancel">Cancel</button>
      <button id="action-replay">Replay</button>
      <label>priority <input id="priority-value" type="number" min="0" max="9000" value="${esc(d.core.priority)}" style="width:6em"></label>
      <button id="action-priority">Set priority</button>
      <label>signal <input id="signal-name" placeholder="name" style="width:8em"></label>
      <button id="action-signal">Send signal</button>
    </div>
    <div id="action-result"></div>
    <h2>Core</h2>${kv(d.core)}
    <h2>Payload (${d.payload_bytes} bytes)</h2><pre id="payload">${esc(d.payload_preview)}</pre>
    ${d.result_bytes ? `<h2>Result (${d.result_bytes} bytes)</h2><pre id="result">${esc(d.result_preview)}</pre>` : ""}
    <h2>Attempts</h2>${table("attempts", ["#", "state", "started", "ended", "error", "stream"], attempts)}
    <h2>Current lease</h2>${kv(d.lease)}
    <h2>Lease history</h2>${table("lease-history", ["at", "event", "worker", "reason", "epoch"], history)}
    ${d.suspension && Object.keys(d.suspension).length ? `<h2>Suspension</h2>${kv(d.suspension)}` : ""}
    <h2>Waitpoints</h2>${wps || "<p>none</p>"}
    ${Object.keys(d.tags || {}).length ? `<h2>Tags</h2>${kv(d.tags)}` : ""}
    ${flow}`;
  const act = (action, body) => async () => {
    const out = document.getElementById("action-result");
    try {
      const r = await api(`/api/executions/${encodeURIComponent(d.id)}/${action}`, { method: "POST", body: body ? body() : {} });
      out.className = "ok";
      out.textContent = `${action}: ${JSON.stringify(r.detail)}`;
      const fresh = await api("/api/executions/" + encodeURIComponent(d.id));
      document.getElementById("detail-state").innerHTML = stateBadge(fresh.core.public_state);
    } catch (err) {
      out.className = "error";
      out.textContent = `${action} refused (HTTP ${err.status || "?"}): ${err.message}`;
    }
  };
  document.getElementById("action-cancel").onclick = act("cancel", () => ({ reason: "console" }));
  document.getElementById("action-replay").onclick = act("replay");
  document.getElementById("action-priority").onclick = act("priority", () => ({ priority: Number(document.getElementById("priority-value").value) }));
  document.getElementById("action-signal").onclick = act("signal", () => ({ name: document.getElementById("signal-name").value }));
}

// ---- flow DAG --------------------------------------------------------------

function layers(f) {
  const parents = {};
  for (const e of f.edges) (parents[e.downstream] ||= []).push(e.upstream);
  const depth = {};
  const walk = (id, seen) => {
    if (id in depth) return depth[id];
    if (seen.has(id)) return 0;
    seen.add(id);
    let d = 0;
    for (const p of parents[id] || []) d = Math.max(d, walk(p, seen) + 1);
    return (depth[id] = d);
  };
  for (const n of f.nodes) walk(n.id, new Set());
  const out = [];
  for (const n of [...f.nodes].sort((a, b) => (a.id < b.id ? -1 : 1))) (out[depth[n.id]] ||= []).push(n);
  return out;
}

async function flow(id) {
  const f = await api("/api/flows/" + encodeURIComponent(id));
  const L = layers(f);
  const W = 170, H = 46, GX = 70, GY = 24, pos = {};
  L.forEach((layer, x) => layer.forEach((n, y) => { pos[n.id] = { x: 20 + x * (W + GX), y: 20 + y * (H + GY) }; }));
  const width = 40 + Math.max(1, L.length) * (W + GX);
  const height = 40 + Math.max(1, ...L.map((l) => l.length)) * (H + GY);
  const edges = f.edges.filter((e) => pos[e.upstream] && pos[e.downstream]).map((e) => {
    const a = pos[e.upstream], b = pos[e.downstream];
    return `<line class="edge" data-from="${esc(e.upstream)}" data-to="${esc(e.downstream)}" data-resolution="${esc(e.resolution)}" x1="${a.x + W}" y1="${a.y + H / 2}" x2="${b.x}" y2="${b.y + H / 2}" marker-end="url(#arrow)"/>`;
  }).join("");
  const nodes = f.nodes.map((n) => {
    const p = pos[n.id];
    return `<g class="node" data-id="${esc(n.id)}" data-state="${esc(n.state)}" transform="translate(${p.x},${p.y})">` +
      `<title>${esc(n.id)} · ${esc(n.state)}</title>` +
      `<rect width="${W}" height="${H}" rx="6" fill="${STATE_COLORS[n.state] || "#555"}"/>` +
      `<text x="8" y="18">${esc(n.kind || "execution")}</text><text x="8" y="35">${esc(n.state)} · ${esc(n.id.slice(-8))}</text></g>`;
  }).join("");
  const legend = Object.entries(f.states).map(([s, n]) => `<span>${stateBadge(s)} ${n}</span>`).join("");
  view.innerHTML = `<h1>Flow <span class="mono" id="flow-id">${esc(f.id)}</span></h1>
    <p>kind ${esc(f.core.flow_kind)} · ${f.nodes.length} members · ${f.edges.length} edges · state ${esc(f.core.public_flow_state)}${f.summary_state && f.summary_state !== f.core.public_flow_state ? ` (members: ${esc(f.summary_state)})` : ""}</p>
    <p class="legend">${legend}</p>
    <svg id="dag" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">
      <defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
        <path d="M 0 0 L 10 5 L 0 10 z" fill="#7b8494"/></marker></defs>
      ${edges}${nodes}
    </svg>
    <p><a href="#/executions?flow=${encodeURIComponent(f.id)}">List members</a></p>`;
  for (const g of view.querySelectorAll("g.node")) {
    g.addEventListener("click", () => { location.hash = "#/execution/" + encodeURIComponent(g.dataset.id); });
  }
}

// ---- plugin detail ---------------------------------------------------------

async function plugin(name) {
  const d = await api("/api/plugins/" + encodeURIComponent(name));
  const p = d.plugin;
  const cycles = d.cycles.map((c) => `<tr><td class="num">${c.cycle}</td><td class="num">${c.partition}</td><td>${esc(c.start)}</td>` +
    `<td class="num">${Math.max(0, new Date(c.end) - new Date(c.start))}</td><td class="mono">${esc(JSON.stringify(c.result))}</td>` +
    `<td>${esc(c.error || "")}</td><td>${esc(c.host || "")}</td></tr>`);
  const json = (v) => `<pre>${esc(JSON.stringify(v ?? null, null, 2))}</pre>`;
  view.innerHTML = `<h1>Plugin <span id="plugin-name">${esc(p.name)}</span> <span class="state" id="plugin-state" data-state="${esc(p.state)}" style="background:#555">${esc(p.state)}</span></h1>
    ${kv({ version: p.version, kind: p.kind, abi: p.abi, sha256: p.sha256, path: p.path, signer: p.signer, reason: p.reason,
      interval_ms: p.interval_ms, partitions: p.partitions, cycles: p.cycles, calls: p.calls, faults: p.faults, fault: p.fault,
      swaps: p.swaps, last_swap: p.last_swap, last_run: p.last_run, quarantine_until: p.quarantine_until, denied: p.denied,
      last_denial: p.last_denial, commands: p.commands, over_budget: p.over_budget })}
    <h2>Totals</h2>${json(p.totals)}
    <h2>Requested (manifest)</h2>${json(p.requested)}
    <h2>Granted</h2>${json(p.granted)}
    <h2>Limits</h2>${json(p.limits)}
    ${p.fault_kinds ? `<h2>Faults by kind</h2>${json(p.fault_kinds)}` : ""}
    <h2>Recent cycles (newest first)</h2>
    ${table("cycles", ["cycle", "partition", "start", "ms", "result", "error", "host"], cycles)}
    <p>Shadow diff: not available (fabric has no shadow runs yet). Plugins are enabled and disabled in fabric.toml, not here.</p>`;
}

// ---- workers ---------------------------------------------------------------

async function workers(params) {
  const ns = params.get("namespace") || "default";
  const r = await api("/api/workers?namespace=" + encodeURIComponent(ns));
  const rows = r.workers.map((w) => `<tr data-worker="${esc(w.instance_id)}"><td class="mono">${esc(w.instance_id)}</td><td>${esc(w.worker_id)}</td>` +
    `<td>${w.alive ? "alive" : "lapsed"}</td><td>${esc(w.lanes.join(", "))}</td><td>${esc(w.capabilities.join(", "))}</td>` +
    `<td>${ms(w.last_heartbeat_ms)}</td><td class="num">${w.leases}</td></tr>`);
  view.innerHTML = `<h1>Workers <small>namespace ${esc(ns)}</small></h1>
    ${table("workers", ["instance", "worker", "alive", "lanes", "capabilities", "last heartbeat", "leases"], rows)}`;
}

// ---- router ----------------------------------------------------------------

async function route() {
  clearTimeout(overviewTimer);
  const h = location.hash.replace(/^#/, "") || "/";
  const [path, query] = h.split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean);
  document.body.dataset.view = parts[0] || "overview";
  try {
    if (parts.length === 0) await overview();
    else if (parts[0] === "lanes") await lanes();
    else if (parts[0] === "executions") await executions(params);
    else if (parts[0] === "execution") await execution(decodeURIComponent(parts.slice(1).join("/")));
    else if (parts[0] === "flow") await flow(decodeURIComponent(parts[1] || ""));
    else if (parts[0] === "workers") await workers(params);
    else if (parts[0] === "plugin") await plugin(decodeURIComponent(parts[1] || ""));
    else view.innerHTML = `<div class="error-box" id="error">no page ${esc(h)}</div>`;
    document.body.dataset.loaded = h;
  } catch (err) {
    fail(err);
    document.body.dataset.loaded = h;
  }
}
window.addEventListener("hashchange", route);
route();
