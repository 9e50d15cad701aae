"""Scaled dot-product attention and multi-head attention (paper sections 3.2.1 and 3.2.2)."""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.hooks import RemovableHandle

from transformer_mt.model.cache import KeyValueCache
from transformer_mt.model.dropout import Dropout
from transformer_mt.model.masks import subsequent_mask

# Sees (module, weights (B, H, Tq, Tk), q (B, H, Tq, d_k), k (B, H, Tk, d_k), mask) of each call.
WeightsHook = Callable[["MultiHeadAttention", torch.Tensor, torch.Tensor, torch.Tensor, "torch.Tensor | None"], None]
# Takes (module, per-head outputs (B, H, Tq, d_k)) and returns the outputs W^O is applied to.
HeadsHook = Callable[["MultiHeadAttention", torch.Tensor], torch.Tensor]


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
    scores = query @ key.transpose(-2, -1)  # (B, H, Tq, Tk), the largest tensors of a layer
    if mask is None:  # in place: the product's backward does not need its output
        scores.div_(math.sqrt(d_k))
    else:  # mask + scores / sqrt(d_k) in one pass, whose backward is one more (masked_fill_
        # and div_ would make two each way)
        bias = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device).masked_fill_(~mask, float("-inf"))
        scores = torch.add(bias, scores, alpha=1.0 / math.sqrt(d_k))
    weights = scores.softmax(dim=-1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, d_model) -> (B, H, T, d_k): each head's slice of the projections."""
    batch, length, d_model = x.shape
    return x.view(batch, length, n_heads, d_model // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, d_k) -> (B, T, H * d_k): Concat(head_1, ..., head_h)."""
    batch, heads, length, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * d_k)


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
    and the explicit `attention` above, taken while a weights hook is registered (the
    hook sees the weights, for plots: model/recording.py) and in CPU training. A heads
    hook may change the per-head outputs before W^O (head ablation).

    `dropout` drops attention weights in training (`model.attention_dropout`, by default
    `model.dropout`); the paper's section 5.4 names only residual dropout, so 0 follows it.
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
        self._weights_hooks: dict[int, WeightsHook] = OrderedDict()
        self._heads_hooks: dict[int, HeadsHook] = OrderedDict()

    def reset_parameters(self) -> None:
        """Xavier-uniform for each of W^Q, W^K, W^V and W^O as separate d x d matrices."""
        for chunk in self.in_proj.weight.data.chunk(3, dim=0):
            nn.init.xavier_uniform_(chunk)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.in_proj.bias)
        nn.init.zeros_(self.out_proj.bias)

    def _project(
        self, query: torch.Tensor, memory: torch.Tensor | None, cache: KeyValueCache | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V as (B, H, T, d_k); reuses and extends `cache` when decoding step by step."""
        if memory is None:  # self-attention: Q, K, V from the same sequence
            q, k, v = self.in_proj(query).chunk(3, dim=-1)
            q, k, v = split_heads(q, self.n_heads), split_heads(k, self.n_heads), split_heads(v, self.n_heads)
            if cache is not None:
                k, v = cache.extend(k, v)
            return q, k, v
        q = split_heads(self._cross_query(query), self.n_heads)
        if cache is not None and cache.filled:  # encoder keys/values: once per sentence
            return q, cache.keys, cache.values
        k, v = self._cross_key_value(memory).chunk(2, dim=-1)
        k, v = split_heads(k, self.n_heads), split_heads(v, self.n_heads)
        if cache is not None:
            cache.store(k, v)
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
        Linear does not have; int8 quantization (runs/quantize.py) swaps whole modules."""
        d, weight, bias = self.d_model, self.in_proj.weight.detach(), self.in_proj.bias.detach()
        self.q_proj = _linear_of(weight[:d], bias[:d])
        self.kv_proj = _linear_of(weight[d:], bias[d:])
        self.in_proj = None

    # ---- inspection: hooks registered by model/recording.py ----------------------------
    def register_weights_hook(self, hook: WeightsHook) -> RemovableHandle:
        """Call `hook` with the attention weights of every forward call (which then takes the
        explicit path) until the returned handle is removed."""
        handle = RemovableHandle(self._weights_hooks)
        self._weights_hooks[handle.id] = hook
        return handle

    def register_heads_hook(self, hook: HeadsHook) -> RemovableHandle:
        """Let `hook` replace the per-head outputs before W^O until the handle is removed."""
        handle = RemovableHandle(self._heads_hooks)
        self._heads_hooks[handle.id] = hook
        return handle

    @property
    def records_weights(self) -> bool:
        """Whether a weights hook is registered (the module then takes the explicit path)."""
        return bool(self._weights_hooks)

    @property
    def has_hooks(self) -> bool:
        """Whether a weights or heads hook is registered."""
        return bool(self._weights_hooks or self._heads_hooks)

    # ---- the forward pass ------------------------------------------------------------
    def forward(
        self,
        query: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        cache: KeyValueCache | None = None,
    ) -> torch.Tensor:
        """query (B, Tq, d_model); memory (B, Tk, d_model) for cross-attention, None for
        self-attention; mask broadcastable to (B, H, Tq, Tk), True = may attend;
        `is_causal` adds the subsequent mask. Returns (B, Tq, d_model)."""
        q, k, v = self._project(query, memory, cache)
        explicit = self._takes_explicit_path(q)
        mask, is_causal = self._causal_mask(q, k, mask, is_causal, explicit)
        if explicit:
            heads = self._explicit_attention(q, k, v, mask)
        else:
            heads = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=is_causal,
                dropout_p=self.dropout.p if self.training else 0.0,
            )
        for hook in self._heads_hooks.values():
            heads = hook(self, heads)
        return self.out_proj(merge_heads(heads))

    def _takes_explicit_path(self, q: torch.Tensor) -> bool:
        """The written-out path gives the weights to weights hooks, and it is the faster one in
        CPU training with attention dropout (SDPA's CPU dropout draws one bernoulli per
        weight) or under bf16 autocast, where SDPA's CPU flash kernel has a slow backward at
        small heads (docs/benchmarks.md); in fp32 SDPA is as fast or faster, so fp32 keeps it."""
        if self.records_weights:
            return True
        if not self.training or q.device.type != "cpu":
            return False
        return self.dropout.p > 0 or torch.is_autocast_enabled("cpu")

    def _causal_mask(
        self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, is_causal: bool, explicit: bool
    ) -> tuple[torch.Tensor | None, bool]:
        """(mask, is_causal) for the attention call. SDPA's own `is_causal` serves only a
        square problem without mask; otherwise the subsequent mask is folded into `mask`,
        shifted past the keys already in the cache (which precede the queries)."""
        if not is_causal or q.size(2) == 1:  # one query, the newest position: every key is in its past
            return mask, False
        if mask is None and k.size(2) == q.size(2) and not explicit:
            return None, True
        past = k.size(2) - q.size(2)
        causal = subsequent_mask(k.size(2), q.device)[..., past:, :]
        return (causal if mask is None else mask & causal), False

    def _explicit_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """Equation 1 written out (B, H, Tq, d_k); the weights hooks see its weights and the
        q, k and mask they were computed from."""
        x, weights = attention(q, k, v, mask, self.dropout if self.training else None)
        for hook in self._weights_hooks.values():
            hook(self, weights, q, k, mask)
        return x
