"""What each attention head does over a run's validation set: how spread out its
attention is (entropy), and how much the translations lose when it alone is silenced.

Voita et al. (2019) and Michel et al. (2019) found, on MT Transformers, that a few heads
do most of the work (often ones that attend sharply: to the previous or next token, to
rare words, to the aligned source word) while many can be removed with little loss."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from matplotlib import patheffects
from matplotlib.figure import Figure

from transformer_mt.data.corpus import read_parallel
from transformer_mt.common.specials import BOS_ID, PAD_ID
from transformer_mt.common.evaluation import score
from transformer_mt.inference.translation_inspection import ATTENTION_KINDS
from transformer_mt.model.masks import padding_mask
from transformer_mt.model.recording import ablate_heads
from transformer_mt.runs.directory import RunDir, require_ours
from transformer_mt.inference.translator import Translator
from transformer_mt.viz.figure import new_figure


@dataclass(frozen=True)
class HeadStats:
    """Per kind (encoder, decoder, cross): the mean entropy in nats of each head's
    attention rows (L, H), and, after ablation, the BLEU change when the head alone is
    silenced (L, H); `baseline` is the BLEU with every head."""

    entropy: dict[str, np.ndarray]
    bleu_change: dict[str, np.ndarray] | None = None
    baseline: float | None = None


def validation_pairs(run: str | Path, limit: int) -> tuple[list[str], list[str]]:
    """Up to `limit` validation pairs of a run (its generated task's, or data.valid_*)."""
    corpus = read_parallel(*RunDir(Path(run)).require().text_files(("valid",)))
    return corpus.src[:limit], corpus.tgt[:limit]


def _modules(translator: Translator, kind: str) -> list[torch.nn.Module]:
    return translator.model.attention_layers()[kind]


@torch.inference_mode()
def head_entropies(translator: Translator, sources: list[str], references: list[str]) -> dict[str, np.ndarray]:
    """Mean entropy -sum p log p of every head's attention rows, teacher-forced along the
    references, one sentence at a time (no padding rows or keys enter the mean)."""
    totals = {kind: 0.0 for kind in ATTENTION_KINDS}
    rows = {kind: 0 for kind in ATTENTION_KINDS}
    model, tokenizer = translator.model, translator.tokenizer
    longest = translator.max_source
    with model.recorded_attention([m for kind in ATTENTION_KINDS for m in _modules(translator, kind)]) as recorded:
        for src_ids, tgt_ids in zip(tokenizer.encode(sources), tokenizer.encode_target(references)):
            src = torch.tensor([translator.encoder_input(src_ids)], device=translator.device)
            tgt_in = torch.tensor([[BOS_ID] + tgt_ids[:longest]], device=translator.device)
            model(src, tgt_in, padding_mask(src, PAD_ID))
            for kind in ATTENTION_KINDS:
                weights = torch.stack([recorded.weights(m)[0].float() for m in _modules(translator, kind)])
                entropy = -(weights * weights.clamp_min(1e-12).log()).sum(-1)  # (L, H, Tq) of (L, H, Tq, Tk)
                totals[kind] = totals[kind] + entropy.sum(-1).cpu().numpy()
                rows[kind] += weights.size(2)
    return {kind: totals[kind] / max(rows[kind], 1) for kind in ATTENTION_KINDS}


def head_ablation(
    translator: Translator, sources: list[str], references: list[str], tokenize: str = "13a"
) -> tuple[float, dict]:
    """Validation BLEU (sacreBLEU, `tokenize`) with every head, and its change when each
    head alone is silenced (its output multiplied by 0 before W^O), per kind as (L, H)."""
    baseline = score(translator.translate(sources), references, tokenize=tokenize).bleu
    changes = {}
    for kind in ATTENTION_KINDS:
        modules = _modules(translator, kind)
        change = np.zeros((len(modules), modules[0].n_heads))
        for layer, module in enumerate(modules):
            for head in range(module.n_heads):
                with ablate_heads(module, [head]):
                    bleu = score(translator.translate(sources), references, tokenize=tokenize).bleu
                change[layer, head] = bleu - baseline
        changes[kind] = change
    return baseline, changes


def head_stats(
    run: str | Path, sentences: int = 200, ablate: bool = False, device: str = "cpu", tokenize: str | None = None
) -> HeadStats:
    """Entropy (and, with `ablate`, BLEU changes, with `tokenize` or the run's data.bleu_tokenize)
    of every head of a run's best weights."""
    if ablate:
        require_ours(RunDir(Path(run)), "silencing one head (--ablate)")
    translator = Translator.from_run(run, device=device)
    sources, references = validation_pairs(run, sentences)
    entropy = head_entropies(translator, sources, references)
    if not ablate:
        return HeadStats(entropy)
    tokenize = tokenize or RunDir(Path(run)).read_config().data.bleu_tokenize
    baseline, changes = head_ablation(translator, sources, references, tokenize)
    return HeadStats(entropy, changes, baseline)


def heads_figure(stats: HeadStats, name: str) -> Figure:
    """One heatmap per kind: entropy (low = sharp), and the BLEU change of ablation below."""
    panels = 2 if stats.bleu_change is not None else 1
    fig = new_figure(15, 4.5 * panels, f"Attention heads of {name}")
    axes = fig.subplots(panels, len(ATTENTION_KINDS), squeeze=False)
    for column, kind in enumerate(ATTENTION_KINDS):
        _panel(fig, axes[0][column], stats.entropy[kind], f"{kind}: mean entropy (nats)", "viridis_r", "{:.2f}")
        if stats.bleu_change is not None:
            change = stats.bleu_change[kind]
            bound = max(float(np.abs(change).max()), 1e-6)
            _panel(fig, axes[1][column], change, f"{kind}: BLEU change without the head "
                   f"(all heads: {stats.baseline:.1f})", "RdBu", "{:+.1f}", (-bound, bound))
    return fig


def _panel(fig: Figure, ax, values: np.ndarray, title: str, cmap: str, text: str, limits=None) -> None:
    vmin, vmax = limits if limits else (None, None)
    image = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(values.shape[1]), [str(h + 1) for h in range(values.shape[1])])
    ax.set_yticks(range(values.shape[0]), [str(layer + 1) for layer in range(values.shape[0])])
    outline = [patheffects.withStroke(linewidth=2, foreground="white")]  # readable on any colour
    for (row, col), value in np.ndenumerate(values):
        ax.text(col, row, text.format(value), ha="center", va="center", fontsize=8, path_effects=outline)
    fig.colorbar(image, ax=ax, shrink=0.8)
