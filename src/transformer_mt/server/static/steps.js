// The step-by-step panel: POST /api/steps decodes the first sentence one step at a time;
// the slider and the previous/next buttons walk through the steps. For the current step
// it shows the next-token candidates of the best open hypothesis (click one to force it:
// the page decodes again with that token forced after the hypothesis it extends), where
// that hypothesis' query looks in the source, and the beam so far as a tree.
"use strict";

const steps = { data: null, current: 1, text: "", beam: 1, request: 0 };
const TREE = { colWidth: 138, gap: 34, nodeHeight: 34, rowGap: 6, top: 24 };

function firstSentence() {
  return $("source").value.split("\n").map((line) => line.trim()).find((line) => line) || "";
}

// Decode steps.text with `prefix` forced first; show step `show` afterwards (default 1).
async function decodeSteps(prefix, show) {
  const request = ++steps.request;
  const topK = Math.min(20, Math.max(1, parseInt($("steps-topk").value, 10) || 5));
  showError("");
  $("step-through").disabled = true;
  $("steps-status").textContent = "decoding…";
  try {
    const data = await postJSON("/api/steps", { text: steps.text, beam: steps.beam, top_k: topK, prefix });
    if (request !== steps.request) return;
    steps.data = data;
    $("steps-panel").hidden = false;
    $("steps-status").textContent = `${data.steps.length} steps, beam ${data.beam}, ` +
      `in ${Math.round(data.elapsed_ms)} ms`;
    $("steps-translation").textContent = data.translation || "(empty)";
    $("steps-score").textContent = `score ${fixed(data.score, 3)}`;
    renderPrefix(data.prefix);
    const slider = $("steps-slider");
    slider.max = String(Math.max(1, data.steps.length));
    // a learner's model whose attention keeps no weights sends none: the strip stays empty
    const cross = data.steps[0] && data.steps[0].cross_attention.length ? data.steps[0].cross_attention : [];
    fillSelect($("steps-layer"), cross.length, "layer", true,
      { value: "mean", text: "all layers (mean)" });
    fillSelect($("steps-head"), cross.length ? cross[0].length : 0, "head", true,
      { value: "mean", text: "all heads (mean)" });
    goToStep(show || 1);
  } catch (err) {
    if (request !== steps.request) return;
    $("steps-status").textContent = "";
    showError(err.message);
  } finally {
    if (request === steps.request) $("step-through").disabled = false;
  }
}

function stepThrough() {
  const text = firstSentence();
  if (!text) {
    showError("Type a sentence first.");
    return;
  }
  steps.text = text;
  steps.beam = parseInt($("beam").value, 10) || 1;
  decodeSteps([], 1).then(() => {
    if (!$("steps-panel").hidden) $("steps-panel").scrollIntoView({ block: "start" });
  });
}

function renderPrefix(prefix) {
  const box = $("steps-prefix");
  box.hidden = prefix.length === 0;
  $("steps-prefix-tokens").replaceChildren(...prefix.map((t) => el("code", { class: "chip", text: t })));
}

function goToStep(number) {
  if (!steps.data || steps.data.steps.length === 0) return;
  const count = steps.data.steps.length;
  steps.current = Math.min(count, Math.max(1, number));
  $("steps-slider").value = String(steps.current);
  $("steps-prev").disabled = steps.current <= 1;
  $("steps-next").disabled = steps.current >= count;
  $("steps-label").textContent = `step ${steps.current} of ${count}`;
  renderStep();
}

// The kept hypotheses of step `number` (what the next step's `parent` indexes), as rows.
function keptRows(number) {
  if (number < 1) return [0]; // the root: <s>
  const rows = [];
  steps.data.steps[number - 1].hypotheses.forEach((h, i) => { if (h.status === "kept") rows.push(i); });
  return rows;
}

// The tokens of the best open hypothesis entering step `number` (the one top_k is about).
function contextTokens(number) {
  if (number <= 1) return [];
  const before = steps.data.steps[number - 2];
  const rows = keptRows(number - 1);
  return rows.length ? before.hypotheses[rows[0]].tokens : [];
}

function renderStep() {
  const step = steps.data.steps[steps.current - 1];
  const context = contextTokens(steps.current);
  $("steps-context").textContent = context.length ? `after “${context.join(" · ")}”` : "after <s> (the first token)";
  const best = step.hypotheses[0];
  $("steps-current").textContent = best ? detokenize(best.tokens) || "(nothing yet)" : "";
  $("steps-chosen").textContent = `${step.forced ? "forced" : "chosen"}: ${step.chosen.token} ` +
    `(${percent(step.chosen.prob)}` + (step.chosen.from ? `, extending hypothesis ${step.chosen.from + 1})` : ")");
  renderStepBars(step, context);
  renderCross(step);
  renderTree();
}

function renderStepBars(step, context) {
  renderBars($("steps-bars"), step.top_k.map((candidate) => {
    const eos = candidate.token === "</s>";
    return {
      token: candidate.token,
      prob: candidate.prob,
      chosen: candidate.token === step.chosen.token && step.chosen.from === 0,
      disabled: eos,
      title: eos ? "the end of the sentence cannot be forced" : `force “${candidate.token}” here and decode on`,
      onPick: () => force([...context, candidate.token]),
    };
  }));
}

function force(prefix) {
  decodeSteps(prefix, prefix.length);
}

// The current step's cross-attention row over the source: one layer and head, or a mean.
function renderCross(step) {
  const layerChoice = $("steps-layer").value;
  const headChoice = $("steps-head").value;
  if (!step.cross_attention.length) {
    $("steps-cross").replaceChildren();
    return;
  }
  const layers = layerChoice === "mean" ? step.cross_attention : [step.cross_attention[parseInt(layerChoice, 10)]];
  const rows = layers.flatMap((heads) => (headChoice === "mean" ? heads : [heads[parseInt(headChoice, 10)]]));
  const weights = steps.data.source_tokens.map((_, j) => rows.reduce((t, row) => t + row[j], 0) / rows.length);
  const strip = $("steps-cross");
  strip.replaceChildren(...steps.data.source_tokens.map((token, j) => {
    const cell = el("span", { class: "strip-cell", title: `${token}: ${weights[j].toFixed(3)}` },
      el("span", { class: "strip-token", text: token }),
      el("span", { class: "strip-weight", text: weights[j].toFixed(2) }));
    cell.style.background = colour(weights[j]);
    cell.style.color = inkOn(weights[j]);
    return cell;
  }));
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  return node;
}

function short(token) {
  return token.length > 15 ? `${token.slice(0, 14)}…` : token;
}

// The beam up to the current step: a column per step (<s> first), each hypothesis linked
// to its parent; the path of the current best hypothesis is drawn bold.
function renderTree() {
  const tree = $("steps-tree");
  tree.replaceChildren();
  const { colWidth, gap, nodeHeight, rowGap, top } = TREE;
  const shown = steps.data.steps.slice(0, steps.current);
  const tallest = Math.max(1, ...shown.map((s) => s.hypotheses.length));
  const x = (col) => col * (colWidth + gap) + 2;
  const y = (row) => top + row * (nodeHeight + rowGap);
  tree.setAttribute("width", String(x(shown.length + 1)));
  tree.setAttribute("height", String(y(tallest) + 4));
  const onPath = bestPath(shown);
  drawNode(tree, x(0), y(0), "<s>", "start", "root", true, null);
  const start = svg("text", { x: x(0), y: 14, class: "col-label" });
  start.textContent = "start";
  tree.append(start);
  shown.forEach((step, i) => {
    const col = i + 1;
    const label = svg("text", { x: x(col), y: 14, class: col === steps.current ? "col-label current" : "col-label" });
    label.textContent = `step ${step.step}${step.forced ? " (forced)" : ""}`;
    tree.append(label);
    const parents = keptRows(i);
    step.hypotheses.forEach((h, row) => {
      const bold = onPath[col] === row;
      const from = parents[h.parent] !== undefined ? parents[h.parent] : 0;
      const y1 = y(from) + nodeHeight / 2;
      const y2 = y(row) + nodeHeight / 2;
      const x1 = x(col - 1) + colWidth;
      const x2 = x(col);
      const mid = (x1 + x2) / 2;
      tree.insertBefore(svg("path", {
        d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`,
        class: `edge ${h.status}${bold ? " best" : ""}`,
      }), tree.firstChild);
      const text = h.tokens[h.tokens.length - 1] || "";
      drawNode(tree, x(col), y(row), short(text), fixed(h.score, 3), h.status, bold, h);
    });
  });
  const wrap = $("steps-tree-wrap");
  wrap.scrollLeft = wrap.scrollWidth;
}

// Row of the best hypothesis' ancestor in every column (index = column, 0 = <s>).
function bestPath(shown) {
  const path = new Array(shown.length + 1).fill(-1);
  let row = 0;
  for (let col = shown.length; col >= 1; col--) {
    path[col] = row;
    const h = shown[col - 1].hypotheses[row];
    if (!h) break;
    const parents = keptRows(col - 1);
    row = parents[h.parent] !== undefined ? parents[h.parent] : 0;
  }
  path[0] = 0;
  return path;
}

function drawNode(tree, x, y, token, score, status, bold, hypothesis) {
  const group = svg("g", { class: `node ${status}${bold ? " best" : ""}`, transform: `translate(${x},${y})` });
  group.append(svg("rect", { width: TREE.colWidth, height: TREE.nodeHeight, rx: 5 }));
  const name = svg("text", { x: 7, y: 14, class: "node-token" });
  name.textContent = token;
  const detail = svg("text", { x: 7, y: 28, class: "node-score" });
  detail.textContent = status === "root" ? "start" : `${score} · ${status}`;
  group.append(name, detail);
  if (hypothesis) {
    const title = svg("title");
    title.textContent = `${hypothesis.tokens.join(" ")}\nscore ${hypothesis.score} (${hypothesis.status}); ` +
      "click to force this hypothesis and decode on";
    group.append(title);
    const prefix = hypothesis.tokens.filter((t) => t !== "</s>");
    group.setAttribute("tabindex", "0");
    group.setAttribute("role", "button");
    group.setAttribute("aria-label", `force ${hypothesis.tokens.join(" ")}`);
    group.addEventListener("click", () => force(prefix));
    group.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        force(prefix);
      }
    });
  }
  tree.append(group);
}

$("step-through").addEventListener("click", stepThrough);
$("steps-prev").addEventListener("click", () => goToStep(steps.current - 1));
$("steps-next").addEventListener("click", () => goToStep(steps.current + 1));
$("steps-slider").addEventListener("input", () => goToStep(parseInt($("steps-slider").value, 10)));
$("steps-layer").addEventListener("change", () => { if (steps.data) renderStep(); });
$("steps-head").addEventListener("change", () => { if (steps.data) renderStep(); });
$("steps-clear").addEventListener("click", () => decodeSteps([], 1));
$("steps-topk").addEventListener("change", () => {
  if (steps.data) decodeSteps(steps.data.prefix, steps.current);
});
