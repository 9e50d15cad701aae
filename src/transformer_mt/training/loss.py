"""Label-smoothed cross entropy (paper section 5.4, epsilon_ls = 0.1)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def torch_smoothing(epsilon: float, vocab_size: int) -> float:
    """The `label_smoothing` argument of `F.cross_entropy` that puts exactly 1 - epsilon on
    the target and epsilon / (V - 1) on every other token.

    PyTorch mixes the one-hot target with a uniform distribution over all V classes (the
    target included), so its target gets 1 - s + s / V; solving for 1 - epsilon gives
    s = epsilon * V / (V - 1)."""
    return epsilon * vocab_size / (vocab_size - 1)


def smoothed_distribution(target: torch.Tensor, vocab_size: int, epsilon: float) -> torch.Tensor:
    """The training target the loss compares against, written out: (N,) -> (N, V) with
    1 - epsilon on the target token and epsilon spread evenly over the other V - 1."""
    dist = torch.full((target.numel(), vocab_size), epsilon / (vocab_size - 1))
    dist.scatter_(1, target.reshape(-1, 1), 1.0 - epsilon)
    return dist


class LabelSmoothingLoss(torch.nn.Module):
    """Cross entropy against the smoothed target; padding positions contribute nothing.

    Returns the *sum* over real target tokens (the trainer divides by the token count of
    the whole, possibly accumulated, batch so every token weighs the same)."""

    def __init__(self, vocab_size: int, pad_id: int, epsilon: float = 0.1) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.pad_id = pad_id
        self.epsilon = epsilon
        self.smoothing = torch_smoothing(epsilon, vocab_size) if epsilon > 0 else 0.0

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """logits (B, T, V), target (B, T) -> scalar summed loss."""
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(),
            target.reshape(-1),
            ignore_index=self.pad_id,
            label_smoothing=self.smoothing,
            reduction="sum",
        )
