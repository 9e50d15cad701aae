"""Label-smoothed cross entropy (paper section 5.4, epsilon_ls = 0.1).

The target it compares against, written out, is `paper_equations.smoothed_distribution`
(1 - epsilon on the target token, epsilon / (V - 1) on each other); the fused loss here
never builds that (N, V) matrix, and its tests check it against that function."""

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


def _accumulation_dtype(logits: torch.Tensor) -> torch.dtype:
    """fp32 for bf16/fp16/fp32 logits, fp64 for fp64 ones."""
    return torch.promote_types(logits.dtype, torch.float32)


class SmoothedCrossEntropy(torch.autograd.Function):
    """Summed cross entropy against the label-smoothed target, computed in blocks of rows,
    with its gradient computed in the same pass.

    With q = (1 - s) onehot(y) + s / V (PyTorch's `label_smoothing` s), the loss of a row is
        -sum_v q_v log softmax(x)_v = logsumexp(x) - (1 - s) x_y - s mean_v(x_v)
    and its gradient is softmax(x) - q. `F.cross_entropy(..., label_smoothing=s)` gives the
    same numbers, but for a (N, V) batch of bf16 logits it converts and stores fp32
    log-probabilities and makes several more full (N, V) passes in the backward, and with an 8k
    vocabulary those passes are a large share of a small model's CPU training step. Here each
    block of `ROWS` rows is converted to fp32 once, stays in the CPU cache, and gives both
    the loss and softmax(x) - q, stored in the logits' dtype; the backward only scales that
    by the incoming gradient (the loss is a sum, so its gradient is a scalar), instead of
    computing the softmax again. Rows whose target is `ignore_index` contribute nothing. `with_grad` False (validation, under no_grad) skips the gradient.

    `scale` multiplies the loss, and its gradient already in the blocks, while they are in the
    cache: the trainer divides the summed loss by the step's target tokens, and the backward
    then gets an incoming gradient of exactly 1 and returns the stored one as it is, instead
    of one more pass over the (N, V) gradient to multiply it. In fp32 the numbers are the ones
    a multiply afterwards gives.

    `never` (a tensor of column ids, or None) names outputs the model gives probability
    exactly 0 (Generator.never_emitted: an imported model's extra bos column): they are
    left out of q, so the mean runs over the other columns and their gradient is 0."""

    ROWS = 64  # rows per block: 64 x 8,000 fp32 (2 MB) stay in a core's L2 cache

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, smoothing: float, ignore_index: int,
                never: torch.Tensor | None = None, with_grad: bool = True, scale: float = 1.0):
        keep = target != ignore_index  # (N,)
        index = target.clamp(min=0)[:, None]  # (N, 1)
        columns = logits.size(-1) - (0 if never is None else never.numel())
        uniform = smoothing / columns
        losses = torch.empty(logits.size(0), dtype=_accumulation_dtype(logits), device=logits.device)
        grad = torch.empty_like(logits) if with_grad else None
        for rows in _blocks(logits.size(0), SmoothedCrossEntropy.ROWS):
            x = logits[rows].to(losses.dtype)  # (R, V), full precision, in the cache
            p = torch.softmax(x, dim=-1)  # (R, V)
            # log Z = max(x) - log(max(p)): max(p) = 1 / sum(exp(x - max(x))) >= 1 / V never underflows
            log_z = x.amax(dim=-1, keepdim=True) - p.amax(dim=-1, keepdim=True).log()  # (R, 1)
            kept_x = x if never is None else x.index_fill(1, never, 0.0)  # ~NEVER_LOGIT leaves the sum
            losses[rows] = (log_z - (1.0 - smoothing) * x.gather(1, index[rows])
                            - smoothing * kept_x.sum(dim=-1, keepdim=True) / columns).squeeze(1)
            if with_grad:
                p.sub_(uniform).scatter_add_(1, index[rows], torch.full_like(log_z, smoothing - 1.0))  # p - q
                if never is not None:
                    p.index_fill_(1, never, 0.0)  # p = q = 0 there
                grad[rows] = p.mul_(scale) if scale != 1.0 else p
        ignored = (~keep).nonzero()[:, 0]
        if with_grad:
            grad.index_fill_(0, ignored, 0.0)
        ctx.grad = grad
        return losses.index_fill_(0, ignored, 0.0).sum() * scale

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        if ctx.grad is None:
            raise RuntimeError("SmoothedCrossEntropy: backward twice (its gradient is scaled in place)")
        grad, ctx.grad = ctx.grad, None
        if float(grad_output) != 1.0:  # the loss was scaled again after this function
            grad.mul_(grad_output.to(grad.dtype))
        return grad, None, None, None, None, None, None


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

    def forward(self, logits: torch.Tensor, target: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        """logits (B, T, V), target (B, T) -> scalar summed loss, times `scale` (the trainer's
        1 / target tokens: cheaper here than multiplying the result, SmoothedCrossEntropy)."""
        never = torch.tensor(self.never, device=logits.device) if self.never else None
        with_grad = torch.is_grad_enabled() and logits.requires_grad
        return SmoothedCrossEntropy.apply(
            logits.reshape(-1, logits.size(-1)), target.reshape(-1), self.smoothing, self.pad_id, never, with_grad,
            scale,
        )
