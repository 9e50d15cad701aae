"""The paper's learning-rate schedule and label-smoothed loss."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_mt.common.config import TrainConfig, load_config
from transformer_mt.common.paper_equations import rate, smoothed_distribution
from transformer_mt.training.loss import LabelSmoothingLoss, SmoothedCrossEntropy
from transformer_mt.training.plan import ConstantSchedule, Progress, make_schedule
from transformer_mt.training.trainer import make_optimizer, set_lr


def paper_rate(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """Equation 3 of the paper, written here independently of `rate`; steps count from 1."""
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize("d,warmup,scale", [(512, 4000, 1.0), (64, 100, 0.25), (1024, 4000, 2.0)])
def test_rate_is_the_papers_formula(d: int, warmup: int, scale: float) -> None:
    steps = [1, 2, 7, warmup // 2, warmup - 1, warmup, warmup + 1, 3 * warmup, 25 * warmup]
    for step in steps:
        assert rate(step, d, warmup, scale) == pytest.approx(paper_rate(step, d, warmup, scale), rel=1e-12)
    # the peak lies at step = warmup, where both branches of the min meet: d^-0.5 warmup^-0.5
    assert max(range(1, 3 * warmup), key=lambda s: rate(s, d, warmup, scale)) == warmup
    assert rate(warmup, d, warmup, scale) == pytest.approx(scale / math.sqrt(d * warmup), rel=1e-12)


def test_rate_of_the_base_model_by_hand() -> None:
    """d_model 512, 4000 warmup steps: the numbers of the paper's base model, worked out by hand."""
    assert rate(1, 512, 4000) == pytest.approx(1 / (math.sqrt(512) * 4000**1.5), rel=1e-12)  # 1.75e-7
    assert rate(4000, 512, 4000) == pytest.approx(6.9877e-4, rel=1e-4)  # 1 / sqrt(2,048,000), the peak
    assert rate(16000, 512, 4000) == pytest.approx(3.4939e-4, rel=1e-4)  # half the peak at 4x the warmup
    assert rate(100000, 512, 4000) == pytest.approx(1.3975e-4, rel=1e-4)  # 1 / sqrt(512e5), the last step


def test_schedule_drives_adam_with_the_paper_settings() -> None:
    """The i-th optimizer step (the paper's step i, counted from 1) runs with the paper's
    rate(i), set as the trainer sets it: read from param_groups and measured from the parameter's move. With a
    constant gradient Adam's bias-corrected moments are exactly g and g^2, so each step
    moves the parameter by lr * g / (|g| + eps) = lr (to 1e-9 relative)."""
    cfg = TrainConfig(warmup_steps=10, lr_scale=0.5)
    d = 64
    param = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    optimizer = make_optimizer([param], cfg)
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    assert optimizer.defaults["weight_decay"] == 0 and not optimizer.defaults["amsgrad"]
    schedule = make_schedule(cfg, d)
    for step in range(1, 31):
        expected = paper_rate(step, d, 10, 0.5)
        set_lr(optimizer, schedule.lr_at(Progress(step, elapsed=1e6)))  # the paper's schedule counts steps only
        assert optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-12), step
        before = param.item()
        param.grad = torch.ones(1, dtype=torch.float64)
        optimizer.step()
        assert before - param.item() == pytest.approx(expected, rel=1e-6), step
    # the peak: step 10 = warmup, 0.5 / sqrt(64 * 10)
    assert paper_rate(10, d, 10, 0.5) == pytest.approx(0.5 / math.sqrt(640))


def test_the_constant_schedule_is_plain_adam() -> None:
    """train.schedule: constant gives train.lr at every step, whatever the step or time."""
    cfg = TrainConfig(schedule="constant", lr=1e-3, adam_betas=(0.9, 0.999), adam_eps=1e-8)
    schedule = make_schedule(cfg, 512)
    assert schedule == ConstantSchedule(1e-3)
    assert {schedule.lr_at(Progress(step, seconds)) for step, seconds in [(1, 0.0), (7, 3.5), (10**6, 1e5)]} == {1e-3}
    param = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    optimizer = make_optimizer([param], cfg)
    assert optimizer.defaults["betas"] == (0.9, 0.999) and optimizer.defaults["eps"] == 1e-8
    for _ in range(3):
        set_lr(optimizer, schedule.lr_at(Progress(1)))
        before = param.item()
        param.grad = torch.full((1,), 4.0, dtype=torch.float64)
        optimizer.step()
        assert before - param.item() == pytest.approx(1e-3, rel=1e-6)  # Adam moves by lr for a constant gradient


def test_warmup_constant_rises_linearly_to_train_lr_and_stays() -> None:
    """train.schedule: warmup_constant: lr * step / warmup_steps up to warmup_steps, then lr."""
    schedule = make_schedule(TrainConfig(schedule="warmup_constant", lr=1e-3, warmup_steps=4), 512)
    rates = [schedule.lr_at(Progress(step)) for step in range(1, 8)]
    assert rates == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3, 1e-3])


def test_the_fused_optimizer_updates_as_the_reference_adam() -> None:
    """make_optimizer's fused Adam (one kernel for every parameter) gives the update of
    PyTorch's reference, per-tensor Adam: 20 steps of random gradients and rates on
    parameters of several shapes agree to float32 rounding."""
    torch.manual_seed(0)
    cfg = TrainConfig(adam_betas=(0.9, 0.98), adam_eps=1e-9)
    shapes = [(64, 32), (32,), (8000, 16), (1,)]
    ours = [torch.nn.Parameter(torch.randn(shape)) for shape in shapes]
    reference = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    fused = make_optimizer(ours, cfg)
    plain = torch.optim.Adam(reference, lr=1.0, betas=cfg.adam_betas, eps=cfg.adam_eps, foreach=False, fused=False)
    assert fused.defaults["fused"]
    for _ in range(20):
        lr = float(torch.rand(1)) * 1e-2
        for p, q in zip(ours, reference):
            p.grad = torch.randn_like(p) * 10 ** float(torch.randint(-3, 2, (1,)))
            q.grad = p.grad.clone()
        set_lr(fused, lr)
        set_lr(plain, lr)
        fused.step()
        plain.step()
    for p, q in zip(ours, reference):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


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


@pytest.mark.parametrize("after", [1.0, 3.0])
def test_fused_loss_scaled_in_its_blocks_equals_the_reference_divided_by_the_tokens(monkeypatch, after) -> None:
    """scale = 1 / tokens, as the trainer passes it; `after` multiplies the result again (an
    incoming gradient that is not 1, as a loss scaled after the function gives)."""
    monkeypatch.setattr(SmoothedCrossEntropy, "ROWS", 7)
    torch.manual_seed(4)
    logits = torch.randn(30, 11, dtype=torch.float64, requires_grad=True)
    target = torch.randint(1, 11, (30,))
    target[5] = 0
    n_tokens = int((target != 0).sum())
    loss = LabelSmoothingLoss(11, 0, 0.1)(logits, target, 1.0 / n_tokens) * after
    loss.backward()
    reference = logits.detach().clone().requires_grad_()
    expected = torch_smoothed_cross_entropy(reference, target, 0, 0.1) / n_tokens * after
    expected.backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(logits.grad, reference.grad)


def test_fused_loss_without_smoothing_is_the_negative_log_likelihood() -> None:
    logits = torch.randn(5, 9, dtype=torch.float64)
    target = torch.tensor([1, 2, 3, 4, 5])
    loss = LabelSmoothingLoss(9, 0, 0.0)(logits, target)
    torch.testing.assert_close(loss, F.cross_entropy(logits, target, reduction="sum"))


def test_never_emitted_outputs_leave_the_smoothing_and_get_no_gradient() -> None:
    """An imported model's extra bos output has the bias NEVER_LOGIT: the loss is the
    smoothed cross entropy over the other columns, and that column's gradient is 0."""
    torch.manual_seed(4)
    vocab, never = 9, [2]
    logits = torch.randn(12, vocab, dtype=torch.float64)
    logits[:, 2] = -1e9
    logits.requires_grad_()
    target = torch.randint(3, vocab, (12,))
    target[5] = 0
    loss = LabelSmoothingLoss(vocab, 0, 0.1, never=never)(logits, target)
    loss.backward()
    kept = [i for i in range(vocab) if i not in never]
    reference = logits.detach()[:, kept].clone().requires_grad_()  # the same model without that column
    expected = torch_smoothed_cross_entropy(reference, torch.tensor([kept.index(t) for t in target.tolist()]),
                                            kept.index(0), 0.1)
    expected.backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(logits.grad[:, kept], reference.grad)
    assert logits.grad[:, 2].abs().max() == 0
    assert torch.isfinite(loss)


def test_linear_decay_warms_up_like_the_paper_then_anneals_to_almost_zero() -> None:
    """train.schedule: linear: the paper's warmup line up to its peak at warmup_steps, then a
    straight line that would reach 0 one step after max_steps."""
    cfg = TrainConfig(schedule="linear", warmup_steps=10, lr_scale=0.5, max_steps=110)
    schedule = make_schedule(cfg, 64)
    peak = 0.5 / math.sqrt(64 * 10)
    for step in (1, 5, 10):
        assert schedule.lr_at(Progress(step)) == pytest.approx(paper_rate(step, 64, 10, 0.5), rel=1e-12)
    assert schedule.lr_at(Progress(10)) == pytest.approx(peak, rel=1e-12)
    assert schedule.lr_at(Progress(60)) == pytest.approx(peak * 51 / 101, rel=1e-12)  # (111 - 60) / (111 - 10)
    assert schedule.lr_at(Progress(110)) == pytest.approx(peak / 101, rel=1e-12)  # the last step: small, not 0
    rates = [schedule.lr_at(Progress(s)) for s in range(10, 111)]
    assert all(a > b for a, b in zip(rates, rates[1:]))


def test_fused_loss_under_no_grad_gives_the_same_loss_and_keeps_no_gradient() -> None:
    """Validation computes the loss under no_grad: the same number, and no (N, V) gradient
    is made for a backward that never comes."""
    torch.manual_seed(5)
    logits = torch.randn(20, 13, requires_grad=True)
    target = torch.randint(1, 13, (20,))
    criterion = LabelSmoothingLoss(13, 0, 0.1)
    with torch.no_grad():
        loss = criterion(logits, target)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, criterion(logits, target).detach())
    allocated = []
    real_empty_like = torch.empty_like
    with torch.no_grad(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "empty_like", lambda *a, **k: allocated.append(a[0].shape) or real_empty_like(*a, **k))
        criterion(logits, target)
    assert allocated == []


def test_fused_loss_refuses_a_second_backward() -> None:
    """Its gradient is scaled in place, so a second backward through the same graph would be
    wrong: it is refused."""
    logits = torch.randn(6, 5, requires_grad=True)
    loss = LabelSmoothingLoss(5, 0, 0.1)(logits, torch.tensor([1, 2, 3, 4, 1, 2]))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward twice"):
        loss.backward()


def test_weight_decay_shrinks_matrices_apart_from_the_gradient() -> None:
    """train.weight_decay (AdamW, Loshchilov and Hutter 2019): with a zero gradient Adam's
    update is 0, so a matrix shrinks by exactly (1 - lr * weight_decay) each step, the
    decay decoupled from the gradient; a bias (1-dimensional) does not decay; without
    weight_decay nothing moves."""
    lr, decay = 0.01, 0.1
    for weight_decay, factor in ((decay, 1 - lr * decay), (0.0, 1.0)):
        matrix = torch.nn.Parameter(torch.full((3, 4), 2.0, dtype=torch.float64))
        bias = torch.nn.Parameter(torch.full((4,), 2.0, dtype=torch.float64))
        optimizer = make_optimizer([matrix, bias], TrainConfig(weight_decay=weight_decay))
        for _ in range(5):
            set_lr(optimizer, lr)
            matrix.grad, bias.grad = torch.zeros_like(matrix), torch.zeros_like(bias)
            optimizer.step()
        torch.testing.assert_close(matrix.detach(), torch.full((3, 4), 2.0 * factor**5, dtype=torch.float64))
        torch.testing.assert_close(bias.detach(), torch.full((4,), 2.0, dtype=torch.float64))


@pytest.mark.parametrize("preset", ["multi30k_en_de", "multi30k_de_en"])
def test_the_multi30k_recipes_peak_at_transformer_tinys_rate(preset: str) -> None:
    """Whatever warmup a recipe takes (both 2,000 steps now, 500 before), lr_scale keeps the peak
    at Transformer-Tiny's 0.005 (Wu et al., 2021): the warmup was searched at that peak."""
    cfg = load_config(preset)
    warmup = cfg.train.warmup_steps
    assert paper_rate(warmup, cfg.model.d_model, warmup, cfg.train.lr_scale) == pytest.approx(0.005, rel=0.02)
