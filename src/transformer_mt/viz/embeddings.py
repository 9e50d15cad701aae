"""The joint subword embeddings of a trained run, projected to two dimensions.

One vocabulary serves source and target (section 5.1) and, with tied weights, the same
matrix is the generator's output projection (section 3.4): pieces the model treats
alike (inflections of a word, digits, punctuation) end up close together."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from transformer_mt.common.specials import SPECIAL_IDS, UNK_ID
from transformer_mt.runs.directory import RunDir, load_run_model, require_ours
from transformer_mt.viz.figure import new_figure


def principal_components(weights: torch.Tensor, k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """The rows of `weights` (V, d) projected on their first k principal components
    (V, k), and the share of the variance each component explains (k,)."""
    centered = weights.double() - weights.double().mean(dim=0)
    _, singular, vh = torch.linalg.svd(centered, full_matrices=False)
    projected = centered @ vh[:k].T  # (V, k)
    variance = singular**2
    return projected.numpy(), (variance[:k] / variance.sum()).numpy()


def labelled_ids(vocab_size: int, count: int, seed: int = 0) -> list[int]:
    """Which pieces get a label: the first half of `count` are the lowest ids (the most
    frequent merges of a BPE vocabulary), the rest drawn at random; specials left out."""
    ordinary = [i for i in range(vocab_size) if i not in SPECIAL_IDS and i != UNK_ID]
    head = ordinary[: count // 2]
    rest = ordinary[count // 2 :]
    drawn = np.random.default_rng(seed).choice(len(rest), size=min(len(rest), count - len(head)), replace=False)
    return head + [rest[i] for i in sorted(drawn.tolist())]


def embeddings_figure(run: str | Path, labels: int = 60, checkpoint: str = "best") -> Figure:
    """Every subword embedding of the run as a point on the first two principal
    components, `labels` of them with their piece."""
    require_ours(RunDir(Path(run)), "the embeddings figure")
    _, tokenizer, model = load_run_model(RunDir(Path(run)), checkpoint, arch="encoder_decoder")
    weights = model.tgt_embed.lut.weight.detach().float()  # (V, d_model)
    points, explained = principal_components(weights)
    fig = new_figure(10, 8, f"Subword embeddings of {Path(run).resolve().name}: {weights.size(0)} pieces, PCA")
    ax = fig.subplots()
    ax.scatter(points[:, 0], points[:, 1], s=6, alpha=0.35, color="tab:blue")
    chosen = labelled_ids(weights.size(0), labels)
    for i, piece in zip(chosen, tokenizer.id_to_piece(chosen)):
        ax.annotate(piece, points[i], fontsize=7, alpha=0.9)
    ax.set_xlabel(f"principal component 1 ({100 * explained[0]:.1f}% of the variance)")
    ax.set_ylabel(f"principal component 2 ({100 * explained[1]:.1f}% of the variance)")
    ax.grid(alpha=0.3)
    return fig
