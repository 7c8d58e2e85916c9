// specroute dashboard: polls data.json and redraws the plots (plotly.js served by the router).
"use strict";

const POLL_MS = 3000;
const LAYOUT = { margin: { l: 55, r: 15, t: 35, b: 40 }, legend: { orientation: "h", y: -0.2 },
                 font: { size: 11 } };
const CONFIG = { displaylogo: false, responsive: true };

function fmt(value, digits) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
}

function pct(value) {
  return value === null || value === undefined ? "–" : (100 * value).toFixed(0) + "%";
}

function table(containerId, headers, rows) {
  const tableEl = document.createElement("table");
  const head = tableEl.insertRow();
  for (const h of headers) {
    const th = document.createElement("th");
    th.textContent = h;
    head.appendChild(th);
  }
  for (const row of rows) {
    const tr = tableEl.insertRow();
    for (const cell of row) {
      const td = tr.insertCell();
      if (cell && typeof cell === "object") {
        td.textContent = cell.text;
        td.className = cell.cls;
      } else {
        td.textContent = cell;
      }
    }
  }
  const container = document.getElementById(containerId);
  container.replaceChildren(tableEl);
}

function series(data, field, name) {
  // one line per class over the time buckets
  const classes = data.classes.map((c) => c.key);
  return classes.map((cls) => ({
    type: "scatter", mode: "lines+markers", name: name ? `${cls} ${name}` : cls,
    x: data.timeline.map((b) => b.start),
    y: data.timeline.map((b) => (b.groups[cls] ? b.groups[cls][field] : null)),
  }));
}

function plot(id, traces, title, yaxis) {
  Plotly.react(id, traces, { ...LAYOUT, title: { text: title, font: { size: 13 } },
                             yaxis: yaxis || {} }, CONFIG);
}

function render(data) {
  plot("plot-acceptance", series(data, "acceptance"), "Acceptance (accepted / drafted)",
       { range: [0, 1.05] });
  const tps = series(data, "tps_mtp", "mtp").concat(
    series(data, "tps_plain", "plain").map((t) => ({ ...t, line: { dash: "dot" } })));
  plot("plot-tps", tps, "Decode tokens/s by profile (solid mtp, dotted plain)");
  plot("plot-share", series(data, "mtp_share"), "Share routed to mtp", { range: [0, 1.05] });

  // the paces the decisions use: median ms per token, 1-sd range, where it comes from
  const paceText = (m) => ["plain", "mtp"].filter((k) => m.pace && m.pace[k]).map((k) => {
    const p = m.pace[k];
    return `${k} ${fmt(p.ms_per_token, 2)} ms/token (${fmt(p.low, 2)}–${fmt(p.high, 2)},`
      + ` ${p.source}, n=${p.n}; prior ${fmt(p.prior_ms_per_token, 1)})`;
  }).join(" · ") + ((m.prior_notes || []).length ? " — the prior is discounted" : "");

  // the speedup model (a contextual bandit over the request's features): bars around 1.0,
  // the break-even, with the 1-sd range and the machine prior it started from
  const model = data.speedup_model;
  const keys = Object.keys(model.classes);
  const row = (k) => model.classes[k];
  plot("plot-model", [{
    type: "bar", x: keys, base: 1.0, name: "learned",
    y: keys.map((k) => (row(k).value === null ? null : row(k).value - 1.0)),
    error_y: { type: "data", symmetric: false, visible: true,
               array: keys.map((k) => (row(k).high ?? row(k).value ?? 1) - (row(k).value ?? 1)),
               arrayminus: keys.map((k) => (row(k).value ?? 1) - (row(k).low ?? row(k).value ?? 1)) },
  }, {
    type: "scatter", mode: "markers", name: "prior", x: keys,
    y: keys.map((k) => row(k).prior ?? null), marker: { symbol: "line-ew-open", size: 18 },
  }], `Predicted mtp speedup per class (model, ± 1 sd; prior ${model.prior ?? "–"},`
      + ` ${model.observations ?? "–"} mtp outcomes)<br>${paceText(model)}`, { zeroline: false });

  plot("plot-predicted-time", series(data, "predicted_speedup"),
       "Speedup the decisions predicted, by class (1.0 = break-even)");

  const classes = data.classes.map((c) => c.key).concat(["all"]);
  const rows = data.classes.concat([data.overall]);
  plot("plot-gain", [
    { type: "bar", name: "vs always-mtp", x: classes,
      y: rows.map((r) => (r.gain_vs_always_mtp === null ? null : 100 * r.gain_vs_always_mtp)) },
    { type: "bar", name: "vs never-mtp", x: classes,
      y: rows.map((r) => (r.gain_vs_never_mtp === null ? null : 100 * r.gain_vs_never_mtp)) },
  ], "Estimated gain of routing, % (from class averages)", { ticksuffix: "%" });

  table("classes",
    ["class", "requests", "errors", "→ mtp", "acceptance", "mtp tok/s", "plain tok/s",
     "speedup (like with like)", "predicted", "gate skip"],
    rows.map((r) => [r.key, r.requests, r.errors, pct(r.mtp_share), fmt(r.acceptance, 2),
                     fmt(r.tps_mtp, 1), fmt(r.tps_plain, 1),
                     r.matched_speedup === null ? "–" : fmt(r.matched_speedup, 3) + "×",
                     r.predicted_speedup === null ? "–" : fmt(r.predicted_speedup, 3) + "×",
                     pct(r.gate_skip)]));
  table("backends", ["backend", "speculation", "health", "in flight", "restarts"],
    data.backends.map((b) => [b.name, b.speculation ?? b.profile,
      { text: b.healthy ? "healthy" : "DOWN", cls: b.healthy ? "ok" : "bad" },
      b.inflight ?? "–", b.restarts ?? "–"]));
  table("arms", ["class", "arm (pool + rewrite)", "requests", "share", "decode tok/s",
                 "time to the answer ms", "tokens"],
    data.arms.map((a) => [a.cls, a.arm, a.requests, pct(a.share), fmt(a.decode_tps, 1),
                          fmt(a.total_ms, 0), fmt(a.completion_tokens, 0)]));
  table("recent",
    ["time", "class", "lang", "route", "reason", "backend", "status", "TTFT ms", "tokens",
     "tok/s", "acceptance", "p_spec"],
    data.recent.map((r) => [r.ts.slice(11, 19), r.class, r.lang,
      (r.pool === r.spec ? r.pool : `${r.pool} (${r.spec})`) +
        (r.rewrite ? ` + ${r.rewrite}` : "") + (r.explored ? "*" : ""), r.reason, r.backend, r.status, fmt(r.ttft_ms, 0),
      r.tokens ?? "–", fmt(r.tps, 1), fmt(r.acceptance, 2), fmt(r.p_spec, 2)]));
  document.getElementById("gain-note").textContent =
    "Gain: how much faster the routed traffic decoded than the same tokens would at one " +
    "profile's class-average tokens/s (an estimate, not a replay). * = exploration.";
  document.getElementById("status").textContent =
    `${data.records} recent requests · buckets of ${data.bucket_s} s · updated ` +
    new Date(data.generated_at).toLocaleTimeString();
}

async function refresh() {
  try {
    const response = await fetch("/dashboard/data.json", { cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    render(await response.json());
  } catch (err) {
    document.getElementById("status").textContent = `cannot load data: ${err}`;
  }
}

refresh();
setInterval(refresh, POLL_MS);
