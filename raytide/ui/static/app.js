// The live view of a raytide job. About once a second (the next ask only after the answer, and none
// while the tab is hidden) it asks /api/view for what changed since the document it shows, and
// updates only the nodes whose values changed: the graph is drawn again only when its layout or a
// vertex's width changes, the table's rows only when the vertices do, and the frontier plot, the
// timeline and the errors keep their nodes. Plain JS, no build step, nothing fetched from elsewhere.
"use strict";

const params = new URLSearchParams(location.search);
const token = params.get("token");
let current = params.get("job");
const COLOURS = ["#2980b9", "#c0392b", "#27ae60", "#8e44ad", "#d35400", "#16a085"];
const KIND_COLOURS = {snapshot: "#2c3e50", rescale: "#d35400", recovery: "#c0392b", autoscaler: "#16a085"};
const SVG_NS = "http://www.w3.org/2000/svg";
const PERIOD_MS = 1000;
const HISTORY = 120, TIMELINE = 200;  // as the document keeps them (raytide/ui/document.py)
const PLOT = {width: 460, height: 170, pad: 30}, STRIP = {width: 460, height: 46};

// What the page shows now: the document's time and graph, and the nodes it updates.
let shown = fresh();
let updates = 0, timer = null, asking = false;

function fresh() {
  return {at: null, graphKey: null, boxes: {}, graphNodes: {}, rows: null, history: [], plot: null, events: [],
          strip: null, base: null, errors: null};
}

function byId(id) { return document.getElementById(id); }

function apiUrl(path, query) {
  const url = new URL(path, location.href);
  for (const [key, value] of Object.entries(query || {})) {
    if (value !== null && value !== undefined) url.searchParams.set(key, value);
  }
  if (token) url.searchParams.set("token", token);
  return url;
}

async function api(path, query) {
  const response = await fetch(apiUrl(path, query), {cache: "no-store"});
  if (!response.ok) throw new Error(path + ": " + response.status);
  return response.json();
}

function rate(value) {
  if (value === null || value === undefined) return "–";
  if (Math.abs(value) >= 1e6) return (value / 1e6).toFixed(1) + "M";
  if (Math.abs(value) >= 1e3) return (value / 1e3).toFixed(1) + "k";
  return value.toFixed(0);
}

function given(value) { return value !== undefined && value !== null; }
function text(value) { return given(value) ? String(value) : "–"; }

// Writes that touch the DOM only when the value differs (an equal write still invalidates layout).
function setText(node, value) { if (node.textContent !== value) node.textContent = value; }
function setAttr(node, key, value) { if (node.getAttribute(key) !== value) node.setAttribute(key, value); }

function el(tag, attrs, children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children || []) node.append(child);
  return node;
}

function drawHeader(doc) {
  setText(byId("job"), doc.job);
  const state = byId("state");
  setText(state, doc.state);
  setAttr(state, "class", "state " + doc.state);
  const total = doc.epochs_total ? " of " + doc.epochs_total : "";
  setText(byId("epochs"), "epochs completed: " + doc.epochs_completed + total);
  const lat = doc.epoch_latency_s;
  setText(byId("latency"), lat.count ?
    "epoch latency p50 " + (lat.p50 * 1000).toFixed(0) + " ms, p99 " + (lat.p99 * 1000).toFixed(0) + " ms" : "");
  setText(byId("updated"), "updated " + new Date(doc.at * 1000).toLocaleTimeString());
}

function drawJobs(jobs, job) {
  const select = byId("jobs");
  const names = jobs.map((j) => j.name);
  if (select.dataset.names !== names.join("\n")) {
    select.replaceChildren(...names.map((n) => el("option", {value: n}, [n])));
    select.dataset.names = names.join("\n");
  }
  if (job && select.value !== job) select.value = job;
  setAttr(byId("save"), "href", apiUrl("api/graph.svg", {name: job}).toString());
}

// The graph: drawn (by the server) when its key changes; else each box's texts and colours updated.
function drawGraph(doc) {
  if (given(doc.svg)) {
    byId("graph").innerHTML = doc.svg;
    shown.graphKey = doc.graph_key;
    shown.graphNodes = {};
    for (const g of byId("graph").querySelectorAll("g.vertex")) {
      shown.graphNodes[g.dataset.vertex] = {rect: g.querySelector("rect"), tip: g.querySelector("rect > title"),
        width: g.querySelector("text.width"), rates: g.querySelector("text.rates"), queued: g.querySelector("text.queued")};
    }
    shown.boxes = doc.boxes;  // drawn with these
    return;
  }
  for (const [name, box] of Object.entries(doc.boxes)) {
    const before = shown.boxes[name] || {}, nodes = shown.graphNodes[name];
    if (!nodes) continue;
    if (before.width !== box.width) setText(nodes.width, box.width);
    if (before.rates !== box.rates) setText(nodes.rates, box.rates);
    if (before.in !== box.in) nodes.rates.setAttribute("data-in", box.in);
    if (before.out !== box.out) nodes.rates.setAttribute("data-out", box.out);
    if (before.queued !== box.queued) setText(nodes.queued, box.queued);
    if (before.fill !== box.fill) nodes.rect.setAttribute("fill", box.fill);
    if (before.stroke !== box.stroke) nodes.rect.setAttribute("stroke", box.stroke);
    if (before.stroke_width !== box.stroke_width) nodes.rect.setAttribute("stroke-width", box.stroke_width);
    if (before.tip !== box.tip) setText(nodes.tip, box.tip);
  }
  shown.boxes = doc.boxes;
}

function bar(kind) {
  const inner = el("span", {class: kind, style: "width:0%"});
  return {outer: el("span", {class: "bar", title: kind + " 0%"}, [inner]), inner, kind};
}

function setBar(shownBar, share) {
  const width = Math.round(100 * Math.min(1, share || 0));
  setAttr(shownBar.inner, "style", "width:" + width + "%");
  setAttr(shownBar.outer, "title", shownBar.kind + " " + width + "%");
}

function tableRows(names) {
  const byName = {};
  const rows = names.map((name) => {
    const cells = [0, 1, 2, 3, 4, 5].map((i) => el("td", i === 1 ? {class: "in"} : i === 2 ? {class: "out"} : {}));
    const replicas = el("td");
    const tr = el("tr", {"data-vertex": name}, [el("td", {}, [name]), ...cells, replicas]);
    byName[name] = {tr, cells, replicas, replicaKey: null, bars: []};
    return tr;
  });
  byId("vertices").querySelector("tbody").replaceChildren(...rows);
  return {key: names.join("\n"), byName};
}

function drawReplicas(row, replicas) {
  const key = replicas.map((r) => r.name).join("\n");
  if (row.replicaKey !== key) {
    row.bars = replicas.map(() => [bar("busy"), bar("blocked")]);
    row.replicas.replaceChildren(...replicas.map((r, i) => el("span", {title: r.name}, row.bars[i].map((b) => b.outer))));
    row.replicaKey = key;
  }
  replicas.forEach((r, i) => { setBar(row.bars[i][0], r.busy); setBar(row.bars[i][1], r.blocked); });
}

function drawVertices(doc) {
  const names = Object.keys(doc.vertices);
  if (!shown.rows || shown.rows.key !== names.join("\n")) shown.rows = tableRows(names);
  for (const name of names) {
    const v = doc.vertices[name], row = shown.rows.byName[name];
    setAttr(row.tr, "class", v.bottleneck ? "bottleneck" : "");
    const values = [text(v.parallelism), rate(v.in_per_s), rate(v.out_per_s), text(v.queued), text(v.frontier), text(v.frontier_lag)];
    values.forEach((value, i) => setText(row.cells[i], value));
    drawReplicas(row, v.replicas);
  }
}

function makePlot(outputs) {
  const {width, height, pad} = PLOT;
  const label = (attrs) => el("svg:text", {"font-size": 10, ...attrs});
  const plot = {key: outputs.join("\n"), hi: label({x: 2}), lo: label({x: 2}),
    span: label({x: width - pad, y: height - 8, "text-anchor": "end"}),
    waiting: el("svg:text", {x: pad, y: height / 2, "font-size": 12}, ["waiting for samples…"]), lines: {}};
  plot.svg = el("svg:svg", {width, height, class: "frontier-plot"}, [el("svg:rect", {width, height, fill: "white"}),
    el("svg:line", {x1: pad, y1: height - pad, x2: width - pad, y2: height - pad, stroke: "#999"}),
    plot.hi, plot.lo, plot.span, plot.waiting]);
  outputs.forEach((o, i) => {
    const colour = COLOURS[i % COLOURS.length];
    plot.lines[o] = el("svg:polyline", {points: "", fill: "none", stroke: colour, "stroke-width": 2, "data-output": o});
    plot.svg.append(plot.lines[o], el("svg:text", {x: pad + 4 + 90 * i, y: 14, "font-size": 11, fill: colour}, [o]));
  });
  return plot;
}

function drawFrontier(doc) {
  shown.history.push(...doc.frontier_history);
  shown.history.splice(0, Math.max(0, shown.history.length - HISTORY));
  const outputs = Object.keys(doc.outputs), history = shown.history;
  if (!shown.plot || shown.plot.key !== outputs.join("\n")) {
    shown.plot = makePlot(outputs);
    byId("frontier").replaceChildren(shown.plot.svg);
  }
  const plot = shown.plot, {width, height, pad} = PLOT;
  const values = history.flatMap((h) => outputs.map((o) => h.outputs[o])).filter(given);
  const ready = history.length >= 2 && values.length > 0;
  for (const node of [plot.hi, plot.lo, plot.span]) setAttr(node, "display", ready ? "inline" : "none");
  setAttr(plot.waiting, "display", ready ? "none" : "inline");
  if (!ready) return;
  const t0 = history[0].at, t1 = history[history.length - 1].at;
  const lo = Math.min(...values), hi = Math.max(...values, lo + 1);
  const x = (t) => pad + (width - 2 * pad) * (t - t0) / Math.max(1e-9, t1 - t0);
  const y = (v) => height - pad - (height - 2 * pad) * (v - lo) / (hi - lo);
  setText(plot.hi, String(hi)); setAttr(plot.hi, "y", String(y(hi) + 4));
  setText(plot.lo, String(lo)); setAttr(plot.lo, "y", String(y(lo) + 4));
  setText(plot.span, (t1 - t0).toFixed(0) + " s");
  for (const o of outputs) {
    const points = history.filter((h) => given(h.outputs[o])).map((h) => x(h.at).toFixed(1) + "," + y(h.outputs[o]).toFixed(1));
    setAttr(plot.lines[o], "points", points.join(" "));
  }
}

function makeStrip() {
  const group = el("svg:g");
  const svg = el("svg:svg", {width: STRIP.width, height: STRIP.height},
    [el("svg:line", {x1: 4, y1: 30, x2: STRIP.width - 4, y2: 30, stroke: "#999"}), group]);
  byId("timeline-strip").replaceChildren(svg);
  return group;
}

// An entry of the timeline: its line in the list (newest first) and its bar on the strip, whose x is in
// seconds since the first entry: the strip's group is moved and scaled, its bars are not redrawn (a bar
// with no pause is as wide as its stroke, which does not scale).
function addEvent(e) {
  const pause = given(e.pause_s) ? " · pause " + (e.pause_s * 1000).toFixed(0) + " ms" : "";
  const took = e.duration_s ? " · " + (e.duration_s * 1000).toFixed(0) + " ms" : "";
  const size = e.size_bytes ? " · " + e.size_bytes + " B" : "";
  const reason = e.reason ? " — " + e.reason : "";
  e.li = el("li", {class: e.kind, "data-kind": e.kind},
    [new Date(e.at * 1000).toLocaleTimeString() + " " + e.label + took + size + pause + reason]);
  const later = shown.events.find((other) => other.at <= e.at);  // the list is newest first
  byId("timeline").insertBefore(e.li, later ? later.li : null);
  if (shown.base === null) shown.base = e.at;
  const snapshot = e.kind === "snapshot", colour = KIND_COLOURS[e.kind] || "#555";
  e.bar = el("svg:rect", {x: e.at - shown.base - (e.pause_s || 0), y: snapshot ? 24 : 8, width: Math.max(1e-3, e.pause_s || 0),
    height: snapshot ? 12 : 28, fill: colour, stroke: colour, "stroke-width": 2, "vector-effect": "non-scaling-stroke"},
    [el("svg:title", {}, [e.label])]);
  shown.strip.append(e.bar);
  shown.events.push(e);
  shown.events.sort((a, b) => b.at - a.at);
}

function drawTimeline(doc) {
  if (!shown.strip) shown.strip = makeStrip();
  doc.timeline.forEach(addEvent);
  for (const old of shown.events.splice(TIMELINE)) { old.li.remove(); old.bar.remove(); }
  if (!shown.events.length) return;
  const t1 = doc.at, t0 = Math.min(shown.events[shown.events.length - 1].at, t1 - 60);
  const scale = (STRIP.width - 8) / Math.max(1e-9, t1 - t0);
  setAttr(shown.strip, "transform", `translate(${(4 + scale * (shown.base - t0)).toFixed(2)},0) scale(${scale.toFixed(5)},1)`);
}

function drawErrors(doc) {
  const key = JSON.stringify(doc.errors);
  if (shown.errors === key) return;
  shown.errors = key;
  const box = byId("errors");
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

function draw(doc) {
  drawGraph(doc);
  drawHeader(doc);
  drawVertices(doc);
  drawFrontier(doc);
  drawTimeline(doc);
  drawErrors(doc);
  shown.at = doc.at;
}

// Forget what was shown (another job is chosen, or the server did not answer): the next answer is whole.
function forget() {
  shown = fresh();
  for (const id of ["graph", "frontier", "timeline", "timeline-strip"]) byId(id).replaceChildren();
  byId("vertices").querySelector("tbody").replaceChildren();
}

function choose(job) {
  current = job;
  forget();
  if (timer !== null) { clearTimeout(timer); timer = null; }
  if (!asking) tick();
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

async function tick() {
  timer = null;
  if (document.visibilityState === "hidden") return;  // asked again when shown
  asking = true;
  const started = Date.now(), asked = current;
  try {
    const doc = await api("api/view", {name: asked, since: shown.at, graph: shown.graphKey});
    if (asked !== current) return;  // another job was chosen meanwhile
    if (!given(doc.job)) {
      setText(byId("state"), "no job to show yet");
    } else {
      current = doc.job;
      if (!doc.unchanged) draw(doc);
    }
    drawJobs(doc.jobs, doc.job);
  } catch (error) {
    forget();
    const state = byId("state");
    setText(state, "unreachable: " + error.message);
    setAttr(state, "class", "state unreachable");
  } finally {
    asking = false;
    updates += 1;
    document.body.dataset.updates = String(updates);
    if (timer === null && document.visibilityState !== "hidden") timer = setTimeout(tick, Math.max(100, PERIOD_MS - (Date.now() - started)));
  }
}

// A hidden tab asks for nothing; shown again, it asks at once.
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible" && timer === null && !asking) tick();
});
byId("jobs").addEventListener("change", (event) => choose(event.target.value));
byId("save-png").addEventListener("click", savePng);
tick();
