"""Greedy decoding: at every step take the most probable next token."""

from __future__ import annotations

import torch

from transformer_mt.decoding.source import encode_source
from transformer_mt.model.transformer import EncoderDecoder


def max_lengths(src_lengths: torch.Tensor, a: float, b: int) -> torch.Tensor:
    """Longest output allowed per sentence: a * source length + b (paper: source + 50)."""
    return (src_lengths.float() * a).long() + b


@torch.inference_mode()
def greedy_decode(
    model: EncoderDecoder,
    src: torch.Tensor,
    max_len: torch.Tensor | int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    use_cache: bool = True,
    min_len: int = 0,
    banned: tuple[int, ...] = (),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode a batch of sources (B, S) greedily.

    `max_len` is an int or a (B,) tensor of per-sentence limits (eos not counted).
    Returns tokens (B, T): each row the output followed by eos (unless it hit its limit),
    then padding; and scores (B,): the summed log-probabilities of the emitted tokens.
    With `use_cache` each step feeds only the newest token and reuses the keys and values
    of earlier steps; without it every step re-runs the decoder on the whole prefix.
    `min_len` bans eos until that many tokens have been emitted, as in `beam_search`;
    `banned` tokens are never emitted (their log-probabilities, normalised over every
    output, are set to -inf: Hugging Face's rule for pad). Without a cache, finished
    sentences leave the batch: each step re-decodes the prefixes of the others only (a
    learner's model, learner/model.py, decodes so; one sentence that runs to its limit no
    longer keeps the whole batch re-decoding)."""
    batch = src.size(0)
    limits = torch.as_tensor(max_len, device=src.device).expand(batch) + 1  # + eos
    source = encode_source(model, src, pad_id, use_cache)
    banned_ids = torch.tensor(banned, dtype=torch.long, device=src.device)
    ys = torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device)
    scores = torch.zeros(batch, device=src.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    active = torch.arange(batch, device=src.device)  # the rows `source` holds, unfinished at the last step
    for step in range(int(limits.max())):
        step_input = source.newest(ys if active.numel() == batch else ys.index_select(0, active))
        states = source.decode(step_input)
        log_probs = model.generator(states[:, -1])  # (A, V) for the A active rows
        if banned:
            log_probs.index_fill_(1, banned_ids, float("-inf"))
        if step < min_len:
            log_probs[:, eos_id] = float("-inf")
        best, chosen = log_probs.max(dim=-1)
        token = torch.full_like(finished, pad_id, dtype=torch.long).index_copy_(0, active, chosen)
        token = token.masked_fill(finished, pad_id)
        scores.index_add_(0, active, best.masked_fill(finished.index_select(0, active), 0.0))
        ys = torch.cat([ys, token[:, None]], dim=1)
        finished |= (token == eos_id) | (step + 1 >= limits)
        if finished.all():
            break
        if source.cache is None and bool(finished.index_select(0, active).any()):
            keep = (~finished.index_select(0, active)).nonzero()[:, 0]
            source.select(keep)
            active = active.index_select(0, keep)
    return ys[:, 1:], scores
