"""Position-wise feed-forward network and the residual sub-layer connection (section 3.3, 5.4)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from transformer_mt.model.dropout import Dropout


# The non-linearity between W_1 and W_2: the paper's ReLU, or swish (SiLU, x * sigmoid(x):
# OPUS-MT's Marian models), the exact (erf) GELU, as Hugging Face's "swish" and "gelu", or
# GPT-2's GELU with the tanh approximation (Hugging Face's "gelu_new").
ACTIVATION_FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu, "swish": F.silu, "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2  (equation 2), applied to each position;
    `activation` swish or gelu replaces max(0, .). `dropout` drops the inner activation
    in training (`model.activation_dropout`, by default `model.dropout`); the paper has none
    there."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)
        if activation not in ACTIVATION_FUNCTIONS:
            raise ValueError(f"activation must be one of {', '.join(ACTIVATION_FUNCTIONS)}, got {activation!r}")
        self.activation = activation
        self.act = ACTIVATION_FUNCTIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.dropout(self.act(self.w_1(x))))


class AnnotatedLayerNorm(nn.Module):
    """The Annotated Transformer's layer normalisation (and the study notes' copy of it):

        LayerNorm(x) = a_2 * (x - mean) / (std + eps) + b_2

    over the last dimension, with the unbiased std (dividing by d_model - 1) and eps 1e-6
    added to the std, not inside the square root. nn.LayerNorm divides by sqrt(var + 1e-5)
    with the biased variance: the two differ by about 1 / (2 d_model) of the output, enough
    that an imported checkpoint's logits are not theirs with the other. The gain and bias
    are named `weight` and `bias`, as nn.LayerNorm's (their a_2 and b_2), so every other
    part of the package reads them alike. Computed in float32 under bf16 autocast."""

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        mean, std = y.mean(-1, keepdim=True), y.std(-1, keepdim=True)  # (..., 1) each; std unbiased
        return (self.weight * (y - mean) / (std + self.eps) + self.bias).to(x.dtype)


def layer_norm(d_model: int, kind: str = "pytorch") -> nn.Module:
    """The layer normalisation model.layer_norm names: "pytorch" (nn.LayerNorm) or
    "annotated" (AnnotatedLayerNorm)."""
    if kind == "annotated":
        return AnnotatedLayerNorm(d_model)
    if kind != "pytorch":
        raise ValueError(f"layer_norm must be 'pytorch' or 'annotated', got {kind!r}")
    return nn.LayerNorm(d_model)


class SublayerConnection(nn.Module):
    """A residual connection around a sub-layer, with layer normalisation and dropout.

    norm_first=False is the paper's post-norm:  LayerNorm(x + Dropout(Sublayer(x)))
    norm_first=True is the pre-norm of the Annotated Transformer: x + Dropout(Sublayer(LayerNorm(x))),
    which trains more stably without a long warmup (the stack then ends with a LayerNorm).
    `norm` names the LayerNorm (see `layer_norm`).
    """

    def __init__(self, d_model: int, dropout: float, norm_first: bool = True, norm: str = "pytorch") -> None:
        super().__init__()
        self.norm = layer_norm(d_model, norm)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))
