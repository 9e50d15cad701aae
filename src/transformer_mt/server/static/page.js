// Which view the page opens: GET /api/health says which kind of run is served. A translation
// run opens the translation view (app.js, steps.js), a language model the generate view
// (generate.js); both draw their attention in the same panel (heatmap.js, explain.js). The
// body's class (translate or generate) shows the parts of one view; the server sends the
// page with the right one already, so nothing of the other view flashes. Loaded last.
"use strict";

// "4" layers, or "6 + 2" where the decoder is shallower than the encoder (model.decoder_layers).
const stacks = (info) =>
  info.n_layers === info.n_decoder_layers ? `${info.n_layers}` : `${info.n_layers} + ${info.n_decoder_layers}`;

const VIEWS = {
  translation: {
    mode: "translate",
    title: "transformer-mt: translate and see the attention",
    model: (info) => `${stacks(info)} layers, ${info.n_heads} heads, d_model ${info.d_model}, ` +
      `vocabulary ${info.vocab_size}, on ${info.device}; up to ${info.limits.max_sentences} sentences ` +
      `and ${info.limits.max_chars} characters per request`,
    start: (info) => startTranslate(info),
  },
  language_model: {
    mode: "generate",
    title: "transformer-mt: generate text and see the attention",
    model: (info) => `a language model, ${info.n_layers} layers, ${info.n_heads} heads, d_model ${info.d_model}, ` +
      `vocabulary ${info.vocab_size}, ${info.max_positions} positions, on ${info.device}; up to ` +
      `${info.limits.max_chars} characters and ${info.limits.max_new_tokens} new tokens per request`,
    start: (info) => startGenerate(info),
  },
};

async function openPage() {
  let info;
  try {
    const response = await fetch("/api/health");
    info = await response.json();
  } catch (err) {
    $("model-info").textContent = "the server does not answer /api/health";
    return;
  }
  const view = VIEWS[info.kind] || VIEWS.translation;
  for (const other of Object.values(VIEWS)) document.body.classList.toggle(other.mode, other === view);
  document.title = view.title;
  $("model-info").textContent = `run ${info.run}: ${view.model(info)}`;
  view.start(info);
}

openPage();
