"""Beam search (paper section 6.1: beam size 4, length penalty alpha = 0.6).

Many sentences are searched at once: the decoder runs on B * k rows, row b * k + j
holding the j-th open hypothesis of sentence b. Each step every open hypothesis is
extended by every token; of the k * V candidates of a sentence the best 2k are kept, so
that even if k of them end with eos there are still k open ones to continue with.

    score(Y) = log P(Y | X) / lp(Y),   lp(Y) = ((5 + |Y|) / 6) ** alpha   (GNMT)

|Y| counts the emitted tokens, eos included. A hypothesis that emits eos stops growing
and joins its sentence's pool of (at most k) finished hypotheses. A sentence is done when
its pool holds k hypotheses and its best open hypothesis, scored at its current length,
does not beat the worst of them (the usual stopping rule; with alpha = 0 it is exact), or
when it reaches its maximum length. Done sentences leave the batch, so the remaining
ones decode on fewer rows.

With `use_cache` the decoder keeps the keys and values of its self-attention and feeds
one new position per step; the keys and values of cross-attention are computed once,
at the first step, from the encoder output. That first step, where every hypothesis is
just bos, runs once per sentence and its state is then copied to the k rows. All
hypotheses of one sentence share the encoder output, so when the beam is reordered only
the self-attention caches move.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer_mt.decoding.source import EncodedSource, encode_source
from transformer_mt.model.transformer import EncoderDecoder


def gnmt_penalty(length: int, alpha: float) -> float:
    """lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, as used in the paper)."""
    return ((5.0 + length) / 6.0) ** alpha


@dataclass
class BeamStep:
    """What one step of `BeamState.step` did, per active sentence (A): its best 2k
    candidates, best first, with their summed log-probs top_scores (A, 2k), the hypothesis
    each extends origin (A, 2k) (index in the sentence's k), the token it adds (A, 2k),
    whether it joined the finished pool finishing (A, 2k); keep (A, k), the candidates that
    stay open; rows (A * k,), the decoder rows those continue from (for the caches)."""

    top_scores: torch.Tensor
    origin: torch.Tensor
    token: torch.Tensor
    finishing: torch.Tensor
    keep: torch.Tensor
    rows: torch.Tensor


class BeamState:
    """The state of one batched beam search over A active sentences (A shrinks)."""

    def __init__(
        self, batch: int, beam: int, limits: torch.Tensor, bos_id: int, pad_id: int, device: torch.device
    ) -> None:
        self.beam, self.pad_id = beam, pad_id
        self.active = torch.arange(batch, device=device)  # original sentence of each active one
        self.limits = limits  # (A,) most emitted tokens per sentence
        self.tokens = torch.full((batch * beam, 1), bos_id, dtype=torch.long, device=device)
        # (A, k) summed log-probs of the open hypotheses; only one copy of bos is open at first
        self.scores = torch.full((batch, beam), float("-inf"), device=device)
        self.scores[:, 0] = 0.0
        width = int(limits.max())
        self.finished_scores = torch.full((batch, beam), float("-inf"), device=device)  # (A, k), best first
        self.finished_tokens = torch.full((batch, beam, width), pad_id, dtype=torch.long, device=device)  # (A, k, L)
        self.rank = torch.arange(2 * beam, device=device)  # of the 2k candidates kept per sentence
        self.in_beam = self.rank < beam  # candidates ranked below k may finish
        self.first_row = torch.arange(batch, device=device)[:, None] * beam  # (A, 1) row of hypothesis 0

    def step(self, logits: torch.Tensor, length: int, eos_id: int, alpha: float, ban_eos: bool,
             banned: tuple[int, ...] = ()) -> BeamStep:
        """Extend every open hypothesis by one token (`length` = tokens emitted after
        this step), move those ending with eos (or at the length limit) to the pool.
        `logits` (A * k, V) float32 are the generator's scores before the softmax;
        `banned` tokens are never chosen (after the normalisation over all V).
        Returns what the step did: its candidates and the rows that continue."""
        active, k = self.scores.size(0), self.beam
        # log P(token | prefix) = logit - logsumexp(logits): normalise only the candidates
        normalizer = logits.logsumexp(dim=1, keepdim=True)
        if banned:
            logits[:, list(banned)] = float("-inf")
        if ban_eos:
            logits[:, eos_id] = float("-inf")
        # the best 2k extensions of each hypothesis hold the best 2k of its sentence
        row_scores, row_tokens = logits.topk(min(2 * k, logits.size(1)), dim=1)  # (A * k, w)
        width = row_scores.size(1)
        candidates = (self.scores.view(-1, 1) + (row_scores - normalizer)).view(active, k * width)
        top_scores, top_index = candidates.topk(2 * k, dim=1)  # (A, 2k), best first
        origin, token = top_index // width, row_tokens.view(active, k * width).gather(1, top_index)
        is_eos = token.eq(eos_id)
        at_limit = (length >= self.limits)[:, None]
        finishing = (is_eos | at_limit) & self.in_beam & top_scores.isfinite()
        if finishing.any():
            self._finish(top_scores, origin, token, finishing, length, alpha)
        # the k best candidates that did not emit eos stay open (at most k emitted eos)
        keep = (is_eos.long() * 2 * k + self.rank).argsort(dim=1)[:, :k]
        self.scores = top_scores.gather(1, keep)
        rows = (origin.gather(1, keep) + self.first_row).view(-1)
        self.tokens = torch.cat([self.tokens.index_select(0, rows), token.gather(1, keep).view(-1, 1)], dim=1)
        return BeamStep(top_scores, origin, token, finishing, keep, rows)

    def _finish(
        self, top_scores: torch.Tensor, origin: torch.Tensor, token: torch.Tensor,
        finishing: torch.Tensor, length: int, alpha: float,
    ) -> None:
        """Merge the finishing candidates into the pool of the k best finished ones."""
        active, k = self.scores.size(0), self.beam
        rows = (origin + self.first_row).view(-1)
        emitted = torch.cat([self.tokens.index_select(0, rows)[:, 1:], token.view(-1, 1)], dim=1)
        emitted = emitted.view(active, 2 * k, length)
        width = self.finished_tokens.size(2)
        emitted = torch.nn.functional.pad(emitted, (0, width - length), value=self.pad_id)
        normalized = (top_scores / gnmt_penalty(length, alpha)).masked_fill(~finishing, float("-inf"))
        scores = torch.cat([self.finished_scores, normalized], dim=1)  # (A, 3k)
        order = scores.argsort(dim=1, descending=True, stable=True)[:, :k]
        self.finished_scores = scores.gather(1, order)
        pool = torch.cat([self.finished_tokens, emitted], dim=1)
        self.finished_tokens = pool.gather(1, order[:, :, None].expand(-1, -1, width))

    def done(self, length: int, alpha: float) -> torch.Tensor:
        """(A,) True where a sentence can stop: at its length limit, or k finished and
        no open hypothesis (scored at its current length) beats the worst of them."""
        full = self.finished_scores.isfinite().all(dim=1)
        best_open = self.scores.max(dim=1).values / gnmt_penalty(length, alpha)
        return (length >= self.limits) | (full & (self.finished_scores[:, -1] >= best_open))

    def keep(self, keep: torch.Tensor) -> torch.Tensor:
        """Drop the sentences not in `keep` (A,) bool; returns the rows (A' * k,) kept."""
        k = self.beam
        index = keep.nonzero().view(-1)
        rows = (index[:, None] * k + torch.arange(k, device=index.device)).view(-1)
        self.active, self.limits = self.active[index], self.limits[index]
        self.scores = self.scores[index]
        self.finished_scores, self.finished_tokens = self.finished_scores[index], self.finished_tokens[index]
        self.tokens = self.tokens.index_select(0, rows)
        self.first_row = self.first_row[: index.numel()]
        return rows


def _next_logits(source: EncodedSource, tokens: torch.Tensor) -> torch.Tensor:
    """Generator scores (rows, V), float32, for the position after `tokens` (rows, T)."""
    return source.model.generator.logits(source.decode(tokens)[:, -1]).float()


@torch.inference_mode()
def beam_search(
    model: EncoderDecoder,
    src: torch.Tensor,
    beam: int,
    max_len: torch.Tensor | int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    length_penalty: float = 0.6,
    nbest: int = 1,
    use_cache: bool = True,
    min_len: int = 0,
    banned: tuple[int, ...] = (),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Beam search over a batch of sources (B, S) with `beam` hypotheses per sentence.

    `max_len` is an int or a (B,) tensor of per-sentence limits, as in `greedy_decode`:
    an output holds at most max_len + 1 tokens, its eos included; a hypothesis that
    reaches that length without eos ends there. `min_len` bans eos until at least
    `min_len` tokens have been emitted (min_len = max_len + 1 forces every output to
    exactly that many tokens, which speed benchmarks use). `banned` tokens are never
    emitted: their log-probabilities, normalised over all V outputs, become -inf (what
    Hugging Face does to pad; the translator bans pad and bos).

    Returns tokens (B, nbest, T): each row one hypothesis followed by eos (unless it hit
    its limit), then padding, best first; and scores (B, nbest): the summed
    log-probabilities divided by the length penalty ((5 + |Y|) / 6) ** length_penalty.
    With beam = 1 this is `greedy_decode` (the same tokens; the same scores when
    length_penalty = 0)."""
    if beam < 1 or not 1 <= nbest <= beam:
        raise ValueError(f"need beam >= 1 and 1 <= nbest <= beam, got beam={beam}, nbest={nbest}")
    batch, device = src.size(0), src.device
    limits = torch.as_tensor(max_len, device=device).expand(batch) + 1  # + eos
    alpha = length_penalty
    search = BeamState(batch, beam, limits.clone(), bos_id, pad_id, device)
    source = encode_source(model, src, pad_id, use_cache)
    out_tokens = torch.full((batch, nbest, int(limits.max())), pad_id, dtype=torch.long, device=device)
    out_scores = torch.zeros(batch, nbest, device=device)
    for length in range(1, int(limits.max()) + 1):
        if length == 1:  # all hypotheses of a sentence start from bos: decode it once, then copy
            logits = _next_logits(source, search.tokens[::beam])
            if beam > 1:  # (B, ...) -> (B * k, ...): row b * k + j is hypothesis j of sentence b
                expand = torch.arange(batch, device=device).repeat_interleave(beam)
                source.select(expand)
                logits = logits.index_select(0, expand)
        else:
            step_input = source.newest(search.tokens)
            logits = _next_logits(source, step_input)
        step = search.step(logits, length, eos_id, alpha, ban_eos=length <= min_len, banned=banned)
        if source.cache is not None and beam > 1:
            source.cache.reorder(step.rows)
        done = search.done(length, alpha)
        if done.any():
            finished = search.active[done]
            out_tokens[finished] = search.finished_tokens[done, :nbest]
            out_scores[finished] = search.finished_scores[done, :nbest]
            if done.all():
                break
            source.select(search.keep(~done))
    used = out_tokens.ne(pad_id).flatten(0, 1).any(dim=0).nonzero()
    width = int(used.max()) + 1 if used.numel() else 0
    return out_tokens[:, :, :width], out_scores
