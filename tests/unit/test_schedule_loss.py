"""The paper's learning-rate schedule and label-smoothed loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer_mt.config import TrainConfig
from transformer_mt.training.loss import LabelSmoothingLoss, SmoothedCrossEntropy, smoothed_distribution
from transformer_mt.training.schedule import make_optimizer, make_scheduler, rate


def test_rate_rises_linearly_then_decays_as_inverse_sqrt() -> None:
    d, warmup = 512, 4000
    assert rate(2000, d, warmup) == pytest.approx(rate(1000, d, warmup) * 2)
    peak = max(range(1, 20000, 50), key=lambda s: rate(s, d, warmup))
    assert abs(peak - warmup) <= 50
    assert rate(warmup, d, warmup) == pytest.approx(d**-0.5 * warmup**-0.5)
    assert rate(16000, d, warmup) == pytest.approx(rate(4000 * 4, d, warmup))
    assert rate(32000, d, warmup) / rate(8000, d, warmup) == pytest.approx(0.5)
    assert rate(100, d, warmup, scale=2.0) == pytest.approx(2 * rate(100, d, warmup))


def test_scheduler_drives_adam_with_the_paper_settings() -> None:
    cfg = TrainConfig(warmup_steps=10)
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = make_optimizer([param], cfg)
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    scheduler = make_scheduler(optimizer, 64, cfg)
    seen = []
    for _ in range(20):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([rate(s, 64, 10) for s in range(1, 21)])


def test_smoothed_distribution_puts_one_minus_epsilon_on_target() -> None:
    dist = smoothed_distribution(torch.tensor([2, 0]), vocab_size=5, epsilon=0.1)
    assert dist[0, 2] == pytest.approx(0.9)
    assert dist[0, [0, 1, 3, 4]].tolist() == pytest.approx([0.025] * 4)
    torch.testing.assert_close(dist.sum(1), torch.ones(2))


def test_loss_equals_cross_entropy_against_smoothed_target() -> None:
    torch.manual_seed(0)
    vocab, pad = 7, 0
    logits = torch.randn(2, 4, vocab)
    target = torch.tensor([[3, 4, 5, pad], [6, pad, pad, pad]])
    loss = LabelSmoothingLoss(vocab, pad, 0.1)(logits, target)
    real = target != pad
    dist = smoothed_distribution(target[real], vocab, 0.1)
    expected = -(dist * F.log_softmax(logits[real], -1)).sum()
    torch.testing.assert_close(loss, expected)


def test_padding_contributes_nothing() -> None:
    torch.manual_seed(1)
    criterion = LabelSmoothingLoss(6, 0, 0.1)
    logits = torch.randn(1, 3, 6, requires_grad=True)
    target = torch.tensor([[2, 3, 0]])
    criterion(logits, target).backward()
    assert logits.grad[0, 2].abs().max() == 0
    other = logits.detach().clone()
    other[0, 2] = 100.0
    assert criterion(other, target) == pytest.approx(criterion(logits.detach(), target).item())


def torch_smoothed_cross_entropy(logits: torch.Tensor, target: torch.Tensor, pad: int,
                                 smoothing: float) -> torch.Tensor:
    """The reference: F.cross_entropy spreads epsilon over all V tokens, ours over the V - 1
    wrong ones, so torch gets epsilon * V / (V - 1)."""
    vocab = logits.size(-1)
    return F.cross_entropy(logits, target, ignore_index=pad, reduction="sum",
                           label_smoothing=smoothing * vocab / (vocab - 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_loss_and_gradient_equal_torch_cross_entropy(dtype) -> None:
    torch.manual_seed(2)
    vocab, pad = 50, 0
    logits = (3 * torch.randn(40, vocab)).to(dtype).requires_grad_()
    target = torch.randint(1, vocab, (40,))
    target[::7] = pad
    loss = LabelSmoothingLoss(vocab, pad, 0.1)(logits, target)
    loss.backward()
    reference_logits = logits.detach().float().requires_grad_()
    expected = torch_smoothed_cross_entropy(reference_logits, target, pad, 0.1)
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-4)
    assert logits.grad.dtype == dtype
    tolerance = dict(rtol=0, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=2e-3)
    torch.testing.assert_close(logits.grad.float(), reference_logits.grad, **tolerance)
    assert logits.grad[::7].abs().max() == 0  # padding rows get no gradient


def test_fused_loss_in_blocks_scales_the_gradient_by_the_incoming_one(monkeypatch) -> None:
    """Several row blocks and a loss divided by the token count, as the trainer does."""
    monkeypatch.setattr(SmoothedCrossEntropy, "ROWS", 7)
    torch.manual_seed(3)
    logits = torch.randn(30, 11, dtype=torch.float64, requires_grad=True)
    target = torch.randint(1, 11, (30,))
    target[3] = 0
    n_tokens = int((target != 0).sum())
    (LabelSmoothingLoss(11, 0, 0.1)(logits, target) / n_tokens).backward()
    reference = logits.detach().clone().requires_grad_()
    expected = torch_smoothed_cross_entropy(reference, target, 0, 0.1)
    (expected / n_tokens).backward()
    torch.testing.assert_close(logits.grad, reference.grad)
    with torch.no_grad():
        torch.testing.assert_close(LabelSmoothingLoss(11, 0, 0.1)(logits, target), expected.detach())


def test_fused_loss_without_smoothing_is_the_negative_log_likelihood() -> None:
    logits = torch.randn(5, 9, dtype=torch.float64)
    target = torch.tensor([1, 2, 3, 4, 5])
    loss = LabelSmoothingLoss(9, 0, 0.0)(logits, target)
    torch.testing.assert_close(loss, F.cross_entropy(logits, target, reduction="sum"))
