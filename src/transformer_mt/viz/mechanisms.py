"""Figures of the paper's mechanisms, drawn from the functions the model and its training
use: positional encodings, attention masks (model/), the learning-rate schedule and label
smoothing (common/paper_equations.py, which training builds on)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from transformer_mt.data.corpus import read_lines
from transformer_mt.data.toy_corpora import number_pair
from transformer_mt.model.embeddings import sinusoidal_encoding
from transformer_mt.model.masks import padding_mask, subsequent_mask
from transformer_mt.common.paper_equations import rate, smoothed_distribution
from transformer_mt.runs.directory import RunDir
from transformer_mt.viz.figure import new_figure

PAD_PIECE = "<pad>"
MASK_COLORS = "Greens"


def encodings_figure(d_model: int = 64, positions: int = 100, dims: Sequence[int] = (4, 5, 6, 7)) -> Figure:
    """The sinusoidal table (positions x dimensions) and a few dimensions as curves:
    each pair of dimensions (2i, 2i+1) is a sine and a cosine of one wavelength."""
    pe = sinusoidal_encoding(positions, d_model).numpy()  # (positions, d_model)
    fig = new_figure(12, 4.8, f"Sinusoidal positional encoding (d_model = {d_model})")
    heat, curves = fig.subplots(1, 2, width_ratios=[1.1, 1])
    image = heat.imshow(pe, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, origin="upper")
    heat.set_xlabel("dimension i of the encoding")
    heat.set_ylabel("position in the sentence")
    heat.set_title("PE(pos, i): sin on even i, cos on odd i")
    fig.colorbar(image, ax=heat, label="value")
    for dim in dims:
        if dim >= d_model:
            continue
        kind = "sin" if dim % 2 == 0 else "cos"
        curves.plot(np.arange(positions), pe[:, dim], label=f"dim {dim} ({kind})")
    curves.set_xlabel("position in the sentence")
    curves.set_ylabel("encoding value")
    curves.set_title("A few dimensions over positions")
    curves.set_ylim(-1.1, 1.1)
    curves.legend(loc="lower right", fontsize=8)
    curves.grid(alpha=0.3)
    return fig


def encoding_similarity(d_model: int, positions: int) -> np.ndarray:
    """(positions, positions) dot products PE(p) . PE(q) of the sinusoidal encodings.

    Each pair of dimensions contributes sin(w p) sin(w q) + cos(w p) cos(w q) = cos(w (p - q)),
    so the dot product depends on the distance p - q alone. (The paper's own reason for
    sinusoids, section 3.5, is that PE(pos + k) is a linear function of PE(pos): each pair
    of dimensions is rotated by the angle w k. This figure is our illustration of it.)"""
    pe = sinusoidal_encoding(positions, d_model).double()  # (positions, d_model)
    return (pe @ pe.T).numpy()


def encoding_similarity_figure(d_model: int = 64, positions: int = 100, starts: Sequence[int] = (0, 20, 50)) -> Figure:
    """The dot product of the encodings of every pair of positions, and PE(p) . PE(p + k)
    against the distance k for a few p: the curves lie on top of each other."""
    similarity = encoding_similarity(d_model, positions)
    fig = new_figure(12, 4.8, f"Dot products of positional encodings (d_model = {d_model})")
    heat, curves = fig.subplots(1, 2, width_ratios=[1.1, 1])
    image = heat.imshow(similarity, cmap="viridis", origin="upper")
    heat.set_xlabel("position q")
    heat.set_ylabel("position p")
    heat.set_title("PE(p) . PE(q): constant along every diagonal")
    fig.colorbar(image, ax=heat, label="dot product")
    for start in starts:
        if start < positions:
            distance = np.arange(positions - start)
            curves.plot(distance, similarity[start, start:], label=f"p = {start}")
    curves.set_xlabel("distance k = q - p")
    curves.set_ylabel("PE(p) . PE(p + k)")
    curves.set_title("The same curve from every start: only k matters")
    curves.legend(loc="upper right", fontsize=8)
    curves.grid(alpha=0.3)
    return fig


@dataclass(frozen=True)
class PieceBatch:
    """Sentences as subword strings (each ending with its eos), to show how padding masks."""

    sentences: list[list[str]]

    def padded(self) -> list[list[str]]:
        width = max(len(s) for s in self.sentences)
        return [s + [PAD_PIECE] * (width - len(s)) for s in self.sentences]

    def ids(self) -> torch.Tensor:
        """(B, S): 1 for a real piece, 0 for padding (enough for `padding_mask`)."""
        return torch.tensor([[int(p != PAD_PIECE) for p in row] for row in self.padded()])


def mask_batch(run: str | Path | None, size: int) -> PieceBatch:
    """`size` sentences of a run's validation (or training) source as its subwords, or
    without a run, number phrases split into words."""
    if run is None:
        numbers = (7, 342, 90018, 21, 600, 1999, 55, 4)
        return PieceBatch([number_pair(n)[0].split() + ["</s>"] for n in (numbers * size)[:size]])
    run_dir = RunDir(Path(run)).require()
    source, _ = run_dir.text_files(("valid", "train"))
    lines = [line for line in read_lines(source)[: 50 * size] if line.strip()][:size]
    tokenizer = run_dir.read_tokenizer()
    return PieceBatch([tokenizer.pieces(line)[:40] + ["</s>"] for line in lines])


def _mask_panel(ax: Axes, mask: np.ndarray, title: str, xlabel: str, ylabel: str) -> None:
    ax.imshow(mask, cmap=MASK_COLORS, vmin=0, vmax=1.4, aspect="auto")
    rows, cols = mask.shape
    ax.set_xticks(np.arange(cols + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(rows + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def _label_cells(ax: Axes, labels: list[list[str]], mask: np.ndarray) -> None:
    narrow = len(labels[0]) > 12
    for row, pieces in enumerate(labels):
        for col, piece in enumerate(pieces):
            color = "black" if mask[row, col] else "gray"
            ax.text(col, row, piece, ha="center", va="center", fontsize=6 if narrow else 8, color=color,
                    rotation=90 if narrow else 0)


def masks_figure(batch: PieceBatch) -> Figure:
    """Three masks, green = may attend: the decoder's subsequent mask, the padding mask
    of `batch` (source side, as the encoder and the cross-attention see it), and both
    combined for the shortest sentence of the batch (the decoder's self-attention mask)."""
    padded = batch.padded()
    width = len(padded[0])
    tokens = batch.ids()
    pad = padding_mask(tokens, 0)[:, 0, 0, :].numpy()  # (B, S)
    causal = subsequent_mask(width)[0, 0].numpy()  # (T, T)
    shortest = int(tokens.sum(1).argmin())
    combined = (padding_mask(tokens[shortest : shortest + 1], 0) & subsequent_mask(width))[0, 0].numpy()
    fig = new_figure(15, 5, "Attention masks (green = may attend, pale = masked: set to -inf before the softmax)")
    left, middle, right = fig.subplots(1, 3, width_ratios=[1, 1.6, 1])
    _mask_panel(left, causal, f"Subsequent mask ({width} x {width})", "key position j", "query position i")
    _mask_panel(middle, pad, f"Padding mask of a batch of {len(padded)}", "key position (subword)", "sentence in the batch")
    _label_cells(middle, padded, pad)
    middle.set_yticks(range(len(padded)), [str(i + 1) for i in range(len(padded))])
    middle.set_xticks(range(width), [str(i) for i in range(width)])
    _mask_panel(right, combined, f"Decoder mask of sentence {shortest + 1}", "key subword", "query subword")
    labels = padded[shortest]
    right.set_xticks(range(width), labels, rotation=90, fontsize=7)
    right.set_yticks(range(width), labels, fontsize=7)
    return fig


SCHEDULE_PAIRS = ((512, 4000), (512, 8000), (256, 4000))


def _schedule_axes(ax: Axes, title: str) -> None:
    ax.set_xlabel("training step")
    ax.set_ylabel("learning rate")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()


def schedule_figure(
    pairs: Sequence[tuple[int, int]] = SCHEDULE_PAIRS,
    config: tuple[int, int, float, str] | None = None,
    steps: int = 20000,
) -> Figure:
    """The learning rate d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) over steps for
    several (d_model, warmup) pairs; `config` = (d_model, warmup, scale, name) adds a
    second panel with the schedule of one configuration (its own scale, often far from
    the paper's)."""
    fig = new_figure(14 if config else 10, 5, "Learning-rate schedule (paper equation 3)")
    axes = fig.subplots(1, 2 if config else 1, squeeze=False)[0]
    x = np.arange(1, steps + 1)
    for d_model, warmup in pairs:
        axes[0].plot(x, [rate(s, d_model, warmup) for s in x], label=f"d_model={d_model}, warmup={warmup}")
    _schedule_axes(axes[0], "Linear warmup, then decay with 1/sqrt(step)")
    if config is not None:
        d_model, warmup, scale, name = config
        axes[1].plot(x, [rate(s, d_model, warmup, scale) for s in x], color="black", linewidth=2,
                     label=f"d_model={d_model}, warmup={warmup}, scale={scale:g}")
        axes[1].axvline(warmup, color="gray", linestyle=":", linewidth=1, label="end of warmup")
        _schedule_axes(axes[1], f"The schedule of {name}")
    return fig


def smoothing_figure(epsilon: float = 0.1, vocab_size: int = 8, targets: Sequence[int] = (2, 1, 0, 3, 5)) -> Figure:
    """The smoothed target distribution of a few tokens, one row in detail, and the loss
    against the probability a model gives the right token: with smoothing the loss is
    lowest at 1 - epsilon, so the model is not pushed to infinite confidence."""
    target = torch.tensor([t % vocab_size for t in targets])
    dist = smoothed_distribution(target, vocab_size, epsilon).numpy()  # (N, V)
    fig = new_figure(15, 4.8, f"Label smoothing (epsilon = {epsilon:g}, vocabulary of {vocab_size})")
    heat, bars, loss = fig.subplots(1, 3)
    image = heat.imshow(dist, cmap="Blues", vmin=0, vmax=1, aspect="auto")
    heat.set_xlabel("vocabulary id")
    heat.set_ylabel("target token of the example")
    heat.set_yticks(range(len(target)), [f"target {t}" for t in target.tolist()])
    heat.set_title("Target distribution per example")
    fig.colorbar(image, ax=heat, label="probability")
    bars.bar(range(vocab_size), dist[0], color="tab:blue")
    bars.set_xlabel("vocabulary id")
    bars.set_ylabel("target probability")
    bars.set_title(f"Example 1: {1 - epsilon:g} on id {int(target[0])}, "
                   f"{epsilon / (vocab_size - 1):.3g} on each other")
    confidence = np.linspace(0.02, 0.999, 300)
    for eps, style in ((epsilon, "-"), (0.0, "--")):
        other = (1 - confidence) / (vocab_size - 1)
        cross_entropy = -((1 - eps) * np.log(confidence) + eps * np.log(other))
        loss.plot(confidence, cross_entropy, style, label=f"epsilon = {eps:g}")
    loss.axvline(1 - epsilon, color="gray", linestyle=":", linewidth=1)
    loss.set_xlabel("probability the model gives the right token")
    loss.set_ylabel("cross entropy against the target")
    loss.set_title("Loss is lowest at 1 - epsilon")
    loss.legend()
    loss.grid(alpha=0.3)
    return fig
