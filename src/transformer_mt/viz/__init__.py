"""Figures (matplotlib, Agg) of every mechanism of the model and of a trained run:
positional encodings, masks, learning-rate schedule, label smoothing, training curves and
attention heatmaps. Each `*_figure` function returns a Figure; `save_figure` writes it as
PNG or SVG.

    viz/figure.py          what every figure shares: the Agg backend, a fixed size, saving
    viz/mechanisms.py      positional encodings, masks, the learning-rate schedule, label smoothing
    viz/curves.py          training curves from a run's metrics.jsonl
    viz/attention.py       where every head looks in one sentence
    viz/heads.py           each head's entropy over a validation set, and what silencing it costs
    viz/embeddings.py      the subword embeddings projected to two dimensions
    viz/language_model.py  a language-model run's perplexity against the unigram baseline, and samples
"""

from transformer_mt.inference.translation_inspection import ATTENTION_KINDS as KINDS
from transformer_mt.viz.attention import (
    AttentionMaps,
    attention_grid_figure,
    attention_head_figure,
    attention_maps,
)
from transformer_mt.viz.curves import curves_figure, read_metrics
from transformer_mt.viz.embeddings import embeddings_figure, principal_components
from transformer_mt.viz.heads import HeadStats, head_entropies, head_stats, heads_figure
from transformer_mt.viz.figure import DPI, new_figure, pixel_size, save_figure
from transformer_mt.viz.mechanisms import (
    PieceBatch,
    encoding_similarity,
    encoding_similarity_figure,
    encodings_figure,
    mask_batch,
    masks_figure,
    schedule_figure,
    smoothing_figure,
)

__all__ = [
    "DPI", "KINDS", "AttentionMaps", "PieceBatch", "attention_grid_figure", "attention_head_figure",
    "attention_maps", "curves_figure", "embeddings_figure", "encoding_similarity", "encoding_similarity_figure",
    "principal_components", "HeadStats", "head_entropies", "head_stats", "heads_figure", "encodings_figure", "mask_batch", "masks_figure", "new_figure", "pixel_size",
    "read_metrics", "save_figure", "schedule_figure", "smoothing_figure",
]
