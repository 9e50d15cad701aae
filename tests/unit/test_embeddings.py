"""Embeddings, the sinusoidal positional encoding (section 3.4, 3.5) and the learned one (Table 3 row E)."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_mt.model.embeddings import (
    Embeddings,
    LearnedPositionalEmbedding,
    PositionalEncoding,
    sinusoidal_encoding,
)


@pytest.mark.parametrize("pos,i", [(0, 0), (1, 0), (1, 1), (7, 3), (50, 10), (99, 31)])
def test_encoding_matches_the_paper_formula(pos: int, i: int) -> None:
    d_model = 64
    pe = sinusoidal_encoding(100, d_model)
    angle = pos / 10000 ** (2 * i / d_model)
    assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
    assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_dims_zero_and_one_share_a_frequency() -> None:
    """Position 1, d_model 4: [sin 1, cos 1, sin 0.01, cos 0.01]. Dimensions 2i and 2i+1 share
    a frequency, so PE(1, 1) = cos(1 radian) = 0.5403, not the 0.9984 = cos(1 / 17.78) of
    study notes that give dimension 1 a frequency of its own."""
    pe = sinusoidal_encoding(2, 4)[1]
    expected = torch.tensor([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)])
    torch.testing.assert_close(pe, expected)
    assert pe[1].item() == pytest.approx(0.5403, abs=1e-4)


def test_encoding_is_bounded_and_odd_width_works() -> None:
    pe = sinusoidal_encoding(500, 33)
    assert pe.shape == (500, 33)
    assert pe.abs().max() <= 1.0


def test_positional_encoding_adds_table_with_offset() -> None:
    module = PositionalEncoding(8, dropout=0.0, max_positions=20).eval()
    x = torch.zeros(2, 3, 8)
    torch.testing.assert_close(module(x, offset=5), sinusoidal_encoding(20, 8)[5:8].expand(2, 3, 8))
    with pytest.raises(ValueError, match="model.max_positions"):
        module(torch.zeros(1, 21, 8))


def test_embeddings_scale_by_sqrt_d_model() -> None:
    emb = Embeddings(10, 16)
    tokens = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(emb(tokens), emb.lut(tokens) * 4.0)


@pytest.mark.parametrize("d_model", [8, 9])
def test_halves_layout_puts_the_same_sines_first_and_cosines_second(d_model: int) -> None:
    """Marian's table: sin(pos / 10000^(2i / d)) in dimension i < ceil(d / 2), the cosines of the
    same frequencies after them; the paper's table holds the same numbers interleaved."""
    halves, paper = sinusoidal_encoding(30, d_model, "halves"), sinusoidal_encoding(30, d_model)
    sines = (d_model + 1) // 2
    torch.testing.assert_close(halves[:, :sines], paper[:, 0::2])
    torch.testing.assert_close(halves[:, sines:], paper[:, 1::2])
    module = PositionalEncoding(d_model, dropout=0.0, max_positions=30, layout="halves")
    torch.testing.assert_close(module.pe, halves)
    with pytest.raises(ValueError, match="layout"):
        sinusoidal_encoding(4, 4, "diagonal")


def test_learned_table_is_a_trained_parameter_added_with_offset() -> None:
    """model.positional learned (Table 3 row E): a (max_positions, d_model) parameter whose
    rows offset .. offset + T - 1 are added to the input; the positions used get gradients,
    the others none."""
    torch.manual_seed(0)
    module = LearnedPositionalEmbedding(8, dropout=0.0, max_positions=20).eval()
    assert module.max_positions == 20
    assert [name for name, _ in module.named_parameters()] == ["embedding.weight"]
    assert module.table() is module.embedding.weight and module.table().shape == (20, 8)
    x = torch.randn(2, 3, 8)
    out = module(x, offset=5)
    torch.testing.assert_close(out, x + module.embedding.weight.detach()[5:8])
    out.pow(2).sum().backward()
    grad = module.embedding.weight.grad
    assert grad is not None and grad[5:8].abs().sum(dim=1).min() > 0
    assert grad[:5].abs().sum() == 0 and grad[8:].abs().sum() == 0
    with pytest.raises(ValueError, match="model.max_positions"):
        module(torch.zeros(1, 21, 8))


def test_learned_table_starts_small_and_random() -> None:
    """N(0, d_model^-0.5): each row has a norm near 1, far below a scaled token embedding's,
    and rows differ (a constant start would not tell positions apart)."""
    torch.manual_seed(0)
    d_model = 256
    table = LearnedPositionalEmbedding(d_model, dropout=0.0, max_positions=512).table().detach()
    assert table.std().item() == pytest.approx(d_model ** -0.5, rel=0.05)
    assert table.mean().abs().item() < 0.01
    assert table.norm(dim=1).mean().item() == pytest.approx(1.0, rel=0.05)


def test_both_positional_modules_tell_their_length_and_table_alike() -> None:
    sinusoid = PositionalEncoding(8, dropout=0.0, max_positions=20)
    assert sinusoid.max_positions == 20
    torch.testing.assert_close(sinusoid.table(), sinusoidal_encoding(20, 8))
    assert "pe" not in sinusoid.state_dict()  # computed, not stored: checkpoints keep no sinusoid
