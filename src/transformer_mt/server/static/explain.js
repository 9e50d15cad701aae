// Equation 1 of the paper opened up for one cell of the heatmap:
//   Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V
// The view's explain call (POST /api/explain for a translation, /api/generate/explain for a
// language model) gives, for the clicked query row, q·k_j for every key j, the scaled
// scores, the mask and the softmax; this panel shows them with the clicked key highlighted.
"use strict";

let explainRequest = 0; // answers to older clicks are dropped

function hideExplain() {
  explainRequest++;
  $("explain").hidden = true;
  $("explain").replaceChildren();
}

async function explainCell(view, query, key) {
  const request = ++explainRequest;
  const panel = $("explain");
  panel.hidden = false;
  panel.replaceChildren(el("p", { class: "muted", text: "computing equation 1 for this cell…" }));
  try {
    const { path, body } = view.explainRequest(query);
    const data = await postJSON(path, body);
    if (request !== explainRequest) return;
    renderExplain(data, view, query, key);
  } catch (err) {
    if (request !== explainRequest) return;
    panel.replaceChildren(el("p", { class: "error", text: err.message }));
  }
}

// A number shown with 4 decimals that keeps its exact value for whoever reads the page.
function value(id, number, digits = 4) {
  return el("span", { id, class: "num", "data-value": String(number), text: fixed(number, digits) });
}

function renderExplain(data, view, query, key) {
  const panel = $("explain");
  const allowed = data.mask[key];
  const scaled = data.scaled[key];
  // Σ exp(s_i) over the keys the mask allows (exp(−∞) = 0 for the others), shifted by the
  // row's largest score only where exp would overflow.
  const kept = data.scaled.filter((s, i) => data.mask[i]);
  const shift = Math.max(...kept) > 600 ? Math.max(...kept) : 0;
  const sum = kept.reduce((total, s) => total + Math.exp(s - shift), 0);
  const numerator = allowed ? Math.exp(scaled - shift) : 0;
  const exp = shift ? `exp(s_j − ${fixed(shift, 2)})` : "exp(s_j)";

  panel.replaceChildren(
    el("h3", { text: "Equation 1, opened up for one cell" }),
    el("p", { class: "equation", text: "Attention(Q, K, V) = softmax(QKᵀ / √d_k) V" }),
    el("p", {},
      `${view.title}, layer ${view.layer + 1}, head ${view.head + 1}: query `,
      el("strong", { id: "explain-query", text: data.query_token }), ` (row ${query + 1}) and key `,
      el("strong", { id: "explain-key", text: data.key_tokens[key] }), ` (column ${key + 1}).`),
    el("ol", { class: "eq-steps" },
      el("li", {}, "Dot product of the query and key vectors of this head: q · k = ", value("explain-dot", data.dot[key])),
      el("li", {}, "Scaled by √d_k, with d_k = ", el("span", { id: "explain-dk", text: String(data.d_k) }),
        ` (d_model / heads): s = q · k / √d_k = ${fixed(data.dot[key])} / ${fixed(data.sqrt_d_k, 3)} = `,
        value("explain-scaled", scaled)),
      el("li", {}, "Mask: ", el("strong", { id: "explain-mask", text: allowed ? "may attend" : "masked" }),
        allowed ? " (the score goes into the softmax as it is)."
          : " (a later position: the score becomes −∞, so its weight is exp(−∞) = 0)."),
      el("li", {}, `Softmax over the row: weight = ${exp} / Σ_i ${exp.replace("s_j", "s_i")} = `,
        `${sci(numerator)} / ${sci(sum)} = `, value("explain-weight", data.weights[key]),
        ` (${percent(data.weights[key])} of this query's attention).`)),
    explainTable(data, key),
    el("p", { class: "muted", text: "The output of this query is the sum of the value vectors v_j of the " +
      "keys, each multiplied by its weight: softmax(QKᵀ/√d_k) V, one row at a time. Every head does this " +
      "with its own projections of Q, K and V; their outputs are concatenated and projected (W^O)." }),
  );
}

// The whole row: every key's q·k, scaled score, mask and weight (as a bar).
function explainTable(data, key) {
  const head = el("tr", {}, ...["key", "q · k", "q · k / √d_k", "mask", "softmax weight"].map(
    (name) => el("th", { scope: "col", text: name })));
  const body = el("tbody");
  data.key_tokens.forEach((token, j) => {
    const bar = el("span", { class: "wbar" });
    bar.style.width = `${Math.round(100 * data.weights[j])}%`;
    body.append(el("tr", { class: j === key ? "explain-row current" : "explain-row" },
      el("td", { class: "token", text: token }),
      el("td", { class: "num", text: fixed(data.dot[j], 3) }),
      el("td", { class: "num", text: fixed(data.scaled[j], 3) }),
      el("td", { text: data.mask[j] ? "✓" : "masked" }),
      el("td", { class: "weight" }, el("span", { class: "wtrack" }, bar),
        el("span", { class: "num", text: fixed(data.weights[j], 4) }))));
  });
  return el("table", { id: "explain-table", class: "explain-table" }, el("thead", {}, head), body);
}
