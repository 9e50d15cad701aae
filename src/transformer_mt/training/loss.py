"""Label-smoothed cross entropy (paper section 5.4, epsilon_ls = 0.1)."""

from __future__ import annotations

import math

import torch


def perplexity(loss_per_token: float) -> float:
    """exp of the mean cross entropy per target token (in nats), capped to stay finite."""
    return math.exp(min(loss_per_token, 100.0))


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


def _accumulation_dtype(logits: torch.Tensor) -> torch.dtype:
    """fp32 for bf16/fp16/fp32 logits, fp64 for fp64 ones."""
    return torch.promote_types(logits.dtype, torch.float32)


class SmoothedCrossEntropy(torch.autograd.Function):
    """Summed cross entropy against the label-smoothed target, computed in blocks of rows.

    With q = (1 - s) onehot(y) + s / V (PyTorch's `label_smoothing` s), the loss of a row is
        -sum_v q_v log softmax(x)_v = -(1 - s) log p_y - s mean_v(log p_v)
    and its gradient is softmax(x) - q. `F.cross_entropy(..., label_smoothing=s)` gives the
    same numbers, but for a (N, V) batch of bf16 logits it converts and stores fp32
    log-probabilities and makes several more full (N, V) passes in the backward: with an 8k
    vocabulary that was about a third of a small model's training step on a CPU. Here the
    forward computes fp32 log-probabilities in blocks of `ROWS` rows that stay in the CPU
    cache and keeps only the logits (bf16 under autocast) and the target's log-probability;
    the backward recomputes the softmax block by block straight into a gradient of the
    logits' dtype, and writes the target column, where p_y - (1 - s) cancels, from the saved
    full-precision log-probability. Rows whose target is `ignore_index` contribute nothing.

    `never` (a tensor of column ids, or None) names outputs the model gives probability
    exactly 0 (Generator.never_emitted: an imported model's extra bos column): they are
    left out of q, so the mean runs over the other columns and their gradient is 0."""

    ROWS = 256

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, smoothing: float, ignore_index: int,
                never: torch.Tensor | None = None):
        keep = target != ignore_index
        index = target.clamp(min=0)[:, None]
        columns = logits.size(-1) - (0 if never is None else never.numel())
        losses, target_log_probs = [], []
        for rows in _blocks(logits.size(0), SmoothedCrossEntropy.ROWS):
            log_probs = torch.log_softmax(logits[rows], dim=-1, dtype=_accumulation_dtype(logits))
            target_log_probs.append(log_probs.gather(1, index[rows]))
            if never is None:
                mean = log_probs.mean(dim=-1)
            else:  # their log-probabilities (~NEVER_LOGIT) leave the sum, not subtracted from it
                mean = log_probs.index_fill_(1, never, 0.0).sum(dim=-1) / columns
            losses.append(-(1.0 - smoothing) * target_log_probs[-1].squeeze(1) - smoothing * mean)
        ctx.save_for_backward(logits, index, keep, torch.cat(target_log_probs))
        ctx.smoothing, ctx.never, ctx.columns = smoothing, never, columns
        return torch.cat(losses).masked_fill(~keep, 0.0).sum()

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        logits, index, keep, target_log_probs = ctx.saved_tensors
        s, uniform = ctx.smoothing, ctx.smoothing / ctx.columns
        weight = (grad_output * keep)[:, None].to(target_log_probs.dtype)  # (N, 1): 0 if ignored
        grad = torch.empty_like(logits)
        for rows in _blocks(logits.size(0), SmoothedCrossEntropy.ROWS):
            torch.softmax(logits[rows], dim=-1, out=grad[rows])
        grad.sub_(uniform).mul_(weight.to(grad.dtype))  # (softmax - q) * weight, off the target
        if ctx.never is not None:
            grad.index_fill_(1, ctx.never, 0.0)  # p = q = 0 there
        # At the target, p_y - (1 - s) cancels: computed in full precision, not from grad.
        at_target = (target_log_probs.exp() - (1.0 - s) - uniform) * weight
        rows = torch.arange(grad.size(0), device=grad.device)
        grad.index_put_((rows, index.squeeze(1)), at_target.squeeze(1).to(grad.dtype))  # not scatter_: it copies
        return grad, None, None, None, None


def _blocks(n: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


class LabelSmoothingLoss(torch.nn.Module):
    """Cross entropy against the smoothed target; padding positions contribute nothing.

    Returns the *sum* over real target tokens (the trainer divides by the token count of
    the whole, possibly accumulated, batch so every token weighs the same).

    `never`: outputs the model never emits (Generator.never_emitted); epsilon is then
    spread over the other V - 1 - len(never) tokens instead of V - 1. Empty for a model
    trained here, whose loss is unchanged."""

    def __init__(self, vocab_size: int, pad_id: int, epsilon: float = 0.1, never: list[int] | tuple = ()) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.pad_id = pad_id
        self.epsilon = epsilon
        self.never = sorted(set(never))
        columns = vocab_size - len(self.never)
        self.smoothing = torch_smoothing(epsilon, columns) if epsilon > 0 else 0.0

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """logits (B, T, V), target (B, T) -> scalar summed loss."""
        never = torch.tensor(self.never, device=logits.device) if self.never else None
        return SmoothedCrossEntropy.apply(
            logits.reshape(-1, logits.size(-1)), target.reshape(-1), self.smoothing, self.pad_id, never
        )
