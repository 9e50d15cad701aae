"""Looking inside attention without changing the model: recording the weights of every
head (for plots and explanations) and silencing heads (ablation, Michel et al. 2019).

Both work through the hooks of `MultiHeadAttention`, registered for the length of a
`with` block and removed on leaving it, so no flag of the model is left switched on:

    with record_attention(model) as recorded:
        model(src, tgt_in, src_mask)
    weights = recorded.weights(model.decoder.layers[0].src_attn)  # (B, H, Tq, Tk)

While weights are recorded the modules take the explicit path (the same outputs, slower);
the model is shared, so other calls made meanwhile take it too."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import torch
from torch import nn

from transformer_mt.model.attention import MultiHeadAttention

# What equation 1 was computed from: q (B, H, Tq, d_k), k (B, H, Tk, d_k), the mask or None.
AttentionInputs = tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None"]


class AttentionRecorder:
    """The weights of the last call of each recorded module, and its q, k and mask (a
    learner's attention module, learner/model.py, records its weights alone)."""

    def __init__(self) -> None:
        self._weights: dict[nn.Module, torch.Tensor] = {}
        self._inputs: dict[nn.Module, AttentionInputs] = {}

    def record(self, module: nn.Module, weights: torch.Tensor, q: torch.Tensor | None = None,
               k: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> None:
        """The weights hook: keep this call's weights (B, H, Tq, Tk) and inputs."""
        self._weights[module] = weights
        self._inputs[module] = (q, k, mask)

    def weights(self, module: MultiHeadAttention) -> torch.Tensor:
        """(B, H, Tq, Tk) weights of `module`'s last call; rows are queries and sum to 1."""
        return self._weights[module]

    def inputs(self, module: MultiHeadAttention) -> AttentionInputs:
        """The q, k and mask of `module`'s last call (for explaining equation 1)."""
        return self._inputs[module]

    def stacked(self, modules: Sequence[MultiHeadAttention]) -> torch.Tensor:
        """The first row's weights of each module, one per layer: (L, H, Tq, Tk) float32 on the CPU."""
        return torch.stack([self._weights[module][0].float().cpu() for module in modules])


def attention_modules(*roots: nn.Module) -> list[MultiHeadAttention]:
    """Every MultiHeadAttention in `roots` (each root included), in module order."""
    return [module for root in roots for module in root.modules() if isinstance(module, MultiHeadAttention)]


@contextmanager
def record_attention(*roots: nn.Module) -> Iterator[AttentionRecorder]:
    """Record the weights of every MultiHeadAttention in `roots` while the block runs."""
    recorder = AttentionRecorder()
    handles = [module.register_weights_hook(recorder.record) for module in attention_modules(*roots)]
    try:
        yield recorder
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def ablate_heads(module: MultiHeadAttention, heads: Sequence[int]) -> Iterator[None]:
    """Silence `heads` (indices from 0) of `module` while the block runs: their outputs are
    multiplied by 0 before W^O, the other heads' by 1."""
    keep = torch.ones(module.n_heads).index_fill_(0, torch.tensor(list(heads), dtype=torch.long), 0.0)  # (H,)

    def silence(_: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
        return x * keep.to(x.dtype).view(1, -1, 1, 1)  # x (B, H, Tq, d_k)

    handle = module.register_heads_hook(silence)
    try:
        yield
    finally:
        handle.remove()
