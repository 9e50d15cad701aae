// The page: send the text to /api/translate, list the translations, and draw the chosen
// attention (encoder self-attention, decoder masked self-attention or cross-attention) of
// the chosen sentence, layer and head on a canvas, with an overview of every head.
// Clicking a cell opens equation 1 up (explain.js); step.js is the step-by-step panel.
"use strict";

const state = { results: [], selected: 0, box: null, cursor: null };

// What each kind of attention is drawn over: rows are queries, columns are keys.
const KINDS = {
  cross: {
    title: "Cross-attention",
    rows: (a) => a.target_tokens,
    cols: (a) => a.source_tokens,
    help: "Each row is a target subword being produced (the decoder's query); its cells show how " +
      "much the chosen head looks at each source subword (the encoder's keys). Every row sums to 1.",
  },
  encoder: {
    title: "Encoder self-attention",
    rows: (a) => a.source_tokens,
    cols: (a) => a.source_tokens,
    help: "Each row is a source subword (query); its cells show how much the chosen head looks at " +
      "every source subword (keys), in both directions. Every row sums to 1.",
  },
  decoder: {
    title: "Decoder masked self-attention",
    rows: (a) => a.decoder_input_tokens,
    cols: (a) => a.decoder_input_tokens,
    help: "Each row is a decoder input (<s> and the subwords produced so far); it may look only at " +
      "itself and earlier positions: the mask hides the future (grey cells). Every row sums to 1.",
  },
};

async function loadInfo() {
  try {
    const response = await fetch("/api/health");
    const info = await response.json();
    $("model-info").textContent =
      `run ${info.run}: ${info.n_layers} layers, ${info.n_heads} heads, d_model ${info.d_model}, ` +
      `vocabulary ${info.vocab_size}, on ${info.device}; up to ${info.limits.max_sentences} sentences ` +
      `and ${info.limits.max_chars} characters per request`;
    $("beam").max = info.limits.max_beam;
    $("nbest").max = info.limits.max_beam;
    $("beam").value = Math.min(info.default_beam, info.limits.max_beam);
    showExample(info.example);
  } catch (err) {
    $("model-info").textContent = "the server does not answer /api/health";
  }
}

// A first visit opens on a sentence of the run's validation data, already translated,
// unless the box already holds text (typed, or kept by the browser on reload).
function showExample(example) {
  if (!example || $("source").value.trim()) return;
  $("source").value = example;
  translate();
}

async function translate() {
  const text = $("source").value;
  if (!text.trim()) {
    showError("Type a sentence first.");
    return;
  }
  const beam = parseInt($("beam").value, 10) || 1;
  const nbest = Math.min(parseInt($("nbest").value, 10) || 1, beam);
  showError("");
  $("translate").disabled = true;
  $("status").textContent = "translating…";
  try {
    const data = await postJSON("/api/translate", { text, beam, nbest, attention: true });
    state.results = data.results;
    state.selected = 0;
    $("status").textContent = `${data.results.length} sentence(s) in ${Math.round(data.elapsed_ms)} ms`;
    renderOutput();
    renderSelectors();
    viewChanged();
  } catch (err) {
    $("status").textContent = "";
    showError(err.message);
  } finally {
    $("translate").disabled = false;
  }
}

function renderOutput() {
  const list = $("output");
  list.replaceChildren();
  state.results.forEach((result, index) => {
    const item = el("li", { class: index === state.selected ? "selected" : "" },
      el("span", { class: "translation", text: result.translation || "(empty)" }),
      el("span", { class: "source muted", text: result.source }));
    if (result.nbest.length > 1) {
      const alternatives = el("ol", { class: "alternatives" });
      for (const hyp of result.nbest) {
        const score = hyp.score === null || hyp.score === undefined ? "" : ` (${hyp.score.toFixed(3)})`;
        alternatives.append(el("li", { text: hyp.text + score }));
      }
      item.append(alternatives);
    }
    item.addEventListener("click", () => selectSentence(index));
    list.append(item);
  });
}

function renderSelectors() {
  const withAttention = state.results.filter((r) => r.attention);
  $("attention-panel").hidden = withAttention.length === 0;
  if (withAttention.length === 0) return;
  const first = withAttention[0].attention;
  fillSelect($("sentence"), state.results.length, "sentence", false);
  $("sentence-label").hidden = state.results.length < 2;
  fillSelect($("layer"), first.layers, "layer", true);
  fillSelect($("head"), first.heads, "head", true);
  for (const option of $("kind").options) option.disabled = !first[option.value];
  if (!first[$("kind").value]) $("kind").value = "cross";
}

function selectSentence(index) {
  state.selected = index;
  $("sentence").value = String(index);
  renderOutput();
  viewChanged();
}

// The attention on show: its kind, layer, head, weights [query][key] and axis labels.
function currentView() {
  const result = state.results[state.selected];
  if (!result || !result.attention) return null;
  const attention = result.attention;
  const kind = $("kind").value;
  const layer = parseInt($("layer").value, 10);
  const head = parseInt($("head").value, 10);
  const spec = KINDS[kind];
  return {
    result, attention, kind, layer, head, spec,
    weights: attention[kind][layer][head],
    rows: spec.rows(attention),
    cols: spec.cols(attention),
  };
}

// Something the heatmap depends on changed: redraw it, the overview, and close the equation.
function viewChanged() {
  state.cursor = null;
  hideExplain();
  const view = currentView();
  if (view) {
    $("attention-title").textContent = view.spec.title;
    $("attention-help").textContent = view.spec.help;
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

// Paint weights [rows][cols] at (x, y) with square cells of `cell` pixels; masked
// (future) cells of the decoder's self-attention in grey.
function paintCells(ctx, weights, x, y, cell, kind, gap) {
  weights.forEach((row, r) => {
    row.forEach((w, c) => {
      ctx.fillStyle = kind === "decoder" && c > r ? "#e3e7ec" : colour(w);
      ctx.fillRect(x + c * cell, y + r * cell, cell - gap, cell - gap);
    });
  });
}

function drawHeatmap() {
  const canvas = $("heatmap");
  const ctx = canvas.getContext("2d");
  const view = currentView();
  if (!view) {
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    return;
  }
  const { rows, cols } = view;
  const box = layout(ctx, rows, cols);
  const width = box.left + cols.length * box.cell + 10;
  const height = box.top + rows.length * box.cell + 10;
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  canvas.dataset.rows = String(rows.length);
  canvas.dataset.cols = String(cols.length);
  canvas.dataset.view = `${view.layer + 1},${view.head + 1}`;
  canvas.dataset.kind = view.kind;
  canvas.dataset.box = `${box.left},${box.top},${box.cell}`; // where the cells are, for tests
  state.box = box;
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
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
  paintCells(ctx, view.weights, box.left, box.top, box.cell, view.kind, 1);
  if (state.cursor) {
    const { r, c } = state.cursor;
    ctx.lineWidth = 3;
    ctx.strokeStyle = "#e8453c";
    ctx.strokeRect(box.left + c * box.cell + 1, box.top + r * box.cell + 1, box.cell - 3, box.cell - 3);
  }
}

// The cell under a mouse event, or null.
function cellAt(event, view) {
  const rect = $("heatmap").getBoundingClientRect();
  const x = event.clientX - rect.left - state.box.left;
  const y = event.clientY - rect.top - state.box.top;
  const c = Math.floor(x / state.box.cell);
  const r = Math.floor(y / state.box.cell);
  if (x < 0 || y < 0 || r >= view.rows.length || c >= view.cols.length) return null;
  return { r, c, x: event.clientX - rect.left, y: event.clientY - rect.top };
}

function showTooltip(event) {
  const view = currentView();
  const tip = $("tooltip");
  const cell = view && state.box ? cellAt(event, view) : null;
  if (!cell) {
    tip.hidden = true;
    return;
  }
  const masked = view.kind === "decoder" && cell.c > cell.r;
  const weight = masked ? "masked (a later position)" : view.weights[cell.r][cell.c].toFixed(3);
  tip.textContent = `${view.rows[cell.r]} → ${view.cols[cell.c]}: ${weight}`;
  tip.style.left = `${cell.x + 12}px`;
  tip.style.top = `${cell.y + 12}px`;
  tip.hidden = false;
}

function selectCell(r, c) {
  const view = currentView();
  if (!view) return;
  state.cursor = { r, c };
  drawHeatmap();
  explainCell(view, r, c);
}

function clickHeatmap(event) {
  const view = currentView();
  const cell = view && state.box ? cellAt(event, view) : null;
  if (cell) selectCell(cell.r, cell.c);
}

// Arrow keys move the chosen cell, Enter or Space explains it.
function heatmapKey(event) {
  const view = currentView();
  if (!view) return;
  const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
  const cursor = state.cursor || { r: 0, c: 0 };
  if (moves[event.key]) {
    const [dr, dc] = moves[event.key];
    const r = Math.min(view.rows.length - 1, Math.max(0, cursor.r + dr));
    const c = Math.min(view.cols.length - 1, Math.max(0, cursor.c + dc));
    state.cursor = { r, c };
    drawHeatmap();
  } else if (event.key === "Enter" || event.key === " ") {
    selectCell(cursor.r, cursor.c);
  } else {
    return;
  }
  event.preventDefault();
}

// Every layer x head of the chosen kind as small thumbnails; a click shows that head big.
function drawAllHeads() {
  const view = currentView();
  const grid = $("all-heads");
  grid.replaceChildren();
  if (!view) return;
  const { attention, kind } = view;
  grid.style.gridTemplateColumns = `repeat(${attention.heads}, max-content)`;
  const size = Math.max(view.rows.length, view.cols.length);
  const cell = Math.max(2, Math.floor(96 / size));
  for (let layer = 0; layer < attention.layers; layer++) {
    for (let head = 0; head < attention.heads; head++) {
      const canvas = el("canvas", { width: String(view.cols.length * cell), height: String(view.rows.length * cell) });
      paintCells(canvas.getContext("2d"), attention[kind][layer][head], 0, 0, cell, kind, 0);
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
      grid.append(thumb);
    }
  }
}

function toggleAllHeads() {
  const grid = $("all-heads");
  grid.hidden = !grid.hidden;
  $("all-heads-toggle").setAttribute("aria-expanded", String(!grid.hidden));
  $("all-heads-toggle").textContent = grid.hidden ? "All heads" : "Hide all heads";
  if (!grid.hidden) drawAllHeads();
}

$("translate").addEventListener("click", translate);
$("source").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate();
});
for (const id of ["kind", "layer", "head"]) $(id).addEventListener("change", viewChanged);
$("sentence").addEventListener("change", () => selectSentence(parseInt($("sentence").value, 10)));
$("all-heads-toggle").addEventListener("click", toggleAllHeads);
$("heatmap").addEventListener("mousemove", showTooltip);
$("heatmap").addEventListener("mouseleave", () => { $("tooltip").hidden = true; });
$("heatmap").addEventListener("click", clickHeatmap);
$("heatmap").addEventListener("keydown", heatmapKey);
loadInfo();
