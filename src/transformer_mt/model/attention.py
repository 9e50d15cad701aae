"""Scaled dot-product attention and multi-head attention (paper sections 3.2.1 and 3.2.2)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from transformer_mt.model.dropout import Dropout
from transformer_mt.model.masks import subsequent_mask

# Per-module incremental state for cached decoding: {"k": (B, H, T, d_k), "v": (B, H, T, d_k)}.
AttentionCache = dict[str, torch.Tensor]


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout: nn.Module | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, written out (equation 1).

    query (B, H, Tq, d_k), key/value (B, H, Tk, d_k), mask broadcastable to (B, H, Tq, Tk)
    with True = may attend. Returns the output (B, H, Tq, d_k) and the weights
    (B, H, Tq, Tk): this is the path that lets us plot where every head looks.
    """
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights


def _linear_of(weight: torch.Tensor, bias: torch.Tensor) -> nn.Linear:
    """A Linear module holding copies of `weight` (out, in) and `bias` (no random init drawn)."""
    linear = nn.utils.skip_init(nn.Linear, weight.size(1), weight.size(0), device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        linear.weight.copy_(weight)
        linear.bias.copy_(bias)
    return linear


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)  (section 3.2.2).

    The h per-head projections are one (3 d_model, d_model) matrix `in_proj` holding
    W^Q, W^K and W^V stacked, as in `torch.nn.MultiheadAttention`: self-attention projects
    Q, K and V in one matrix product, cross-attention projects Q from the decoder and K, V
    from the encoder output ("memory").

    Two paths give the same output: `F.scaled_dot_product_attention` (fast, fused kernels)
    and the explicit `attention` above, used when `store_attention` is set so that the
    weights of the last call are kept in `self.attn` for plotting.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        # Cross-attention's W^Q and [W^K; W^V] as modules of their own: set by `split_in_proj` only.
        self.q_proj: nn.Linear | None = None
        self.kv_proj: nn.Linear | None = None
        self.dropout = Dropout(dropout)
        self.store_attention = False
        self.attn: torch.Tensor | None = None
        self.attn_inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None
        self.head_mask: torch.Tensor | None = None  # (H,) multiplies each head's output: 0 silences it

    def reset_parameters(self) -> None:
        """Xavier-uniform for each of W^Q, W^K, W^V and W^O as separate d x d matrices."""
        for chunk in self.in_proj.weight.data.chunk(3, dim=0):
            nn.init.xavier_uniform_(chunk)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.in_proj.bias)
        nn.init.zeros_(self.out_proj.bias)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        # (B, T, d_model) -> (B, H, T, d_k)
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.d_k).transpose(1, 2)

    def _project(
        self, query: torch.Tensor, memory: torch.Tensor | None, cache: AttentionCache | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V as (B, H, T, d_k); reuses and extends `cache` when decoding step by step."""
        if memory is None:  # self-attention: Q, K, V from the same sequence
            q, k, v = self.in_proj(query).chunk(3, dim=-1)
            q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
            if cache is not None:
                if "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
            return q, k, v
        q = self._split_heads(self._cross_query(query))
        if cache is not None and "k" in cache:  # encoder keys/values: once per sentence
            return q, cache["k"], cache["v"]
        k, v = self._cross_key_value(memory).chunk(2, dim=-1)
        k, v = self._split_heads(k), self._split_heads(v)
        if cache is not None:
            cache["k"], cache["v"] = k, v
        return q, k, v

    def _cross_query(self, x: torch.Tensor) -> torch.Tensor:
        """x W^Q + b^Q for cross-attention: the first d_model rows of in_proj (or q_proj)."""
        if self.q_proj is not None:
            return self.q_proj(x)
        return F.linear(x, self.in_proj.weight[: self.d_model], self.in_proj.bias[: self.d_model])

    def _cross_key_value(self, memory: torch.Tensor) -> torch.Tensor:
        """[K | V] of the encoder output: the last 2 d_model rows of in_proj (or kv_proj)."""
        if self.kv_proj is not None:
            return self.kv_proj(memory)
        return F.linear(memory, self.in_proj.weight[self.d_model :], self.in_proj.bias[self.d_model :])

    def split_in_proj(self) -> None:
        """For a cross-attention module at inference: move W^Q and [W^K; W^V] out of
        in_proj into two Linear modules, `q_proj` and `kv_proj` (the very same products),
        and drop in_proj. Cross-attention slices in_proj's weight, which a quantized
        Linear does not have; int8 quantization (quantize.py) swaps whole modules."""
        d, weight, bias = self.d_model, self.in_proj.weight.detach(), self.in_proj.bias.detach()
        self.q_proj = _linear_of(weight[:d], bias[:d])
        self.kv_proj = _linear_of(weight[d:], bias[d:])
        self.in_proj = None

    def forward(
        self,
        query: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        cache: AttentionCache | None = None,
    ) -> torch.Tensor:
        """query (B, Tq, d_model); memory (B, Tk, d_model) for cross-attention, None for
        self-attention; mask broadcastable to (B, H, Tq, Tk), True = may attend;
        `is_causal` adds the subsequent mask. Returns (B, Tq, d_model)."""
        q, k, v = self._project(query, memory, cache)
        if is_causal and q.size(2) == 1:
            is_causal = False  # one query, the newest position: every key is in its past
        # The written-out path keeps the weights for plots and, in CPU training, drops them
        # out with the cheap mask of `Dropout` (SDPA's CPU dropout draws one bernoulli each).
        explicit = self.store_attention or (self.training and self.dropout.p > 0 and q.device.type == "cpu")
        if is_causal and (mask is not None or k.size(2) != q.size(2) or explicit):
            past = k.size(2) - q.size(2)  # keys already in the cache precede the queries
            causal = subsequent_mask(k.size(2), q.device)[..., past:, :]
            mask = causal if mask is None else mask & causal
            is_causal = False
        if explicit:
            x, weights = attention(q, k, v, mask, self.dropout if self.training else None)
            if self.store_attention:
                self.attn = weights
                self.attn_inputs = (q, k, mask)  # what equation 1 was computed from, for explanations
        else:
            x = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=is_causal,
                dropout_p=self.dropout.p if self.training else 0.0,
            )
        if self.head_mask is not None:  # head ablation (Michel et al. 2019)
            x = x * self.head_mask.to(x.dtype).view(1, -1, 1, 1)
        # (B, H, Tq, d_k) -> (B, Tq, d_model)
        x = x.transpose(1, 2).reshape(query.size(0), query.size(1), self.d_model)
        return self.out_proj(x)
