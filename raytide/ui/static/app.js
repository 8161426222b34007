// The live view of a raytide job: polls /api/job (and the graph's SVG) about once a second and
// draws the panels. Plain JS, no build step, nothing fetched from outside this server.
"use strict";

const params = new URLSearchParams(location.search);
const token = params.get("token");
let current = params.get("job");
const COLOURS = ["#2980b9", "#c0392b", "#27ae60", "#8e44ad", "#d35400", "#16a085"];
const SVG_NS = "http://www.w3.org/2000/svg";

function apiUrl(path) {
  const url = new URL(path, location.href);
  if (current) url.searchParams.set("name", current);
  if (token) url.searchParams.set("token", token);
  return url;
}

async function api(path, asText) {
  const response = await fetch(apiUrl(path), {cache: "no-store"});
  if (!response.ok) throw new Error(path + ": " + response.status);
  return asText ? response.text() : response.json();
}

function rate(value) {
  if (value === null || value === undefined) return "–";
  if (Math.abs(value) >= 1e6) return (value / 1e6).toFixed(1) + "M";
  if (Math.abs(value) >= 1e3) return (value / 1e3).toFixed(1) + "k";
  return value.toFixed(0);
}

function text(value) { return value === null || value === undefined ? "–" : String(value); }

function el(tag, attrs, children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children || []) node.append(child);
  return node;
}

function bar(share, kind) {
  const width = Math.round(100 * Math.min(1, share || 0));
  return el("span", {class: "bar", title: kind + " " + width + "%"}, [el("span", {class: kind, style: "width:" + width + "%"})]);
}

function drawHeader(doc, jobs) {
  document.getElementById("job").textContent = doc.job;
  const state = document.getElementById("state");
  state.textContent = doc.state;
  state.className = "state " + doc.state;
  const total = doc.epochs_total ? " of " + doc.epochs_total : "";
  document.getElementById("epochs").textContent = "epochs completed: " + doc.epochs_completed + total;
  const lat = doc.epoch_latency_s;
  document.getElementById("latency").textContent = lat.count ?
    "epoch latency p50 " + (lat.p50 * 1000).toFixed(0) + " ms, p99 " + (lat.p99 * 1000).toFixed(0) + " ms" : "";
  document.getElementById("updated").textContent = "updated " + new Date(doc.at * 1000).toLocaleTimeString();
  const select = document.getElementById("jobs");
  const names = jobs.jobs.map((j) => j.name);
  if (select.dataset.names !== names.join("\n")) {
    select.replaceChildren(...names.map((n) => el("option", {value: n}, [n])));
    select.dataset.names = names.join("\n");
  }
  select.value = doc.job;
  document.getElementById("save").href = apiUrl("api/graph.svg").toString();
}

function drawVertices(doc) {
  const rows = Object.entries(doc.vertices).map(([name, v]) => {
    const replicas = el("td", {}, v.replicas.map((r) => el("span", {title: r.name}, [bar(r.busy, "busy"), bar(r.blocked, "blocked")])));
    return el("tr", {class: v.bottleneck ? "bottleneck" : "", "data-vertex": name}, [
      el("td", {}, [name]), el("td", {}, [text(v.parallelism)]),
      el("td", {class: "in"}, [rate(v.in_per_s)]), el("td", {class: "out"}, [rate(v.out_per_s)]),
      el("td", {}, [text(v.queued)]), el("td", {}, [text(v.frontier)]), el("td", {}, [text(v.frontier_lag)]), replicas]);
  });
  document.querySelector("#vertices tbody").replaceChildren(...rows);
}

function drawFrontier(doc) {
  const width = 460, height = 170, pad = 30;
  const history = doc.frontier_history;
  const outputs = Object.keys(doc.outputs);
  const values = history.flatMap((h) => outputs.map((o) => h.outputs[o])).filter((v) => v !== null && v !== undefined);
  const svg = el("svg:svg", {width, height, class: "frontier-plot"});
  svg.append(el("svg:rect", {width, height, fill: "white"}));
  if (history.length < 2 || values.length === 0) {
    svg.append(el("svg:text", {x: pad, y: height / 2, "font-size": 12}, ["waiting for samples…"]));
  } else {
    const t0 = history[0].at, t1 = history[history.length - 1].at;
    const lo = Math.min(...values), hi = Math.max(...values, lo + 1);
    const x = (t) => pad + (width - 2 * pad) * (t - t0) / Math.max(1e-9, t1 - t0);
    const y = (v) => height - pad - (height - 2 * pad) * (v - lo) / (hi - lo);
    svg.append(el("svg:line", {x1: pad, y1: height - pad, x2: width - pad, y2: height - pad, stroke: "#999"}));
    svg.append(el("svg:text", {x: 2, y: y(hi) + 4, "font-size": 10}, [String(hi)]));
    svg.append(el("svg:text", {x: 2, y: y(lo) + 4, "font-size": 10}, [String(lo)]));
    svg.append(el("svg:text", {x: width - pad, y: height - 8, "font-size": 10, "text-anchor": "end"}, [((t1 - t0)).toFixed(0) + " s"]));
    outputs.forEach((o, i) => {
      const points = history.filter((h) => h.outputs[o] !== null && h.outputs[o] !== undefined)
        .map((h) => x(h.at).toFixed(1) + "," + y(h.outputs[o]).toFixed(1)).join(" ");
      svg.append(el("svg:polyline", {points, fill: "none", stroke: COLOURS[i % COLOURS.length], "stroke-width": 2, "data-output": o}));
      svg.append(el("svg:text", {x: pad + 4 + 90 * i, y: 14, "font-size": 11, fill: COLOURS[i % COLOURS.length]}, [o]));
    });
  }
  document.getElementById("frontier").replaceChildren(svg);
}

function drawTimeline(doc) {
  const events = doc.timeline;
  const list = events.slice().reverse().map((e) => {
    const pause = e.pause_s !== undefined && e.pause_s !== null ? " · pause " + (e.pause_s * 1000).toFixed(0) + " ms" : "";
    const took = e.duration_s ? " · " + (e.duration_s * 1000).toFixed(0) + " ms" : "";
    const size = e.size_bytes ? " · " + e.size_bytes + " B" : "";
    const reason = e.reason ? " — " + e.reason : "";
    return el("li", {class: e.kind, "data-kind": e.kind},
      [new Date(e.at * 1000).toLocaleTimeString() + " " + e.label + took + size + pause + reason]);
  });
  document.getElementById("timeline").replaceChildren(...list);
  const width = 460, height = 46;
  const svg = el("svg:svg", {width, height});
  svg.append(el("svg:line", {x1: 4, y1: 30, x2: width - 4, y2: 30, stroke: "#999"}));
  if (events.length) {
    const t1 = doc.at, t0 = Math.min(events[0].at, t1 - 60);
    const colour = {snapshot: "#2c3e50", rescale: "#d35400", recovery: "#c0392b", autoscaler: "#16a085"};
    for (const e of events) {
      const x = 4 + (width - 8) * (e.at - t0) / Math.max(1e-9, t1 - t0);
      const w = Math.max(2, (width - 8) * (e.pause_s || 0) / Math.max(1e-9, t1 - t0));
      svg.append(el("svg:rect", {x: x - w, y: e.kind === "snapshot" ? 24 : 8, width: w, height: e.kind === "snapshot" ? 12 : 28,
        fill: colour[e.kind] || "#555"}, [el("svg:title", {}, [e.label])]));
    }
  }
  document.getElementById("timeline-strip").replaceChildren(svg);
}

function given(value) { return value !== undefined && value !== null; }

function drawErrors(doc) {
  const box = document.getElementById("errors");
  if (!doc.errors.length) { box.replaceChildren(el("p", {class: "none"}, ["none"])); return; }
  box.replaceChildren(...doc.errors.map((e) => {
    const attrs = {class: "error", "data-kind": e.kind};
    if (given(e.vertex)) attrs["data-vertex"] = e.vertex;
    if (given(e.replica)) attrs["data-replica"] = e.replica;
    if (given(e.epoch)) attrs["data-epoch"] = e.epoch;
    const where = [e.kind, given(e.vertex) && "vertex " + e.vertex, given(e.replica) && "replica " + e.replica,
      given(e.epoch) && "epoch " + e.epoch, e.iteration && e.iteration.length && "iteration " + e.iteration.join(","),
      e.where].filter(Boolean).join(" · ");
    return el("div", attrs, [el("p", {class: "where"}, [where]), el("p", {class: "message"}, [e.message]),
      el("pre", {class: "traceback"}, [e.traceback || "(no traceback: not an error in user code)"])]);
  }));
}

// The graph as PNG, made here: the SVG shown drawn on a canvas (twice its size), downloaded.
function savePng() {
  const svg = document.querySelector("#graph svg");
  if (!svg) return;
  const width = Number(svg.getAttribute("width")), height = Number(svg.getAttribute("height")), scale = 2;
  const url = URL.createObjectURL(new Blob([new XMLSerializer().serializeToString(svg)], {type: "image/svg+xml"}));
  const image = new Image();
  image.onload = () => {
    const canvas = el("canvas", {width: width * scale, height: height * scale});
    const context = canvas.getContext("2d");
    context.fillStyle = "white";
    context.fillRect(0, 0, canvas.width, canvas.height);
    context.drawImage(image, 0, 0, canvas.width, canvas.height);
    URL.revokeObjectURL(url);
    canvas.toBlob((png) => {
      const link = el("a", {href: URL.createObjectURL(png), download: (current || "dataflow") + ".png"});
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 10000);
    }, "image/png");
  };
  image.src = url;
}

let updates = 0;

async function tick() {
  const started = Date.now();
  try {
    const jobs = await api("api/jobs");
    if (!current && jobs.jobs.length) current = jobs.jobs[0].name;
    if (current) {
      const [doc, svg] = await Promise.all([api("api/job"), api("api/graph.svg", true)]);
      document.getElementById("graph").innerHTML = svg;
      drawHeader(doc, jobs);
      drawVertices(doc);
      drawFrontier(doc);
      drawTimeline(doc);
      drawErrors(doc);
    } else {
      document.getElementById("state").textContent = "no job to show yet";
    }
  } catch (error) {
    const state = document.getElementById("state");
    state.textContent = "unreachable: " + error.message;
    state.className = "state unreachable";
  } finally {
    updates += 1;
    document.body.dataset.updates = String(updates);
    setTimeout(tick, Math.max(100, 800 - (Date.now() - started)));
  }
}

document.getElementById("jobs").addEventListener("change", (event) => { current = event.target.value; });
document.getElementById("save-png").addEventListener("click", savePng);
tick();
