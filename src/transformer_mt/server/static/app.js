// The page: send the text to /api/translate, list the translations, and draw the
// cross-attention of the chosen sentence, layer and head on a canvas. No libraries.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { results: [], selected: 0 };

// A perceptual colour scale (dark blue -> green -> yellow) for weights in [0, 1].
const STOPS = [
  [0.0, [68, 1, 84]], [0.25, [59, 82, 139]], [0.5, [33, 145, 140]],
  [0.75, [94, 201, 98]], [1.0, [253, 231, 37]],
];

function colour(value) {
  const v = Math.min(1, Math.max(0, value));
  for (let i = 1; i < STOPS.length; i++) {
    const [p1, c1] = STOPS[i];
    const [p0, c0] = STOPS[i - 1];
    if (v <= p1) {
      const t = (v - p0) / (p1 - p0);
      const mix = c0.map((c, k) => Math.round(c + t * (c1[k] - c)));
      return `rgb(${mix[0]}, ${mix[1]}, ${mix[2]})`;
    }
  }
  return "rgb(253, 231, 37)";
}

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

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
  } catch (err) {
    $("model-info").textContent = "the server does not answer /api/health";
  }
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
    const response = await fetch("/api/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ text, beam, nbest, attention: true }),
    });
    const data = await response.json();
    if (!response.ok) {
      throw new Error(data.error || `the server answered ${response.status}`);
    }
    state.results = data.results;
    state.selected = 0;
    $("status").textContent = `${data.results.length} sentence(s) in ${Math.round(data.elapsed_ms)} ms`;
    renderOutput();
    renderSelectors();
    drawHeatmap();
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
    const item = document.createElement("li");
    item.className = index === state.selected ? "selected" : "";
    const translation = document.createElement("span");
    translation.className = "translation";
    translation.textContent = result.translation || "(empty)";
    const source = document.createElement("span");
    source.className = "source muted";
    source.textContent = result.source;
    item.append(translation, source);
    if (result.nbest.length > 1) {
      const alternatives = document.createElement("ol");
      alternatives.className = "alternatives";
      for (const hyp of result.nbest) {
        const alt = document.createElement("li");
        const score = hyp.score === null || hyp.score === undefined ? "" : ` (${hyp.score.toFixed(3)})`;
        alt.textContent = hyp.text + score;
        alternatives.append(alt);
      }
      item.append(alternatives);
    }
    item.addEventListener("click", () => selectSentence(index));
    list.append(item);
  });
}

function fillSelect(select, count, label, keep) {
  const previous = keep ? parseInt(select.value, 10) : 0;
  select.replaceChildren();
  for (let i = 0; i < count; i++) {
    const option = document.createElement("option");
    option.value = String(i);
    option.textContent = `${label} ${i + 1}`;
    select.append(option);
  }
  select.value = String(previous >= 0 && previous < count ? previous : 0);
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
}

function selectSentence(index) {
  state.selected = index;
  $("sentence").value = String(index);
  renderOutput();
  drawHeatmap();
}

function layout(ctx, attention) {
  ctx.font = "13px system-ui, sans-serif";
  const widest = (tokens) => Math.max(20, ...tokens.map((t) => ctx.measureText(t).width));
  const cell = Math.max(22, Math.min(46, Math.floor(640 / Math.max(attention.source_tokens.length, 1))));
  return {
    cell,
    left: Math.ceil(widest(attention.target_tokens)) + 14,
    top: Math.ceil(widest(attention.source_tokens) * 0.75) + 18,
  };
}

function drawHeatmap() {
  const result = state.results[state.selected];
  const canvas = $("heatmap");
  const ctx = canvas.getContext("2d");
  if (!result || !result.attention) {
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    return;
  }
  const attention = result.attention;
  const layer = parseInt($("layer").value, 10);
  const head = parseInt($("head").value, 10);
  const weights = attention.cross[layer][head];
  const box = layout(ctx, attention);
  const cols = attention.source_tokens.length;
  const rows = attention.target_tokens.length;
  const width = box.left + cols * box.cell + 10;
  const height = box.top + rows * box.cell + 10;
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  canvas.dataset.rows = String(rows);
  canvas.dataset.cols = String(cols);
  canvas.dataset.view = `${layer + 1},${head + 1}`;
  state.box = box;
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  ctx.font = "13px system-ui, sans-serif";
  ctx.fillStyle = "#1d232b";
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  attention.target_tokens.forEach((token, r) => {
    ctx.fillText(token, box.left - 6, box.top + (r + 0.5) * box.cell);
  });
  ctx.textAlign = "left";
  attention.source_tokens.forEach((token, c) => {
    ctx.save();
    ctx.translate(box.left + (c + 0.5) * box.cell, box.top - 6);
    ctx.rotate(-Math.PI / 4);
    ctx.fillText(token, 0, 0);
    ctx.restore();
  });
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      ctx.fillStyle = colour(weights[r][c]);
      ctx.fillRect(box.left + c * box.cell, box.top + r * box.cell, box.cell - 1, box.cell - 1);
    }
  }
}

function showTooltip(event) {
  const result = state.results[state.selected];
  const tip = $("tooltip");
  if (!result || !result.attention || !state.box) return;
  const rect = $("heatmap").getBoundingClientRect();
  const x = event.clientX - rect.left - state.box.left;
  const y = event.clientY - rect.top - state.box.top;
  const c = Math.floor(x / state.box.cell);
  const r = Math.floor(y / state.box.cell);
  const attention = result.attention;
  if (x < 0 || y < 0 || r >= attention.target_tokens.length || c >= attention.source_tokens.length) {
    tip.hidden = true;
    return;
  }
  const weight = attention.cross[parseInt($("layer").value, 10)][parseInt($("head").value, 10)][r][c];
  tip.textContent = `${attention.target_tokens[r]} → ${attention.source_tokens[c]}: ${weight.toFixed(3)}`;
  tip.style.left = `${event.clientX - rect.left + 12}px`;
  tip.style.top = `${event.clientY - rect.top + 12}px`;
  tip.hidden = false;
}

$("translate").addEventListener("click", translate);
$("source").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate();
});
$("layer").addEventListener("change", drawHeatmap);
$("head").addEventListener("change", drawHeatmap);
$("sentence").addEventListener("change", () => selectSentence(parseInt($("sentence").value, 10)));
$("heatmap").addEventListener("mousemove", showTooltip);
$("heatmap").addEventListener("mouseleave", () => { $("tooltip").hidden = true; });
loadInfo();
