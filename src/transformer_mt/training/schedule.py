"""The learning-rate schedule of section 5.3 and the paper's Adam."""

from __future__ import annotations

import torch
from torch.optim.lr_scheduler import LambdaLR

from transformer_mt.config import TrainConfig


def rate(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (equation 3).

    Rises linearly for `warmup_steps` steps, peaks at step = warmup_steps, then decays
    with the inverse square root of the step. Steps count from 1."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Adam:
    """Adam(beta1=0.9, beta2=0.98, eps=1e-9) with a base lr of 1: the schedule sets it."""
    return torch.optim.Adam(params, lr=1.0, betas=cfg.adam_betas, eps=cfg.adam_eps)


def make_scheduler(optimizer: torch.optim.Optimizer, d_model: int, cfg: TrainConfig) -> LambdaLR:
    """A LambdaLR whose i-th optimizer step (counted from 0) uses rate(i + 1)."""
    return LambdaLR(optimizer, lambda i: rate(i + 1, d_model, cfg.warmup_steps, cfg.lr_scale))
