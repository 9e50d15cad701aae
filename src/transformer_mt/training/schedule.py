"""Learning-rate schedules as explicit functions of training progress, and the paper's Adam.

A schedule answers one question, `lr_at(progress)`: the learning rate of the optimizer
step about to be taken. The trainer sets it on the optimizer before every step, so the
schedule keeps no state of its own: a resumed run, which knows its step and its training
seconds, continues with exactly the rates of an uninterrupted one.

    paper      lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (eq. 3)
    constant   lrate = lr  (plain Adam, as most tutorials train)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from transformer_mt.config import TrainConfig


@dataclass(frozen=True)
class Progress:
    """How far training is when a step starts: `step` is that step's number (from 1),
    `seconds` the training time spent before it. A schedule may use either."""

    step: int
    seconds: float = 0.0


class Schedule(Protocol):
    def lr_at(self, progress: Progress) -> float:
        """The learning rate of the step that starts at `progress`."""
        ...


def rate(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (equation 3).

    Rises linearly for `warmup_steps` steps, peaks at step = warmup_steps, then decays
    with the inverse square root of the step. Steps count from 1."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


@dataclass(frozen=True)
class PaperSchedule:
    """Section 5.3: linear warmup, then inverse-square-root decay (`rate`)."""

    d_model: int
    warmup_steps: int
    scale: float = 1.0

    def lr_at(self, progress: Progress) -> float:
        return rate(progress.step, self.d_model, self.warmup_steps, self.scale)


@dataclass(frozen=True)
class ConstantSchedule:
    """The same learning rate at every step."""

    lr: float

    def lr_at(self, progress: Progress) -> float:
        return self.lr


def make_schedule(cfg: TrainConfig, d_model: int) -> Schedule:
    """The schedule train.schedule names: `paper` (scaled by train.lr_scale) or `constant` (train.lr)."""
    if cfg.schedule == "constant":
        return ConstantSchedule(cfg.lr)
    return PaperSchedule(d_model, cfg.warmup_steps, cfg.lr_scale)


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Adam:
    """Adam(beta1=0.9, beta2=0.98, eps=1e-9 in the paper); the schedule sets the lr of every step."""
    return torch.optim.Adam(params, lr=1.0, betas=cfg.adam_betas, eps=cfg.adam_eps)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Make `lr` the learning rate of the optimizer's next step."""
    for group in optimizer.param_groups:
        group["lr"] = lr
