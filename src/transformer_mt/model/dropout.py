"""Dropout (paper section 5.4) with a cheaper random mask on the CPU."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MASK_LEVELS = 1 << 16  # each element's keep/drop decision uses 16 random bits


def keep_mask(shape: torch.Size, p: float) -> torch.Tensor:
    """A boolean mask of `shape`, each element True (kept) with probability
    1 - round(p * 65536) / 65536, from the default CPU generator.

    `torch.bernoulli_`, which `F.dropout` uses, spends one 32-bit draw of the Mersenne
    Twister per element plus a float conversion; a training step of the small model spent
    about a fifth of its time there. Here one 64-bit draw gives four elements their 16
    random bits: a quarter of the draws, no floats, and the same seed still gives the same
    masks (exact resume is untouched)."""
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(1 << 63), None)
    bits = words.view(torch.int16)[:n].view(shape)
    return bits >= round(p * MASK_LEVELS) - MASK_LEVELS // 2


class Dropout(nn.Dropout):
    """nn.Dropout whose CPU mask comes from `keep_mask`; other devices use F.dropout (a
    fused GPU kernel is already cheap). Kept elements are scaled by 1 / (1 - p') with p'
    the drop probability the 16-bit threshold realises, so the expectation is unchanged."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)
        if self.p == 1.0:
            return torch.zeros_like(x)
        levels = round(self.p * MASK_LEVELS)
        scale = MASK_LEVELS / (MASK_LEVELS - levels)
        return x.mul(keep_mask(x.shape, self.p)).mul_(scale)

