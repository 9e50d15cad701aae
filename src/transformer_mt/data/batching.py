"""Batches of about `max_tokens` tokens with sentences of similar length (paper section
5.1: "Sentence pairs were batched together by approximate sequence length").

A batch's size is counted in padded positions: (longest side + 1) x sentences, the +1
for eos (source, target output) or bos (target input), so no batch's tensors exceed
max_tokens. Sorting by length keeps padding low; the order of batches is shuffled from
(seed, epoch) alone, so a resumed run sees exactly the batches it would have seen.

With `batch_sentences` S > 0 (data.batch_sentences) an epoch is instead cut into batches
of exactly S sentences drawn in a random order, as a DataLoader(batch_size=S, shuffle=True)
gives them (the study notes' batches): the last n % S sentences of an epoch are dropped,
so every batch holds S (a new epoch reshuffles, so none is left out for good); a corpus
of fewer than S sentences makes one batch of all of them.

Sentences are `Sequences`: one flat array of ids plus offsets, memory-mapped from the
prepared data (data/prepare.py), so a corpus of millions of pairs costs a process only
its length arrays and the batch plan (numpy), never a Python list per sentence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from transformer_mt.data.sequences import Sequences, as_sequences
from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    """src (B, S) ids + eos; tgt_in (B, T) bos + ids; tgt_out (B, T) ids + eos, all
    padded with PAD_ID; n_tokens: real target tokens (what the loss is divided by)."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    n_tokens: int

    def to(self, device: torch.device) -> "Batch":
        move = lambda t: t.to(device, non_blocking=True)  # noqa: E731
        return Batch(move(self.src), move(self.tgt_in), move(self.tgt_out), self.n_tokens)


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = PAD_ID, before: int | None = None,
                  after: int | None = None) -> torch.Tensor:
    """Id sequences -> (B, longest) LongTensor, padded on the right; `before`/`after`
    put one extra id (bos / eos) in front of / behind every sequence."""
    extra = (before is not None) + (after is not None)
    out = np.full((len(seqs), max((len(s) for s in seqs), default=0) + extra), pad_id, dtype=np.int64)
    start = int(before is not None)
    for row, seq in enumerate(seqs):
        out[row, start : start + len(seq)] = seq
        if before is not None:
            out[row, 0] = before
        if after is not None:
            out[row, start + len(seq)] = after
    return torch.from_numpy(out)


def collate(src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]]) -> Batch:
    """Subword ids of a batch of pairs -> padded tensors for teacher forcing."""
    source = pad_sequences(src, after=EOS_ID)
    tgt_out = pad_sequences(tgt, after=EOS_ID)
    tgt_in = pad_sequences(tgt, before=BOS_ID)
    return Batch(source, tgt_in, tgt_out, int((tgt_out != PAD_ID).sum()))


@dataclass
class BatchPlan:
    """An epoch's batches as arrays: batch b holds the examples order[bounds[b]:bounds[b+1]],
    and `shuffled` is the order in which the batches are taken."""

    order: np.ndarray
    bounds: np.ndarray
    shuffled: np.ndarray

    def __len__(self) -> int:
        return len(self.shuffled)

    def batch(self, b: int) -> np.ndarray:
        return self.order[self.bounds[b] : self.bounds[b + 1]]

    def batches(self) -> list[list[int]]:
        """Every batch as a list of example indices, in the order they are taken."""
        return [self.batch(b).tolist() for b in self.shuffled.tolist()]


def plan_batches(
    src_lens: Sequence[int], tgt_lens: Sequence[int], max_tokens: int, seed: int = 0, epoch: int = 0
) -> BatchPlan:
    """Cut the examples into batches; every index exactly once.

    Examples are sorted by (target length, source length), ties broken at random, then
    cut greedily so that (longest side + 1) x batch size <= max_tokens (an example
    longer than that alone makes a batch of one); the batches are then shuffled."""
    rng = np.random.default_rng([seed, epoch])
    src = np.asarray(src_lens, dtype=np.int64) + 1
    tgt = np.asarray(tgt_lens, dtype=np.int64) + 1
    order = np.lexsort((rng.random(len(src)), src, tgt))
    sizes = np.maximum(src, tgt)[order].tolist()  # lengths < 257 are cached ints: 8 bytes each
    bounds = [0]
    width = count = 0
    for position, size in enumerate(sizes):
        if count and max(width, size) * (count + 1) > max_tokens:
            bounds.append(position)
            width = count = 0
        count += 1
        width = max(width, size)
    bounds.append(len(sizes))
    shuffled = rng.permutation(len(bounds) - 1)
    return BatchPlan(order.astype(np.int32 if len(order) < 2**31 else np.int64), np.asarray(bounds), shuffled)


def plan_sentence_batches(count: int, batch_sentences: int, seed: int = 0, epoch: int = 0) -> BatchPlan:
    """Cut `count` examples, in a random order drawn from (seed, epoch), into batches of
    exactly `batch_sentences`; the last count % batch_sentences of that order are left out
    (all `count` make one batch when count < batch_sentences). The order is already
    random, so the batches are taken as cut."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(count)
    full = count // batch_sentences
    bounds = np.arange(full + 1) * batch_sentences if full else np.array([0, count])
    return BatchPlan(order.astype(np.int32 if count < 2**31 else np.int64), bounds, np.arange(len(bounds) - 1))


def batch_indices(
    src_lens: Sequence[int], tgt_lens: Sequence[int], max_tokens: int, seed: int = 0, epoch: int = 0
) -> list[list[int]]:
    """`plan_batches` as lists of example indices, in the order they are taken."""
    return plan_batches(src_lens, tgt_lens, max_tokens, seed, epoch).batches()


def padding_fraction(batches: list[list[int]], src_lens: Sequence[int], tgt_lens: Sequence[int]) -> float:
    """Share of padded positions among all positions of source and target tensors."""
    real = padded = 0
    for batch in batches:
        for lens in (src_lens, tgt_lens):
            widths = [lens[i] + 1 for i in batch]
            real += sum(widths)
            padded += max(widths) * len(widths)
    return 1.0 - real / max(padded, 1)


class BatchStream:
    """An endless, resumable stream of training batches, epoch after epoch.

    An optimizer step takes `world_size * accumulate` consecutive batches of the epoch
    order (which depends on the seed alone, not on the rank): rank r takes the r-th
    block of `accumulate` of them. So N processes with `accumulate: k` see exactly the
    batches of one process with `accumulate: N * k`. An epoch is a whole number of
    steps: its last batches that do not fill a step are left out (and a corpus with
    fewer batches than one step repeats them). Batches are token batches of `max_tokens`,
    or, with `batch_sentences` > 0, batches of that many sentences (plan_sentence_batches)."""

    def __init__(
        self,
        src: Sequences | Sequence[Sequence[int]],
        tgt: Sequences | Sequence[Sequence[int]],
        max_tokens: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        accumulate: int = 1,
        batch_sentences: int = 0,
    ) -> None:
        self.src, self.tgt = as_sequences(src), as_sequences(tgt)
        if len(self.src) == 0:
            raise ValueError("BatchStream needs at least one example")
        self.max_tokens, self.batch_sentences, self.seed = max_tokens, batch_sentences, seed
        self.rank, self.world_size, self.accumulate = rank, world_size, accumulate
        self.src_lens, self.tgt_lens = self.src.lengths(), self.tgt.lengths()
        self.epoch, self.position = 0, 0
        self._plan, self._taken = self._epoch_batches(0)

    def _epoch_batches(self, epoch: int) -> tuple[BatchPlan, np.ndarray]:
        """The epoch's plan and the batches of it this rank takes, in order."""
        if self.batch_sentences:
            plan = plan_sentence_batches(len(self.src_lens), self.batch_sentences, self.seed, epoch)
        else:
            plan = plan_batches(self.src_lens, self.tgt_lens, self.max_tokens, self.seed, epoch)
        step, k = self.world_size * self.accumulate, self.accumulate
        usable = max(step, len(plan) // step * step)
        starts = np.arange(0, usable, step)[:, None] + self.rank * k + np.arange(k)[None, :]
        return plan, plan.shuffled[starts.reshape(-1) % len(plan)]

    def __len__(self) -> int:
        """Batches per epoch (of this rank)."""
        return len(self._taken)

    def padding_fraction(self) -> float:
        batches = [self._plan.batch(b).tolist() for b in self._taken.tolist()]
        return padding_fraction(batches, self.src_lens, self.tgt_lens)

    def next_indices(self) -> list[int]:
        """The example indices of the next batch (moves the stream on)."""
        if self.position >= len(self._taken):
            self.epoch, self.position = self.epoch + 1, 0
            self._plan, self._taken = self._epoch_batches(self.epoch)
        indices = self._plan.batch(int(self._taken[self.position])).tolist()
        self.position += 1
        return indices

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        indices = self.next_indices()
        return collate([self.src[i] for i in indices], [self.tgt[i] for i in indices])

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._plan, self._taken = self._epoch_batches(self.epoch)
