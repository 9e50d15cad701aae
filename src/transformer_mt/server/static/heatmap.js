// The attention panel both views share: one layer and head as a heatmap on a canvas (hover
// a cell for its weight; click it, or move with the arrow keys and press Enter, to open
// equation 1: explain.js), and every layer x head as thumbnails. The view on show (app.js
// for a translation, generate.js for a language model) gives the panel its attention by
// setting `heatmap.source` to a function that returns the current view:
//   { kind, title, help, layer, head, layers, heads, rows, cols,
//     weights [query][key], all(layer, head) -> weights, causal (grey above the diagonal),
//     explainRequest(query) -> { path, body } of the explain call }
"use strict";

const heatmap = { source: null, box: null, cursor: null };

function currentView() {
  return heatmap.source ? heatmap.source() : null;
}

// Something the heatmap depends on changed: redraw it, the overview, and close the equation.
function viewChanged() {
  heatmap.cursor = null;
  hideExplain();
  const view = currentView();
  if (view) {
    $("attention-title").textContent = view.title;
    $("attention-help").textContent = view.help;
  }
  drawHeatmap();
  if (!$("all-heads").hidden) drawAllHeads();
}

function layout(ctx, rows, cols) {
  ctx.font = "13px system-ui, sans-serif";
  const widest = (tokens) => Math.max(20, ...tokens.map((t) => ctx.measureText(t).width));
  const cell = Math.max(22, Math.min(46, Math.floor(640 / Math.max(cols.length, 1))));
  return {
    cell,
    left: Math.ceil(widest(rows)) + 14,
    top: Math.ceil(widest(cols) * 0.75) + 18,
  };
}

// Paint weights [rows][cols] at (x, y) with square cells of `cell` pixels; with `causal`,
// the masked cells (a later position, above the diagonal) in grey.
function paintCells(ctx, weights, x, y, cell, causal, gap) {
  weights.forEach((row, r) => {
    row.forEach((w, c) => {
      ctx.fillStyle = causal && c > r ? "#e3e7ec" : colour(w);
      ctx.fillRect(x + c * cell, y + r * cell, cell - gap, cell - gap);
    });
  });
}

// Size the canvas for width x height CSS pixels and return its context, scaled for the screen.
function sizeCanvas(canvas, width, height) {
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  return ctx;
}

function drawLabels(ctx, box, rows, cols) {
  ctx.font = "13px system-ui, sans-serif";
  ctx.fillStyle = "#1d232b";
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  rows.forEach((token, r) => ctx.fillText(token, box.left - 6, box.top + (r + 0.5) * box.cell));
  ctx.textAlign = "left";
  cols.forEach((token, c) => {
    ctx.save();
    ctx.translate(box.left + (c + 0.5) * box.cell, box.top - 6);
    ctx.rotate(-Math.PI / 4);
    ctx.fillText(token, 0, 0);
    ctx.restore();
  });
}

function drawHeatmap() {
  const canvas = $("heatmap");
  const view = currentView();
  if (!view) {
    canvas.getContext("2d").clearRect(0, 0, canvas.width, canvas.height);
    return;
  }
  const { rows, cols } = view;
  const box = layout(canvas.getContext("2d"), rows, cols);
  const ctx = sizeCanvas(canvas, box.left + cols.length * box.cell + 10, box.top + rows.length * box.cell + 10);
  canvas.dataset.rows = String(rows.length);
  canvas.dataset.cols = String(cols.length);
  canvas.dataset.view = `${view.layer + 1},${view.head + 1}`;
  canvas.dataset.kind = view.kind;
  canvas.dataset.box = `${box.left},${box.top},${box.cell}`; // where the cells are, for tests
  heatmap.box = box;
  drawLabels(ctx, box, rows, cols);
  paintCells(ctx, view.weights, box.left, box.top, box.cell, view.causal, 1);
  if (heatmap.cursor) {
    const { r, c } = heatmap.cursor;
    ctx.lineWidth = 3;
    ctx.strokeStyle = "#e8453c";
    ctx.strokeRect(box.left + c * box.cell + 1, box.top + r * box.cell + 1, box.cell - 3, box.cell - 3);
  }
}

// The cell under a mouse event, or null.
function cellAt(event, view) {
  const rect = $("heatmap").getBoundingClientRect();
  const x = event.clientX - rect.left - heatmap.box.left;
  const y = event.clientY - rect.top - heatmap.box.top;
  const c = Math.floor(x / heatmap.box.cell);
  const r = Math.floor(y / heatmap.box.cell);
  if (x < 0 || y < 0 || r >= view.rows.length || c >= view.cols.length) return null;
  return { r, c, x: event.clientX - rect.left, y: event.clientY - rect.top };
}

function showTooltip(event) {
  const view = currentView();
  const tip = $("tooltip");
  const cell = view && heatmap.box ? cellAt(event, view) : null;
  if (!cell) {
    tip.hidden = true;
    return;
  }
  const masked = view.causal && cell.c > cell.r;
  const weight = masked ? "masked (a later position)" : view.weights[cell.r][cell.c].toFixed(3);
  tip.textContent = `${view.rows[cell.r]} → ${view.cols[cell.c]}: ${weight}`;
  tip.style.left = `${cell.x + 12}px`;
  tip.style.top = `${cell.y + 12}px`;
  tip.hidden = false;
}

function selectCell(r, c) {
  const view = currentView();
  if (!view) return;
  heatmap.cursor = { r, c };
  drawHeatmap();
  explainCell(view, r, c);
}

function clickHeatmap(event) {
  const view = currentView();
  const cell = view && heatmap.box ? cellAt(event, view) : null;
  if (cell) selectCell(cell.r, cell.c);
}

// Arrow keys move the chosen cell, Enter or Space explains it.
function heatmapKey(event) {
  const view = currentView();
  if (!view) return;
  const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
  const cursor = heatmap.cursor || { r: 0, c: 0 };
  if (moves[event.key]) {
    const [dr, dc] = moves[event.key];
    const r = Math.min(view.rows.length - 1, Math.max(0, cursor.r + dr));
    const c = Math.min(view.cols.length - 1, Math.max(0, cursor.c + dc));
    heatmap.cursor = { r, c };
    drawHeatmap();
  } else if (event.key === "Enter" || event.key === " ") {
    selectCell(cursor.r, cursor.c);
  } else {
    return;
  }
  event.preventDefault();
}

// One thumbnail of the overview: a button that shows that head in the big map.
function thumbnail(view, layer, head, cell) {
  const canvas = el("canvas", { width: String(view.cols.length * cell), height: String(view.rows.length * cell) });
  paintCells(canvas.getContext("2d"), view.all(layer, head), 0, 0, cell, view.causal, 0);
  const label = `layer ${layer + 1}, head ${head + 1}`;
  const current = layer === view.layer && head === view.head;
  const thumb = el("button", {
    type: "button", class: current ? "thumb selected" : "thumb", "aria-label": `show ${label}`,
    "aria-pressed": String(current), "data-layer": String(layer), "data-head": String(head),
  }, canvas, el("span", { text: `L${layer + 1} · H${head + 1}` }));
  thumb.addEventListener("click", () => {
    $("layer").value = String(layer);
    $("head").value = String(head);
    viewChanged();
    $("heatmap").scrollIntoView({ block: "nearest" });
  });
  return thumb;
}

// Every layer x head of the view as small thumbnails; a click shows that head big.
function drawAllHeads() {
  const view = currentView();
  const grid = $("all-heads");
  grid.replaceChildren();
  if (!view) return;
  grid.style.gridTemplateColumns = `repeat(${view.heads}, max-content)`;
  const cell = Math.max(2, Math.floor(96 / Math.max(view.rows.length, view.cols.length)));
  for (let layer = 0; layer < view.layers; layer++) {
    for (let head = 0; head < view.heads; head++) grid.append(thumbnail(view, layer, head, cell));
  }
}

function toggleAllHeads() {
  const grid = $("all-heads");
  grid.hidden = !grid.hidden;
  $("all-heads-toggle").setAttribute("aria-expanded", String(!grid.hidden));
  $("all-heads-toggle").textContent = grid.hidden ? "All heads" : "Hide all heads";
  if (!grid.hidden) drawAllHeads();
}

for (const id of ["layer", "head"]) $(id).addEventListener("change", viewChanged);
$("all-heads-toggle").addEventListener("click", toggleAllHeads);
$("heatmap").addEventListener("mousemove", showTooltip);
$("heatmap").addEventListener("mouseleave", () => { $("tooltip").hidden = true; });
$("heatmap").addEventListener("click", clickHeatmap);
$("heatmap").addEventListener("keydown", heatmapKey);
