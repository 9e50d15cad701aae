// Helpers every part of the page uses: element lookup, the colour scale, the JSON API
// call with its one-line errors, number formatting and the next-token bars. Loaded
// first; no libraries.
"use strict";

const $ = (id) => document.getElementById(id);

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

// Text on a cell of colour(value): light on the dark end of the scale, dark on the light end.
function inkOn(value) {
  return value < 0.62 ? "#ffffff" : "#1d232b";
}

// Show (or, with "", hide) the one-line error of the view on show.
function showError(message) {
  const box = document.body.classList.contains("generate") ? $("lm-error") : $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

// POST a JSON body; the parsed answer, or an Error with the server's one-line message
// (the API answers {"error": "..."}; FastAPI's default is {"detail": ...}).
async function postJSON(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  let data = null;
  try {
    data = await response.json();
  } catch (err) {
    data = null;
  }
  if (!response.ok) {
    const detail = data && (data.error || data.detail);
    const message = typeof detail === "string" ? detail : `the server answered ${response.status}`;
    throw new Error(message);
  }
  return data;
}

// A number with `digits` decimals, and a real minus sign.
function fixed(value, digits = 4) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (value === -Infinity) return "−∞";
  return value.toFixed(digits).replace("-", "−");
}

// A positive quantity that may be tiny or huge (exp of a score): 4 significant digits.
function sci(value) {
  if (value === 0) return "0";
  if (value >= 1e5 || value < 1e-3) return value.toExponential(3).replace("e", "×10^").replace("+", "");
  return value.toPrecision(4);
}

function percent(prob) {
  const pct = 100 * prob;
  if (pct >= 10) return `${pct.toFixed(1)}%`;
  if (pct >= 0.01) return `${pct.toFixed(2)}%`;
  return "<0.01%";
}

// Subword pieces as text: sentencepiece marks a word start with "▁".
function detokenize(tokens) {
  return tokens.filter((t) => t !== "</s>" && t !== "<s>").join("").replace(/▁/g, " ").trim();
}

// Create an element with attributes (and text / children).
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

// An <option> list 0..count-1 labelled "label 1".., keeping the old choice when it still exists.
function fillSelect(select, count, label, keep, extra) {
  const previous = keep ? select.value : "0";
  select.replaceChildren();
  if (extra) select.append(el("option", { value: extra.value, text: extra.text }));
  for (let i = 0; i < count; i++) {
    select.append(el("option", { value: String(i), text: `${label} ${i + 1}` }));
  }
  const values = Array.from(select.options, (o) => o.value);
  select.value = values.includes(previous) ? previous : values[0];
}

// Next-token bars, one button each, as wide as its probability: the candidates of the
// translation's step-by-step panel and of the generate view. Each item is
// { token, prob, chosen, disabled, title, attrs (extra attributes), onPick (click) }.
function renderBars(list, items) {
  list.replaceChildren(...items.map((item, index) => {
    const fill = el("span", { class: "bar-fill" });
    fill.style.width = `${(100 * item.prob).toFixed(2)}%`;
    const button = el("button", {
      type: "button", class: item.chosen ? "bar chosen" : "bar", "data-index": String(index),
      "data-token": item.token, title: item.title, ...(item.attrs || {}),
    }, el("span", { class: "bar-token", text: item.token }),
    el("span", { class: "bar-track" }, fill),
    el("span", { class: "bar-pct", text: percent(item.prob) }));
    button.disabled = Boolean(item.disabled);
    button.addEventListener("click", item.onPick);
    return el("li", {}, button);
  }));
}
