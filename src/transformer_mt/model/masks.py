"""Attention masks. Convention, used everywhere in this package: a boolean mask where
**True means "may attend"** (as in the Annotated Transformer's `subsequent_mask`), which
is also what `F.scaled_dot_product_attention` expects of a boolean `attn_mask`.
"""

from __future__ import annotations

import torch


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, S) token ids -> (B, 1, 1, S): True at real tokens, False at padding.

    Broadcasts over heads and query positions, so no query attends to a padded key.
    """
    return (tokens != pad_id)[:, None, None, :]


def subsequent_mask(size: int, device: torch.device | None = None) -> torch.Tensor:
    """(1, 1, T, T) lower-triangular mask: position i may attend to positions <= i.

    This is the decoder's "masking out (setting to -inf) all values in the input of the
    softmax which correspond to illegal connections" (paper section 3.2.3).
    """
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()[None, None]


def target_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, T) -> (B, 1, T, T): the decoder self-attention mask, padding AND causal."""
    return padding_mask(tokens, pad_id) & subsequent_mask(tokens.size(1), tokens.device)
