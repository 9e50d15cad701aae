"""Two of the paper's training equations as plain functions, below every layer that uses them.

    rate                   lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (section 5.3, eq. 3)
    smoothed_distribution  1 - epsilon_ls on the target token, epsilon_ls / (V - 1) on each other  (section 5.4)

Training builds its schedules (training/plan.py) and checks its fused loss
(training/loss.py) on them; the figures (viz/mechanisms.py) draw them. They are the
paper's formulas, not training machinery, so code that never trains can use them
without importing training/.
"""

from __future__ import annotations

import torch


def rate(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (equation 3).

    Rises linearly for `warmup_steps` steps, peaks at step = warmup_steps, then decays
    with the inverse square root of the step. Steps count from 1."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def smoothed_distribution(target: torch.Tensor, vocab_size: int, epsilon: float) -> torch.Tensor:
    """The training target the loss compares against, written out: (N,) -> (N, V) with
    1 - epsilon on the target token and epsilon spread evenly over the other V - 1."""
    dist = torch.full((target.numel(), vocab_size), epsilon / (vocab_size - 1))
    dist.scatter_(1, target.reshape(-1, 1), 1.0 - epsilon)
    return dist
