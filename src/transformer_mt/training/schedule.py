"""Learning-rate schedules as explicit functions of training progress, and the paper's Adam.

A schedule answers one question, `lr_at(progress)`: the learning rate of the optimizer
step about to be taken. The trainer sets it on the optimizer before every step, so the
schedule keeps no state of its own: a resumed run, which knows its step and its elapsed
time, continues with exactly the rates of an uninterrupted one.

    paper      lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (eq. 3)
    constant   lrate = lr  (plain Adam, as most tutorials train)
    warmup_constant  lrate = lr * min(1, step / warmup_steps): the same rate after a linear
               warmup (a tutorial's Adam with the paper's warmup, and nothing else of its schedule)
    linear     the paper's warmup to its peak, then a straight line down to (almost) zero
               at train.max_steps (a budgeted run does the same in time: training/budget.py)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from transformer_mt.config import TrainConfig
from transformer_mt.paper_equations import rate


@dataclass(frozen=True)
class Progress:
    """How far training is when a step starts: `step` is that step's number (from 1),
    `elapsed` the run's wall-clock seconds before it, `warmup_elapsed` those at the end of
    the warmup (TrainState). A schedule may use any of them."""

    step: int
    elapsed: float = 0.0
    warmup_elapsed: float = 0.0


class Schedule(Protocol):
    def lr_at(self, progress: Progress) -> float:
        """The learning rate of the step that starts at `progress`."""
        ...


@dataclass(frozen=True)
class PaperSchedule:
    """Section 5.3: linear warmup, then inverse-square-root decay (`paper_equations.rate`)."""

    d_model: int
    warmup_steps: int
    scale: float = 1.0

    def lr_at(self, progress: Progress) -> float:
        return rate(progress.step, self.d_model, self.warmup_steps, self.scale)


@dataclass(frozen=True)
class ConstantSchedule:
    """The same learning rate at every step after `warmup_steps` steps of linear warmup
    (none by default)."""

    lr: float
    warmup_steps: int = 0

    def lr_at(self, progress: Progress) -> float:
        return self.lr * min(1.0, max(progress.step, 1) / max(self.warmup_steps, 1))


@dataclass(frozen=True)
class LinearDecaySchedule:
    """Linear warmup to `peak` over `warmup_steps`, then linear decay that would reach 0
    at step total_steps + 1, so the last step still learns a little. A run that knows its
    length anneals fully instead of stopping at a high rate, as the inverse square root
    does (Li et al. 2020, "Budgeted training": linear decay to zero is the best of the
    simple schedules when the number of steps is fixed in advance)."""

    peak: float
    warmup_steps: int
    total_steps: int

    def lr_at(self, progress: Progress) -> float:
        step = max(progress.step, 1)
        if step <= self.warmup_steps:
            return self.peak * step / self.warmup_steps
        remaining = max(self.total_steps + 1 - step, 0)
        return self.peak * remaining / max(self.total_steps + 1 - self.warmup_steps, 1)


def warmup_peak(cfg: TrainConfig, d_model: int) -> float:
    """The paper's rate at the end of the warmup (equation 3 at step = warmup_steps): where
    the linear schedules, and a budget, turn from warming up to decaying."""
    return rate(cfg.warmup_steps, d_model, cfg.warmup_steps, cfg.lr_scale)


def make_schedule(cfg: TrainConfig, d_model: int) -> Schedule:
    """The schedule train.schedule names: `paper` (scaled by train.lr_scale), `constant`
    (train.lr), `warmup_constant` (up to train.lr over warmup_steps, then train.lr), or `linear`
    (to the paper's peak at warmup_steps, then down to ~0 at max_steps)."""
    if cfg.schedule == "constant":
        return ConstantSchedule(cfg.lr)
    if cfg.schedule == "warmup_constant":
        return ConstantSchedule(cfg.lr, cfg.warmup_steps)
    if cfg.schedule == "linear":
        return LinearDecaySchedule(warmup_peak(cfg, d_model), cfg.warmup_steps, cfg.max_steps)
    return PaperSchedule(d_model, cfg.warmup_steps, cfg.lr_scale)


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam(beta1=0.9, beta2=0.98, eps=1e-9 in the paper); the schedule sets the lr of every step.
    With train.weight_decay > 0 it is AdamW (Loshchilov and Hutter, 2019): every matrix shrinks by
    lr * weight_decay each step, apart from the gradient's update; biases and LayerNorm gains
    (the 1-dimensional parameters) do not decay.

    PyTorch's fused implementation updates every parameter in one kernel instead of a loop
    over tensors: the same update within floating-point rounding
    (tests/unit/test_schedule_loss.py), several times faster on a CPU."""
    options = {"lr": 1.0, "betas": cfg.adam_betas, "eps": cfg.adam_eps, "fused": True}
    if cfg.weight_decay == 0:
        return torch.optim.Adam(params, **options)
    params = list(params)
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], **options)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Make `lr` the learning rate of the optimizer's next step."""
    for group in optimizer.param_groups:
        group["lr"] = lr
