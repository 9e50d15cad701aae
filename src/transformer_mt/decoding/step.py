"""The decoder's step at one new position, written over its weights for search.

Greedy search and beam search call the decoder once per emitted token. At one sentence
a time a step's few small matrix products cost about as much as the nn.Module calls around
them (docs/benchmarks.md, "Decoding speed"), so `DecoderStep` runs DecoderLayer.forward's
operations at one query position, in the same order on the same tensors, as plain
torch.nn.functional calls on weights it reads once per batch: the outputs are the module
path's, bit for bit.

An nn.Linear becomes F.linear and an nn.LayerNorm F.layer_norm on the same weights; any
other projection or norm (an int8 Linear, AnnotatedLayerNorm) is called as the module it
is. A decoder in training mode, or with a hook registered (the attention views' among
them), runs its modules: their result is what the hook or dropout sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as nn_module

from transformer_mt.model.attention import MultiHeadAttention, merge_heads, split_heads
from transformer_mt.model.cache import DecoderCache, KeyValueCache
from transformer_mt.model.decoder import Decoder, DecoderLayer

Norm = Callable[[torch.Tensor], torch.Tensor]
Projection = Callable[[torch.Tensor], torch.Tensor]


def _norm(module: nn.Module) -> Norm:
    """The layer normalisation `module` computes, as a function (identity for nn.Identity)."""
    if isinstance(module, nn.Identity):
        return lambda x: x
    if type(module) is nn.LayerNorm:
        shape, weight, bias, eps = module.normalized_shape, module.weight, module.bias, module.eps
        return lambda x: F.layer_norm(x, shape, weight, bias, eps)
    return module  # AnnotatedLayerNorm, say: its own formula, called as it is


@dataclass
class LayerWeights:
    """One decoder layer's projections: W^QKV, W^O of self-attention; W^Q, W^KV, W^O of
    cross-attention; W_1, W_2 and the activation between them; the three sub-layers' norms."""

    qkv: Projection
    self_out: Projection
    cross_q: Projection
    cross_kv: Projection
    cross_out: Projection
    w_1: Projection
    w_2: Projection
    act: Callable[[torch.Tensor], torch.Tensor]
    norms: list[Norm]


def _linear(module: nn.Module) -> Projection:
    """x W^T + b as a function: torch's F.linear for an nn.Linear, else the module itself
    (an int8 Linear, say)."""
    if type(module) is nn.Linear:
        return partial(F.linear, weight=module.weight, bias=module.bias)
    return module


def _cross_projections(attn: MultiHeadAttention) -> tuple[Projection, Projection]:
    """(W^Q, b^Q) and ([W^K; W^V], [b^K; b^V]) of a cross-attention module: rows of in_proj,
    or its q_proj and kv_proj once split (MultiHeadAttention._cross_query/_cross_key_value)."""
    if attn.q_proj is not None:
        return _linear(attn.q_proj), _linear(attn.kv_proj)
    d, weight, bias = attn.d_model, attn.in_proj.weight, attn.in_proj.bias
    return partial(F.linear, weight=weight[:d], bias=bias[:d]), partial(F.linear, weight=weight[d:], bias=bias[d:])


def _layer_weights(layer: DecoderLayer) -> LayerWeights:
    cross_q, cross_kv = _cross_projections(layer.src_attn)
    ff = layer.feed_forward
    return LayerWeights(
        _linear(layer.self_attn.in_proj), _linear(layer.self_attn.out_proj), cross_q, cross_kv,
        _linear(layer.src_attn.out_proj),
        _linear(ff.w_1), _linear(ff.w_2), ff.act, [_norm(s.norm) for s in layer.sublayer],
    )


def _hooked(module: nn.Module) -> bool:
    """Whether any nn.Module hook, or an attention weights or heads hook, is registered."""
    if isinstance(module, MultiHeadAttention) and module.has_hooks:
        return True
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks)


def _takes_step(decoder: nn.Module) -> bool:
    """Whether `DecoderStep` computes exactly what `decoder`'s modules would: a translation
    Decoder (with cross-attention), every module in eval mode (dropout the identity), no hook
    registered anywhere."""
    if not isinstance(decoder, Decoder) or not decoder.cross_attention:
        return False
    if nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks:
        return False
    return not any(module.training or _hooked(module) for module in decoder.modules())


class DecoderStep:
    """Decoder.forward for one new position per row, with a cache: x (B, 1, d_model), the
    embedded newest tokens -> decoder states (B, 1, d_model). Built by `of`, once a batch."""

    def __init__(self, decoder: Decoder) -> None:
        first = decoder.layers[0]
        self.layers = [_layer_weights(layer) for layer in decoder.layers]
        self.norm_first = first.sublayer[0].norm_first
        self.final_norm = _norm(decoder.norm)
        self.n_heads = first.self_attn.n_heads
        self.attentions = [m for m in decoder.modules() if isinstance(m, MultiHeadAttention)]

    @classmethod
    def of(cls, decoder: nn.Module) -> DecoderStep | None:
        """The step for `decoder`, or None where only its modules compute it exactly."""
        return cls(decoder) if _takes_step(decoder) else None

    def attention_hooked(self) -> bool:
        """Whether an attention weights or heads hook was registered since the step was built
        (the attention views register theirs after encoding): then the modules must run."""
        return any(attention.has_hooks for attention in self.attentions)

    def _sublayer(self, x: torch.Tensor, norm: Norm, sublayer: Callable[..., torch.Tensor], *args) -> torch.Tensor:
        """SublayerConnection.forward in eval mode (dropout is the identity)."""
        if self.norm_first:
            return x + sublayer(norm(x), *args)
        return norm(x + sublayer(x, *args))

    def __call__(self, x: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None,
                 cache: DecoderCache) -> torch.Tensor:
        """x (B, 1, d_model); memory (B, S, d_model); src_mask (B, 1, 1, S) or None (no row
        padded); the cache receives this position's self-attention keys and values (and, at
        the first step, cross-attention's)."""
        for weights, layer_cache in zip(self.layers, cache.layers):
            x = self._sublayer(x, weights.norms[0], self._self_attention, weights, layer_cache.self_attn)
            x = self._sublayer(x, weights.norms[1], self._cross_attention, weights, layer_cache.cross_attn,
                               memory, src_mask)
            x = self._sublayer(x, weights.norms[2], self._feed_forward, weights)
        return self.final_norm(x)

    def _self_attention(self, x: torch.Tensor, weights: LayerWeights, cache: KeyValueCache) -> torch.Tensor:
        """Masked self-attention at the newest position: every cached key is in its past."""
        q, k, v = weights.qkv(x).chunk(3, dim=-1)
        k, v = cache.extend(split_heads(k, self.n_heads), split_heads(v, self.n_heads))
        heads = F.scaled_dot_product_attention(split_heads(q, self.n_heads), k, v)  # (B, H, 1, d_k)
        return weights.self_out(merge_heads(heads))

    def _cross_attention(self, x: torch.Tensor, weights: LayerWeights, cache: KeyValueCache, memory: torch.Tensor,
                         src_mask: torch.Tensor | None) -> torch.Tensor:
        """Attention over the encoder output, whose keys and values are projected at the first step."""
        if not cache.filled:
            k, v = weights.cross_kv(memory).chunk(2, dim=-1)
            cache.store(split_heads(k, self.n_heads), split_heads(v, self.n_heads))
        q = split_heads(weights.cross_q(x), self.n_heads)
        heads = F.scaled_dot_product_attention(q, cache.keys, cache.values, attn_mask=src_mask)
        return weights.cross_out(merge_heads(heads))

    @staticmethod
    def _feed_forward(x: torch.Tensor, weights: LayerWeights) -> torch.Tensor:
        """FFN(x) = act(x W_1 + b_1) W_2 + b_2 (equation 2)."""
        return weights.w_2(weights.act(weights.w_1(x)))
