// The live page's refresh: fetch /ui/live/state.json every two seconds and redraw the tables.
"use strict";

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text === null || text === undefined ? "–" : String(text);
  if (cls) td.className = cls;
  return td;
}

function num(v, digits) {
  return v === null || v === undefined ? "–" : Number(v).toPrecision(digits);
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
    cell(row, g.node);
    cell(row, g.gpu);
    cell(row, g.occupants.map((o) => o.job_id).join(", "), "occupants");
    cell(row, [...new Set(g.occupants.map((o) => o.share))].join(", "), "sharing");
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
    cell(row, num(j.measured_step_s, 4), "measured");
    cell(row, num(j.predicted_step_s, 4), "predicted");
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

async function refresh() {
  try {
    const response = await fetch("/ui/live/state.json", { cache: "no-store" });
    draw(await response.json());
    document.getElementById("updated").textContent =
      "Updated " + new Date().toLocaleTimeString() + ".";
  } catch (err) {
    document.getElementById("updated").textContent = "Refresh failed: " + err + ".";
  }
}

refresh();
setInterval(refresh, 2000);
