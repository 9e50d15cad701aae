// The generate view, for a language-model run. POST /api/generate/step gives, for the prompt
// and the tokens chosen so far, the raw scores z of the best next tokens and the log-sum-exp
// the probabilities need; the bars show softmax(z / T) and follow the temperature slider
// without asking the server again. Step adds the most probable token (greedy), Sample a
// draw from the bars as shown (this page's seeded random numbers: the same seed and the
// same clicks, the same tokens), a click on a bar that token; Generate asks POST
// /api/generate for a whole continuation. The causal self-attention of the sequence goes to
// the attention panel (heatmap.js), equation 1 of a cell to explain.js.
"use strict";

const gen = { data: null, request: 0, temperatures: [1], vocab: 0, random: Math.random };

function startGenerate(info) {
  gen.temperatures = info.temperatures;
  gen.vocab = info.vocab_size;
  const slider = $("lm-temperature");
  slider.max = String(info.temperatures.length - 1);
  slider.value = String(Math.max(0, info.temperatures.indexOf(1)));
  $("lm-topk").max = String(info.limits.max_top_k);
  $("lm-max-new").max = String(info.limits.max_new_tokens);
  showTemperature();
  resetRandom();
  heatmap.source = generateView;
  if (info.example && !$("lm-prompt").value.trim()) {
    $("lm-prompt").value = info.example;
    readPrompt();
  }
}

// mulberry32: a small seeded generator of numbers in [0, 1).
function seededRandom(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function seed() {
  return Math.max(0, parseInt($("lm-seed").value, 10) || 0);
}

function resetRandom() {
  gen.random = seededRandom(seed());
}

function promptText() {
  return $("lm-prompt").value.trim();
}

function temperatureIndex() {
  return parseInt($("lm-temperature").value, 10);
}

function temperature() {
  return gen.temperatures[temperatureIndex()];
}

function showTemperature() {
  $("lm-temperature-value").textContent = `T = ${temperature().toFixed(1)}`;
}

function barCount() {
  const most = gen.data ? gen.data.candidates.length : 50;
  return Math.min(most, Math.max(1, parseInt($("lm-topk").value, 10) || 10));
}

function logAddExp(a, b) {
  const top = Math.max(a, b);
  return top + Math.log(Math.exp(a - top) + Math.exp(b - top));
}

// softmax(z / T) of every candidate at the slider's temperature number `index`, exact: the
// log of Σ exp(z / T) over the whole vocabulary is the candidates' (summed here) and the
// other tokens' (sent for each temperature of the grid); at T = 1 the server's logsumexp.
function nextProbs(data, index) {
  const t = data.temperatures[index];
  const scaled = data.candidates.map((c) => c.logit / t);
  let lse = data.logsumexp;
  if (t !== 1) {
    const top = Math.max(...scaled);
    lse = top + Math.log(scaled.reduce((sum, z) => sum + Math.exp(z - top), 0));
    if (data.tail_logsumexp) lse = logAddExp(lse, data.tail_logsumexp[index]);
  }
  return scaled.map((z) => Math.exp(z - lse));
}

// Ask for the sequence prompt + forced: its next-token candidates and its attention.
async function loadStep(prompt, forced) {
  const request = ++gen.request;
  showError("");
  $("lm-status").textContent = "reading…";
  try {
    const data = await postJSON("/api/generate/step", { prompt, forced, top_k: barCount() });
    if (request !== gen.request) return false;
    gen.data = data;
    $("lm-panel").hidden = false;
    $("attention-panel").hidden = false;
    $("lm-status").textContent = `${data.tokens.length - 1} tokens; the next one's distribution ` +
      `in ${Math.round(data.elapsed_ms)} ms`;
    fillSelect($("layer"), data.attention.layers, "layer", true);
    fillSelect($("head"), data.attention.heads, "head", true);
    renderSequence();
    renderCandidates();
    viewChanged();
    return true;
  } catch (err) {
    if (request !== gen.request) return false;
    $("lm-status").textContent = "";
    showError(err.message);
    return false;
  }
}

function readPrompt() {
  const prompt = promptText();
  if (!prompt) {
    showError("Type a prompt first.");
    return Promise.resolve(false);
  }
  resetRandom();
  return loadStep(prompt, []);
}

// The answer for the prompt in the box: asked for first when the box changed since.
async function currentStep() {
  if (gen.data && gen.data.prompt === promptText()) return gen.data;
  return (await readPrompt()) ? gen.data : null;
}

function choose(data, id) {
  return loadStep(data.prompt, [...data.forced, id]);
}

// Add the token `pick` takes from the current distribution, and show the next one.
async function advance(pick) {
  const data = await currentStep();
  if (!data) return;
  const id = pick(data);
  if (id === data.eot) {
    $("lm-status").textContent = "end-of-text: the model ends the line here; choose another bar to go on";
    return;
  }
  await choose(data, id);
}

function greedyPick(data) {
  return data.candidates[0].id;
}

// A draw from the bars as shown: the top-k candidates at temperature T, renormalised.
function samplePick(data) {
  const probs = nextProbs(data, temperatureIndex()).slice(0, barCount());
  let left = gen.random() * probs.reduce((sum, p) => sum + p, 0);
  for (let i = 0; i < probs.length; i++) {
    left -= probs[i];
    if (left < 0) return data.candidates[i].id;
  }
  return data.candidates[probs.length - 1].id;
}

// The sequence as chips: end-of-text, the prompt's tokens, then the chosen ones (a click
// goes back to before that token).
function renderSequence() {
  const data = gen.data;
  $("lm-text").textContent = data.text;
  $("lm-sequence").replaceChildren(...data.tokens.map((token, i) => {
    if (i < data.prompt_length) {
      const start = i === 0 && data.ids[0] === data.eot;
      return el("code", { class: start ? "chip start" : "chip prompt", text: token,
        title: start ? "end-of-text: every line starts after it" : "a token of the prompt" });
    }
    const chip = el("button", { type: "button", class: "chip chosen", text: token, "data-id": String(data.ids[i]),
      title: "chosen; click to go back to before it" });
    chip.addEventListener("click", () => loadStep(data.prompt, data.forced.slice(0, i - data.prompt_length)));
    return chip;
  }));
  $("lm-undo").disabled = data.forced.length === 0;
}

// The bars at the slider's temperature: the first is what greedy decoding takes.
function renderCandidates() {
  const data = gen.data;
  if (!data) return;
  const probs = nextProbs(data, temperatureIndex());
  const count = barCount();
  renderBars($("lm-bars"), data.candidates.slice(0, count).map((c, i) => ({
    token: c.token,
    prob: probs[i],
    chosen: i === 0,
    disabled: c.id === data.eot,
    title: c.id === data.eot ? "end-of-text: the line would end here" : `choose “${c.token}” (z = ${fixed(c.logit, 3)})`,
    attrs: { "data-id": String(c.id), "data-prob": String(probs[i]), "data-logit": String(c.logit) },
    onPick: () => choose(data, c.id),
  })));
  const shown = probs.slice(0, count).reduce((sum, p) => sum + p, 0);
  $("lm-rest").textContent = `These ${count} tokens hold ${percent(shown)} of the probability at ` +
    `T = ${temperature().toFixed(1)}; the other ${gen.vocab - count} share the rest.`;
}

async function generateText() {
  const prompt = promptText();
  if (!prompt) {
    showError("Type a prompt first.");
    return;
  }
  const body = { prompt, max_new_tokens: parseInt($("lm-max-new").value, 10) || 50 };
  const sampling = $("lm-generate-mode").value === "sample";
  if (sampling) Object.assign(body, { temperature: temperature(), top_k: barCount(), seed: seed() });
  showError("");
  $("lm-generate").disabled = true;
  $("lm-status").textContent = "generating…";
  try {
    const data = await postJSON("/api/generate", body);
    $("lm-generated-line").hidden = false;
    $("lm-generated").textContent = data.text;
    $("lm-generated-how").textContent = sampling
      ? `(sampled: T = ${body.temperature.toFixed(1)}, top-k ${body.top_k}, seed ${body.seed})` : "(greedy)";
    $("lm-status").textContent = `generated in ${Math.round(data.elapsed_ms)} ms`;
  } catch (err) {
    $("lm-status").textContent = "";
    showError(err.message);
  } finally {
    $("lm-generate").disabled = false;
  }
}

// The causal self-attention of the sequence, as heatmap.js draws it.
function generateView() {
  const data = gen.data;
  if (!data) return null;
  const attention = data.attention;
  const layer = parseInt($("layer").value, 10);
  const head = parseInt($("head").value, 10);
  return {
    kind: "causal", layer, head, causal: true, title: "Causal self-attention",
    help: "Each row is a position of the sequence (query); its cells show how much the chosen head looks " +
      "at itself and every earlier position (keys): the mask hides the later ones (grey). Every row sums " +
      "to 1; the last row is the one the next token is predicted from.",
    layers: attention.layers, heads: attention.heads,
    weights: attention.weights[layer][head],
    all: (l, h) => attention.weights[l][h],
    rows: data.tokens,
    cols: data.tokens,
    explainRequest: (query) => ({
      path: "/api/generate/explain",
      body: { prompt: data.prompt, forced: data.forced, layer, head, query },
    }),
  };
}

$("lm-step").addEventListener("click", () => advance(greedyPick));
$("lm-sample").addEventListener("click", () => advance(samplePick));
$("lm-undo").addEventListener("click", () => {
  if (gen.data && gen.data.forced.length) loadStep(gen.data.prompt, gen.data.forced.slice(0, -1));
});
$("lm-generate").addEventListener("click", generateText);
$("lm-prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    readPrompt();
  }
});
$("lm-temperature").addEventListener("input", () => {
  showTemperature();
  renderCandidates();
});
$("lm-topk").addEventListener("input", renderCandidates);
$("lm-seed").addEventListener("change", resetRandom);
