"""Generation from a decoder-only language model: the next token at a time, greedy or
sampled (temperature, top-k, top-p), with the incremental KV cache.

Sampling reshapes the next-token distribution P(x_t | x_<t) = softmax(z) before drawing:

    temperature T:  softmax(z / T)   (T < 1 sharpens, T > 1 flattens; greedy is T -> 0)
    top-k:          keep the k highest scores, the rest get probability 0
    top-p (nucleus, Holtzman et al., 2020): keep the fewest highest-probability tokens
                    whose probabilities sum to at least p

applied in that order (as Hugging Face's `generate` does)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer_mt.model.language_model import DecoderOnly


@dataclass(frozen=True)
class Sampling:
    """How the next token is drawn: temperature > 0, top_k 0 = off, top_p 1.0 = off."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {self.temperature} (greedy needs none)")
        if self.top_k < 0:
            raise ValueError(f"top-k must be at least 1 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top-p must be in (0, 1], got {self.top_p}")


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """logits (..., V) with every score below the k-th highest of its row set to -inf."""
    if k <= 0 or k >= logits.size(-1):
        return logits
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """logits (..., V) with -inf outside the nucleus: the highest-probability tokens, in
    order, until their probabilities sum to at least p (the first token always stays)."""
    if p >= 1.0:
        return logits
    ordered, order = logits.sort(dim=-1, descending=True)
    probs = ordered.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # the mass of the tokens ranked above each one
    drop_ordered = before >= p
    drop_ordered[..., 0] = False
    drop = drop_ordered.scatter(-1, order, drop_ordered)
    return logits.masked_fill(drop, float("-inf"))


def shaped_logits(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Temperature, then top-k, then top-p, on next-token scores (..., V) in fp32."""
    logits = logits.float() / sampling.temperature
    return top_p_filter(top_k_filter(logits, sampling.top_k), sampling.top_p)


def next_tokens(logits: torch.Tensor, sampling: Sampling | None, generator: torch.Generator | None) -> torch.Tensor:
    """(B, V) scores of the next position -> (B,) ids: the argmax (greedy, sampling None)
    or a draw from the shaped distribution."""
    if sampling is None:
        return logits.argmax(dim=-1)
    probs = shaped_logits(logits, sampling).softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    model: DecoderOnly,
    prompt: torch.Tensor,
    max_new_tokens: int,
    eos_id: int | None = None,
    sampling: Sampling | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """Continue each row of prompt (B, T) by up to `max_new_tokens` ids: (B, n) new ids.
    A row that produced `eos_id` is finished (its later positions repeat eos_id); all
    finished stops early. With the cache each step feeds only the newest token; without,
    the whole sequence again (the same result, the reference the cache is tested against)."""
    if prompt.dim() != 2 or prompt.size(1) == 0:
        raise ValueError("the prompt must be a (B, T) tensor of at least one token")
    room = model.positional.max_positions - prompt.size(1)
    if room < 1:
        raise ValueError(f"a prompt of {prompt.size(1)} tokens leaves no room in the model's "
                         f"{model.positional.max_positions} positions")
    model.eval()
    cache = model.init_cache() if use_cache else None
    sequence, fed = prompt, prompt
    finished = torch.zeros(prompt.size(0), dtype=torch.bool, device=prompt.device)
    new: list[torch.Tensor] = []
    for _ in range(min(max_new_tokens, room)):
        logits = model.logits(fed if use_cache else sequence, cache)[:, -1]  # (B, V)
        token = next_tokens(logits, sampling, generator)
        if eos_id is not None:
            token = token.masked_fill(finished, eos_id)
            finished |= token == eos_id
        new.append(token)
        sequence = torch.cat([sequence, token[:, None]], dim=1)
        fed = token[:, None]
        if eos_id is not None and bool(finished.all()):
            break
    return torch.stack(new, dim=1) if new else prompt.new_zeros(prompt.size(0), 0)
