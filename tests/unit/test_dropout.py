"""Dropout with the 16-bit CPU mask: right rate, unbiased, seeded, identity in eval."""

from __future__ import annotations

import pytest
import torch

from transformer_mt.model.dropout import Dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_mask_keeps_one_minus_p_of_the_elements(p: float) -> None:
    torch.manual_seed(0)
    mask = keep_mask(torch.Size([1000, 1001]), p)  # an odd size: not a multiple of four
    assert mask.shape == (1000, 1001) and mask.dtype == torch.bool
    assert mask.float().mean().item() == pytest.approx(1 - p, abs=2e-3)


def test_mask_bits_are_not_correlated_between_neighbours() -> None:
    torch.manual_seed(1)
    mask = keep_mask(torch.Size([400_000]), 0.5).float()
    both = (mask[:-1] * mask[1:]).mean().item()
    assert both == pytest.approx(0.25, abs=5e-3)


def test_dropout_is_unbiased_seeded_and_off_in_eval() -> None:
    drop = Dropout(0.3)
    x = torch.ones(200, 500, requires_grad=True)
    torch.manual_seed(3)
    y = drop(x)
    assert y.mean().item() == pytest.approx(1.0, abs=0.01)
    kept = y != 0
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / (1 - 0.3)), rtol=1e-4)
    y.sum().backward()
    torch.testing.assert_close(x.grad, y.detach())  # gradient: the same mask and scale
    torch.manual_seed(3)
    torch.testing.assert_close(drop(x), y)
    drop.eval()
    assert drop(x) is x


def test_dropout_one_drops_everything() -> None:
    assert Dropout(1.0)(torch.ones(3, 4)).abs().sum() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_gives_exactly_the_boolean_masks_product(dtype: torch.dtype) -> None:
    """The output and the gradient are bit for bit x * keep * scale and g * scale * keep with
    keep_mask's boolean mask of the same seed, in fp32 and in bf16 (the scale applied after the
    mask): the masks a seed gives, and so exact resume, do not depend on how the product is
    written."""
    p = 0.1
    scale = 65536 / (65536 - round(p * 65536))
    x = torch.randn(37, 41, dtype=dtype, requires_grad=True)
    g = torch.randn(37, 41, dtype=dtype)
    torch.manual_seed(5)
    y = Dropout(p)(x)
    y.backward(g)
    torch.manual_seed(5)
    keep = keep_mask(x.shape, p)
    assert y.dtype == dtype and torch.equal(y, x.detach().mul(keep).mul_(scale))
    assert torch.equal(x.grad, g.mul(scale).mul(keep))
