"""Checks of the weights alone, so they work before the first step too: embedding_scale,
cloned_init, tied_scale."""

from __future__ import annotations

import torch

from transformer_mt.common.specials import PAD_ID
from transformer_mt.diagnosis import thresholds
from transformer_mt.diagnosis.case import Case
from transformer_mt.diagnosis.finding import Finding, cost
from transformer_mt.model.attention import MultiHeadAttention
from transformer_mt.model.embeddings import Embeddings
from transformer_mt.model.layers import PositionwiseFeedForward
from transformer_mt.model.measures import EmbeddingToPosition, embedding_to_position, near_copies, rms

CHECK = "transformer-mt check FILE:make_model"  # checks the learner's own code before any training


def added(embed: Embeddings, positions: torch.Tensor) -> EmbeddingToPosition:
    """A token embedding as the model adds it to the positions (times sqrt(d_model) where it
    scales), the padding row left out, against the positions' RMS."""
    rows = torch.ones(embed.lut.num_embeddings, dtype=torch.bool)
    rows[PAD_ID] = False
    return embedding_to_position(embed.lut.weight[rows], embed.scale, positions)


def embedding_scale(case: Case) -> Finding | None:
    """The token embeddings as added over the positional encoding, both as RMS (section 3.4
    scales by sqrt(d_model) so that the two are of one size), as the model was initialised
    (Case.initial_model)."""
    case.need_ours("embedding_scale")
    model = case.initial_model
    table = model.positional.table()[:256]
    sides = {"source": added(model.src_embed, table), "target": added(model.tgt_embed, table)}
    side, measured = max(sides.items(), key=lambda item: item[1].ratio)
    largest, positions, ratio = measured.added, measured.positions, measured.ratio
    case.measured["embedding_scale"] = ratio
    if ratio <= thresholds.EMBEDDING_SCALE.value:
        return None
    scaled = f"times sqrt(d_model) = {model.src_embed.scale:.1f}, " if model.src_embed.scale != 1 else ""
    return Finding(
        "embedding_scale", round(ratio, 2), thresholds.EMBEDDING_SCALE.value,
        f"the {side} embeddings as the model adds them ({scaled}RMS {largest:.2f}) are {ratio:.1f} times the "
        f"positional encoding (RMS {positions:.2f}): the positions are {measured.position_share:.1%} of the sum, so "
        "the model barely sees word order",
        f"--model.init=xavier (or --model.embedding_init=normal with it); your own code: `{CHECK}` (its "
        "embedding_init check) says where and how to re-draw the weights",
        cost("+xavier", "+unscaled_embedding"))


def weight_matrices(case: Case) -> dict[str, torch.Tensor]:
    """Every projection the layers draw: W^Q, W^K, W^V and W^O of each attention, W_1 and
    W_2 of each feed-forward network, by name; of a learner's model, every matrix (tied ones once)."""
    if case.cfg.model.file:
        return {name: p for name, p in case.model.named_parameters() if p.dim() == 2}
    found = {}
    for name, module in case.model.named_modules():
        if isinstance(module, MultiHeadAttention):
            for part, matrix in zip(("W^Q", "W^K", "W^V"), module.in_proj.weight.chunk(3, dim=0)):
                found[f"{name} {part}"] = matrix
            found[f"{name} W^O"] = module.out_proj.weight
        elif isinstance(module, PositionwiseFeedForward):
            found[f"{name} W_1"], found[f"{name} W_2"] = module.w_1.weight, module.w_2.weight
    return found


def cloned_init(case: Case) -> Finding | None:
    """Weight matrices that are copies of each other: what copy.deepcopy of one module into
    many gives when nothing re-draws them (the notes' make_model: clones() and c(attn))."""
    matrices = weight_matrices(case)
    pairs = near_copies(matrices, thresholds.CLONED.value)
    case.measured["cloned_init"] = pairs[0][0] if pairs else 0.0  # the largest correlation, where at the limit
    if not pairs:
        return None
    copied = {name for _, a, b in pairs for name in (a, b)}
    top, a, b = pairs[0]
    return Finding(
        "cloned_init", round(top, 4), thresholds.CLONED.value,
        f"{len(copied)} of {len(matrices)} weight matrices are near copies of another ({len(pairs)} pairs, "
        f"correlation up to {top:.3f}: {a} and {b}); deep copies of one module that nothing re-drew start as "
        "one function, and training must first pull them apart",
        ("" if case.cfg.model.file else "--model.init=xavier; ") + f"your own code: `{CHECK}` (its cloned_init check) "
        "names the copies and how to re-draw them")


def tied_scale(case: Case) -> Finding | None:
    """The spread of the logits a tied output layer starts from: sqrt(d_model) times the
    RMS of the embedding it shares, for final states of unit RMS (after the LayerNorm)."""
    case.need_ours("tied_scale")
    model = case.initial_model
    if model.generator.proj.weight is not model.tgt_embed.lut.weight:
        return None
    spread = case.measured["tied_scale"] = rms(model.tgt_embed.lut.weight) * model.tgt_embed.d_model ** 0.5
    if spread <= thresholds.TIED_SCALE.value:
        return None
    return Finding(
        "tied_scale", round(spread, 2), thresholds.TIED_SCALE.value,
        f"the output layer shares an embedding of RMS {rms(model.tgt_embed.lut.weight):.2f}: its logits start with "
        f"a standard deviation of {spread:.1f}, so the first softmax is nearly one-hot on random tokens and the "
        "loss starts far above log(V)",
        "--model.init=xavier, or --model.embedding_init=normal (N(0, 1/d_model)), or --model.tie_embeddings=false",
        cost("+tied"))
