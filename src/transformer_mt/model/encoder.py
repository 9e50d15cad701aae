"""The encoder: a stack of N identical layers (section 3.1)."""

from __future__ import annotations

import torch
from torch import nn

from transformer_mt.model.attention import MultiHeadAttention
from transformer_mt.model.layers import PositionwiseFeedForward, SublayerConnection, layer_norm


class EncoderLayer(nn.Module):
    """Self-attention, then a feed-forward network, each wrapped in a SublayerConnection."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, norm_first: bool = True,
                 activation: str = "relu", attention_dropout: float | None = None,
                 activation_dropout: float | None = None, norm: str = "pytorch") -> None:
        """`dropout` on each sub-layer output; `attention_dropout` on the attention weights and
        `activation_dropout` between W_1 and W_2, each `dropout` when None; `norm` the
        LayerNorm (layers.layer_norm)."""
        super().__init__()
        attention_p = dropout if attention_dropout is None else attention_dropout
        activation_p = dropout if activation_dropout is None else activation_dropout
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_p)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, activation_p, activation)
        self.sublayer = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first, norm) for _ in range(2))

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        x = self.sublayer[0](x, lambda y: self.self_attn(y, mask=src_mask))
        return self.sublayer[1](x, self.feed_forward)


class Encoder(nn.Module):
    """N EncoderLayers; with pre-norm a final LayerNorm normalises the last layer's output."""

    def __init__(self, layer_args: dict, n_layers: int, norm_first: bool = True) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(norm_first=norm_first, **layer_args) for _ in range(n_layers)
        )
        self.norm = layer_norm(layer_args["d_model"], layer_args["norm"]) if norm_first else nn.Identity()

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        """x (B, S, d_model), src_mask (B, 1, 1, S) -> (B, S, d_model)."""
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x)
