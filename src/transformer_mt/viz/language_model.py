"""What a language-model run learned, in one figure: validation perplexity over training
steps against the unigram baseline (a model that ignores context), and what its lines are
worth when it writes them itself."""

from __future__ import annotations

from matplotlib.figure import Figure

from transformer_mt.viz.curves import Series
from transformer_mt.viz.figure import new_figure


def learning_figure(valid_ppl: Series, unigram_ppl: float, shares: dict[str, float], name: str) -> Figure:
    """Left: validation perplexity (log scale) by step, the unigram perplexity as a line.
    Right: bars of `shares` (0-1, for example the share of held-out prompts completed
    correctly and of sampled lines that are well-formed)."""
    fig = new_figure(11, 4.2, f"What {name} learned")
    curve, bars = fig.subplots(1, 2, width_ratios=[3, 2])
    curve.plot(valid_ppl.steps, valid_ppl.values, marker="o", markersize=3, label="the model (validation)")
    curve.axhline(unigram_ppl, color="gray", linestyle="--", label=f"unigram baseline ({unigram_ppl:.1f})")
    curve.axhline(1.0, color="black", linewidth=0.5)
    curve.set_yscale("log")
    curve.set_xlabel("training step")
    curve.set_ylabel("perplexity per token")
    curve.set_title("Validation perplexity")
    curve.grid(alpha=0.3)
    curve.legend(fontsize=8)
    labels, values = list(shares), [100 * v for v in shares.values()]
    drawn = bars.bar(range(len(values)), values, color=["tab:blue", "tab:green", "tab:orange"][: len(values)])
    bars.bar_label(drawn, labels=[f"{v:.1f}%" for v in values])
    bars.set_xticks(range(len(values)), labels, fontsize=8)
    bars.set_ylim(0, 105)
    bars.set_ylabel("%")
    bars.set_title("Its own lines")
    return fig
