"""R-Drop (train.rdrop_alpha; Liang et al., 2021): the loss against torch's own cross entropy
and KL divergence, a run without dropout that trains as a plain one, and a run with dropout
whose two dropout passes end up closer than a plain run's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from transformer_mt.config import load_config
from transformer_mt.data.batching import collate
from transformer_mt.model import build_model
from transformer_mt.runs import RunDir, load_checkpoint
from transformer_mt.training import fit
from transformer_mt.training.loss import LabelSmoothingLoss, RDropLoss, SymmetricKL, symmetric_kl, torch_smoothing
from transformer_mt.training.trainer import twice
from transformer_mt.training.translation import TeacherForcing

V, PAD = 11, 0


def reference_rdrop(logits: torch.Tensor, target: torch.Tensor, epsilon: float, alpha: float) -> torch.Tensor:
    """The paper's loss of a batch seen twice, halved, written with torch's functions."""
    n = target.numel() // 2
    a, b = logits[:n].float(), logits[n:].float()
    ce = sum(F.cross_entropy(x, target[:n], reduction="sum", label_smoothing=torch_smoothing(epsilon, V))
             for x in (a, b))
    return 0.5 * ce + alpha / 4 * torch_symmetric_kl(a, b)


def torch_symmetric_kl(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    log_a, log_b = F.log_softmax(a.float(), -1), F.log_softmax(b.float(), -1)
    return (F.kl_div(log_b, log_a, log_target=True, reduction="sum")  # KL(P_a || P_b)
            + F.kl_div(log_a, log_b, log_target=True, reduction="sum"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_symmetric_kl_and_its_gradient_are_torchs(dtype: torch.dtype, monkeypatch) -> None:
    """Both divergences and their gradients as torch's autograd gives them, over several
    blocks of rows (a block of 4 here), in bf16 too."""
    monkeypatch.setattr(SymmetricKL, "ROWS", 4)
    a = (3 * torch.randn(10, V)).to(dtype).requires_grad_()
    b = (3 * torch.randn(10, V)).to(dtype).requires_grad_()
    got = symmetric_kl(a, b)
    (2.5 * got).backward()
    ours = a.grad.clone(), b.grad.clone()
    a.grad = b.grad = None
    expected = torch_symmetric_kl(a, b)
    (2.5 * expected).backward()
    assert got.item() == pytest.approx(expected.item(), rel=1e-5)
    tolerance = {"atol": 1e-6} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1e-2}  # bf16 rounding
    assert torch.allclose(ours[0].float(), a.grad.float(), **tolerance)
    assert torch.allclose(ours[1].float(), b.grad.float(), **tolerance)
    assert got.item() > 0
    with torch.no_grad():
        assert symmetric_kl(a, a).item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("alpha", [0.5, 5.0])
def test_rdrop_loss_and_gradient_equal_the_reference(alpha: float) -> None:
    torch.manual_seed(0)
    target = torch.randint(1, V, (12,))  # the real tokens a loss view gives: no padding
    target = torch.cat([target, target])
    logits = torch.randn(24, V, requires_grad=True)
    got = RDropLoss(LabelSmoothingLoss(V, PAD, 0.1), alpha)(logits, target)
    got.backward()
    ours = logits.grad.clone()
    logits.grad = None
    expected = reference_rdrop(logits, target, 0.1, alpha)
    expected.backward()
    assert got.item() == pytest.approx(expected.item(), rel=1e-5)
    assert torch.allclose(ours, logits.grad, atol=1e-6)


def test_twice_repeats_every_tensor_of_a_batch() -> None:
    batch = collate([[5, 6, 7], [8]], [[9], [3, 4]])
    doubled = twice(batch)
    assert doubled.src.tolist() == batch.src.tolist() * 2
    assert doubled.tgt_in.tolist() == batch.tgt_in.tolist() * 2
    assert doubled.tgt_out.tolist() == batch.tgt_out.tolist() * 2
    assert doubled.n_tokens == 2 * batch.n_tokens


OVERRIDES = ["--train.max_steps=40", "--train.valid_every=40", "--train.log_every=1", "--data.task_size=400",
             "--train.warmup_steps=20", "--train.lr_scale=0.5", "--train.early_stop_metric=loss"]


def train(run: Path, *overrides: str) -> RunDir:
    fit(load_config("tiny", [*OVERRIDES, *overrides]), run, progress=False)
    return RunDir(run)


def losses(run: RunDir) -> list[float]:
    events = [json.loads(line) for line in (run.root / "metrics.jsonl").read_text().splitlines()]
    return [e["loss"] for e in events if e["event"] == "train"]


def test_without_dropout_rdrop_trains_as_a_plain_run(tmp_path: Path) -> None:
    """No dropout: both passes are one function, the KL term is 0 and the halved loss of the
    doubled batch is the plain loss, so the loss curve is the plain run's (up to the rounding
    of a matrix product twice as tall)."""
    plain = losses(train(tmp_path / "plain", "--model.dropout=0"))
    rdrop = losses(train(tmp_path / "rdrop", "--model.dropout=0", "--train.rdrop_alpha=5"))
    assert len(plain) == len(rdrop) == 40
    assert rdrop == pytest.approx(plain, rel=2e-3)


def dropout_disagreement(run: RunDir) -> float:
    """Symmetric KL per token between two training-mode passes over a fixed copy-task batch."""
    cfg = run.read_config()
    model = build_model(cfg.model)
    model.load_state_dict(load_checkpoint(run.checkpoints / "step_40.pt")["model"])
    model.train()
    source = [[4 + (i * j) % 7 for j in range(6)] for i in range(16)]
    batch = collate(source, source)
    view = TeacherForcing(model)
    torch.manual_seed(0)
    with torch.no_grad():
        (first, _), (second, _) = view(batch), view(batch)
    return float(symmetric_kl(first, second)) / batch.n_tokens


def test_with_dropout_rdrop_brings_the_two_passes_together(tmp_path: Path) -> None:
    plain = train(tmp_path / "plain", "--model.dropout=0.3")
    rdrop = train(tmp_path / "rdrop", "--model.dropout=0.3", "--train.rdrop_alpha=5")
    assert losses(rdrop)[-1] < losses(rdrop)[0] / 2  # it learns
    assert dropout_disagreement(rdrop) < 0.5 * dropout_disagreement(plain)
