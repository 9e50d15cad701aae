// The translation view: send the text to /api/translate, list the translations, and give
// the attention panel (heatmap.js) the chosen attention (encoder self-attention, decoder
// masked self-attention or cross-attention) of the chosen sentence, layer and head.
// Clicking a cell opens equation 1 up (explain.js); steps.js is the step-by-step panel.
"use strict";

const state = { results: [], selected: 0 };

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

// The translation run's settings: the beam the page starts with, and its example.
function startTranslate(info) {
  $("beam").max = info.limits.max_beam;
  $("nbest").max = info.limits.max_beam;
  $("beam").value = Math.min(info.default_beam, info.limits.max_beam);
  heatmap.source = translationView;
  showExample(info.example);
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
  fillSelect($("layer"), layersOf(first, $("kind").value), "layer", true);
  fillSelect($("head"), first.heads, "head", true);
  for (const option of $("kind").options) option.disabled = !first[option.value];
  if (!first[$("kind").value]) $("kind").value = "cross";
}

// The encoder's layers, or the decoder's (decoder and cross attention): a decoder can be
// shallower than the encoder (model.decoder_layers).
function layersOf(attention, kind) {
  return kind === "encoder" ? attention.layers : attention.decoder_layers;
}

// Another kind of attention may have another number of layers: the layer menu follows.
function kindChanged() {
  const result = state.results[state.selected];
  if (result && result.attention) fillSelect($("layer"), layersOf(result.attention, $("kind").value), "layer", true);
  viewChanged();
}

function selectSentence(index) {
  state.selected = index;
  $("sentence").value = String(index);
  renderOutput();
  viewChanged();
}

// The attention on show, as heatmap.js draws it: the chosen kind, layer and head of the
// chosen sentence, with its axis labels and the body of its explain call.
function translationView() {
  const result = state.results[state.selected];
  if (!result || !result.attention) return null;
  const attention = result.attention;
  const kind = $("kind").value;
  const layer = parseInt($("layer").value, 10);
  const head = parseInt($("head").value, 10);
  const spec = KINDS[kind];
  return {
    kind, layer, head, title: spec.title, help: spec.help, causal: kind === "decoder",
    layers: layersOf(attention, kind), heads: attention.heads,
    weights: attention[kind][layer][head],
    all: (l, h) => attention[kind][l][h],
    rows: spec.rows(attention),
    cols: spec.cols(attention),
    // the heatmap's own rows (ending with </s> when the translation ended), so the query
    // index and the keys are the ones drawn
    explainRequest: (query) => ({
      path: "/api/explain",
      body: { text: result.source, target_tokens: attention.target_tokens, kind, layer, head, query },
    }),
  };
}

$("translate").addEventListener("click", translate);
$("source").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate();
});
$("kind").addEventListener("change", kindChanged);
$("sentence").addEventListener("change", () => selectSentence(parseInt($("sentence").value, 10)));
