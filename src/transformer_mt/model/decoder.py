"""The decoder: a stack of N identical layers with a third, cross-attention sub-layer
(section 3.1). Its incremental state for step-by-step decoding is a `DecoderCache`.

Without cross-attention (`cross_attention=False`) the same layers make a GPT-style
language model (model/language_model.py): masked self-attention and the feed-forward
network, nothing to attend to but the past."""

from __future__ import annotations

import torch
from torch import nn

from transformer_mt.model.attention import MultiHeadAttention
from transformer_mt.model.cache import DecoderCache, LayerCache
from transformer_mt.model.layers import PositionwiseFeedForward, SublayerConnection, layer_norm


class DecoderLayer(nn.Module):
    """Masked self-attention, attention over the encoder output (unless `cross_attention`
    is False: a decoder-only model), feed-forward."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, norm_first: bool = True,
                 activation: str = "relu", attention_dropout: float | None = None,
                 activation_dropout: float | None = None, cross_attention: bool = True,
                 norm: str = "pytorch") -> None:
        """`dropout` on each sub-layer output; `attention_dropout` on the attention weights and
        `activation_dropout` between W_1 and W_2, each `dropout` when None; `norm` the
        LayerNorm (layers.layer_norm)."""
        super().__init__()
        attention_p = dropout if attention_dropout is None else attention_dropout
        activation_p = dropout if activation_dropout is None else activation_dropout
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_p)
        self.src_attn = MultiHeadAttention(d_model, n_heads, attention_p) if cross_attention else None
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, activation_p, activation)
        n_sublayers = 3 if cross_attention else 2
        self.sublayer = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first, norm)
                                      for _ in range(n_sublayers))

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None,
        src_mask: torch.Tensor | None,
        tgt_mask: torch.Tensor | None,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        self_cache = cross_cache = None
        if cache is not None:
            self_cache, cross_cache = cache.self_attn, cache.cross_attn
        x = self.sublayer[0](
            x, lambda y: self.self_attn(y, mask=tgt_mask, is_causal=True, cache=self_cache)
        )
        if self.src_attn is not None:
            x = self.sublayer[1](x, lambda y: self.src_attn(y, memory, mask=src_mask, cache=cross_cache))
        return self.sublayer[-1](x, self.feed_forward)


class Decoder(nn.Module):
    """N DecoderLayers; with pre-norm a final LayerNorm normalises the last layer's output."""

    def __init__(self, layer_args: dict, n_layers: int, norm_first: bool = True, cross_attention: bool = True) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(norm_first=norm_first, cross_attention=cross_attention, **layer_args) for _ in range(n_layers)
        )
        self.norm = layer_norm(layer_args["d_model"], layer_args["norm"]) if norm_first else nn.Identity()
        self.cross_attention = cross_attention

    def init_cache(self) -> DecoderCache:
        """An empty incremental state: filled by `forward(..., cache=...)` one step at a time."""
        return DecoderCache(len(self.layers), self.cross_attention)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None,
        src_mask: torch.Tensor | None,
        tgt_mask: torch.Tensor | None = None,
        cache: DecoderCache | None = None,
    ) -> torch.Tensor:
        """x (B, T, d_model) embedded target; memory (B, S, d_model) (None without
        cross-attention); src_mask (B, 1, 1, S);
        tgt_mask (B, 1, T, T) or None (then the subsequent mask alone, which is exact for
        right-padded targets). With `cache`, x holds only the new positions."""
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, src_mask, tgt_mask, None if cache is None else cache[i])
        return self.norm(x)
