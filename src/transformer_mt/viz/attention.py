"""Where every head looks: figures of the attention weights of one sentence.

`attention_maps` asks the Translator, which translates the sentence, then runs one
teacher-forced pass with every MultiHeadAttention recorded (model/recording.py):
encoder self-attention, decoder self-attention and cross-attention for every layer and
head. Rows are queries, columns are keys, and every row sums to 1.

Layers and heads are numbered from 1 in figures, the CLI and the web page."""

from __future__ import annotations

import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from transformer_mt.inference.translation_inspection import AttentionMaps
from transformer_mt.inference.translator import Translator
from transformer_mt.viz.figure import new_figure

TITLES = {
    "encoder": "Encoder self-attention",
    "decoder": "Decoder self-attention (masked)",
    "cross": "Cross-attention (decoder looks at the source)",
}


def attention_maps(translator: Translator, sentence: str, **settings: object) -> AttentionMaps:
    """Attention weights of `sentence` and its translation with the translator's own
    decoding settings changed by `settings` (beam=..., see `Translator.attention`)."""
    return translator.attention(sentence, settings=translator.settings(**settings))


def _heatmap(ax: Axes, weights: torch.Tensor, rows: list[str], cols: list[str], fontsize: float) -> object:
    image = ax.imshow(weights.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=fontsize)
    ax.set_yticks(range(len(rows)), rows, fontsize=fontsize)
    return image


def _cell_inches(maps: AttentionMaps) -> float:
    longest = max(len(maps.source), len(maps.target), len(maps.target_in))
    return min(6.0, max(2.6, 0.22 * longest + 1.2))


def attention_grid_figure(maps: AttentionMaps, kind: str) -> Figure:
    """One heatmap per (layer, head) of `kind`: layers are rows, heads are columns."""
    weights = maps.weights(kind)
    rows, cols, row_name, col_name = maps.labels(kind)
    cell, n_layers = _cell_inches(maps), maps.layers(kind)
    fig = new_figure(cell * maps.n_heads + 1.2, cell * n_layers + 1.0,
                     f"{TITLES[kind]}: {n_layers} layers x {maps.n_heads} heads")
    axes = fig.subplots(n_layers, maps.n_heads, squeeze=False)
    fontsize = 7 if max(len(rows), len(cols)) <= 20 else 5
    image = None
    for layer in range(n_layers):
        for head in range(maps.n_heads):
            ax = axes[layer][head]
            image = _heatmap(ax, weights[layer, head], rows, cols, fontsize)
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=9)
            if head == 0:
                ax.set_ylabel(row_name, fontsize=8)
            if layer == n_layers - 1:
                ax.set_xlabel(col_name, fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    return fig


def attention_head_figure(maps: AttentionMaps, kind: str, layer: int, head: int) -> Figure:
    """One large heatmap of `kind` for `layer` and `head` (numbered from 1), with the
    weights written in the cells when the sentence is short."""
    maps.check_layer_head(layer, head, kind=kind)
    weights = maps.weights(kind)[layer - 1, head - 1]
    rows, cols, row_name, col_name = maps.labels(kind)
    side = min(12.0, max(6.0, 0.35 * max(len(rows), len(cols)) + 2.5))
    fig = new_figure(side + 1.0, side, f"{TITLES[kind].split(' (')[0]}, layer {layer}, head {head}")
    ax = fig.subplots()
    image = _heatmap(ax, weights, rows, cols, 9 if max(len(rows), len(cols)) <= 25 else 6)
    ax.set_xlabel(col_name)
    ax.set_ylabel(row_name)
    if max(len(rows), len(cols)) <= 12:
        for r in range(len(rows)):
            for c in range(len(cols)):
                value = float(weights[r, c])
                ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=7,
                        color="black" if value > 0.6 else "white")
    fig.colorbar(image, ax=ax, label="attention weight")
    return fig
