// The live page's refresh: fetch /ui/live/state.json every two seconds and redraw the tables.
"use strict";

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text === null || text === undefined ? "–" : String(text);
  if (cls) td.className = cls;
  return td;
}

// Three significant figures at most, never e-notation (perfcast.units._digits).
function digits(v) {
  if (v >= 100) return Math.round(v).toLocaleString("en-US");
  if (v >= 10) return v.toFixed(1).replace(/\.0$/, "");
  if (v >= 1) return v.toFixed(2).replace(/0+$/, "").replace(/\.$/, "");
  return v >= 1e-4 ? String(Number(v.toPrecision(2))) : "0";
}

// A duration in seconds as a person reads it, as perfcast.units.duration writes it: `61.2 ms`,
// `0.86 s`, `45 s`, `12 min`, `3.1 h`, `9.2 d`; `–` if unknown.
function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
  const sign = seconds < 0 ? "-" : "";
  const s = Math.abs(seconds);
  if (s > 0 && s < 0.001) return sign + digits(s * 1e6) + " µs";
  if (s > 0 && s < 0.1) return sign + digits(s * 1e3) + " ms";
  for (const [size, unit] of [[86400, "d"], [3600, "h"], [60, "min"]]) {
    if (s >= 2 * size) return sign + digits(s / size) + " " + unit;
  }
  return sign + digits(s) + " s";
}

function fill(id, items, draw) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  for (const item of items) draw(body.insertRow(), item);
}

function draw(state) {
  const absent = document.getElementById("absent");
  const present = document.getElementById("present");
  absent.hidden = state.present;
  present.hidden = !state.present;
  if (!state.present) {
    absent.textContent = state.reason;
    return;
  }
  document.getElementById("counts").textContent =
    Object.entries(state.counts).map(([s, n]) => n + " " + s).join(", ") || "no jobs yet";
  fill("gpus", state.gpus, (row, g) => {
    row.dataset.gpu = g.node + ":" + g.gpu;
    const idle = g.occupants.length === 0;
    if (idle) row.className = "idle";
    cell(row, g.node);
    cell(row, g.gpu);
    cell(row, g.type, "type");
    cell(row, idle ? "idle" : g.occupants.map((o) => o.job_id).join(", "), "occupants");
    cell(row, idle ? "–" : [...new Set(g.occupants.map((o) => o.share))].join(", "), "sharing");
  });
  fill("jobs", state.jobs, (row, j) => {
    row.dataset.job = j.job_id;
    row.className = "status-" + j.status;
    cell(row, j.job_id);
    cell(row, j.model);
    cell(row, j.status, "status");
    cell(row, j.gpus.map((g) => g[0] + ":" + g[1]).join(" ") || "–");
    cell(row, j.iteration + " / " + j.iterations, "iteration");
    cell(row, j.progress === null ? "–" : (100 * j.progress).toFixed(0) + "%", "progress");
    cell(row, duration(j.measured_step_s), "measured");
    cell(row, duration(j.predicted_step_s), "predicted");
    const c = j.champion;
    cell(row, c ? duration(c.step_s) + " [" + duration(c.p10_s) + " – " + duration(c.p90_s) + "]"
      : "–", "champion");
    cell(row, j.attempt);
    cell(row, j.error);
  });
  fill("events", state.events, (row, e) => {
    if (e.decision) row.className = "decision";
    cell(row, new Date(e.at * 1000).toLocaleTimeString());
    cell(row, e.job_id);
    cell(row, e.kind, "kind");
    cell(row, e.detail);
  });
}

let asked = 0;
let drawn = 0;

async function refresh() {
  const ask = ++asked;
  try {
    const response = await fetch("/ui/live/state.json", { cache: "no-store" });
    const state = await response.json();
    if (ask < drawn) return; // an older answer arriving late: the newer one is on the page
    drawn = ask;
    draw(state);
    window.liveState = state; // what the tables show now (tests compare the two)
    document.getElementById("updated").textContent =
      "Updated " + new Date().toLocaleTimeString() + ".";
  } catch (err) {
    document.getElementById("updated").textContent = "Refresh failed: " + err + ".";
  }
}

refresh();
setInterval(refresh, 2000);
