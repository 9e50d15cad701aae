"""Masks: boolean, True = may attend."""

from __future__ import annotations

import torch

from transformer_mt.model.masks import padding_mask, subsequent_mask, target_mask


def test_subsequent_mask_is_lower_triangular() -> None:
    mask = subsequent_mask(4)
    assert mask.shape == (1, 1, 4, 4) and mask.dtype == torch.bool
    expected = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(mask[0, 0], expected)


def test_padding_mask_hides_pad_keys() -> None:
    tokens = torch.tensor([[4, 5, 0], [6, 0, 0]])
    mask = padding_mask(tokens, 0)
    assert mask.shape == (2, 1, 1, 3)
    assert mask[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]


def test_target_mask_combines_both() -> None:
    mask = target_mask(torch.tensor([[4, 5, 0]]), 0)
    assert mask.shape == (1, 1, 3, 3)
    assert mask[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
