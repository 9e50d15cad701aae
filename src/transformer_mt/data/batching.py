"""Batches of about `max_tokens` tokens with sentences of similar length (paper section
5.1: "Sentence pairs were batched together by approximate sequence length").

A batch's size is counted in padded positions: (longest side + 1) x sentences, the +1
for eos (source, target output) or bos (target input), so no batch's tensors exceed
max_tokens. Sorting by length keeps padding low; the order of batches is shuffled from
(seed, epoch) alone, so a resumed run sees exactly the batches it would have seen."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from transformer_mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


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


def pad_sequences(seqs: list[list[int]], pad_id: int = PAD_ID) -> torch.Tensor:
    """Lists of ids -> (B, longest) LongTensor, padded on the right."""
    out = torch.full((len(seqs), max((len(s) for s in seqs), default=0)), pad_id, dtype=torch.long)
    for row, seq in enumerate(seqs):
        out[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    return out


def collate(src: list[list[int]], tgt: list[list[int]]) -> Batch:
    """Subword ids of a batch of pairs -> padded tensors for teacher forcing."""
    source = pad_sequences([s + [EOS_ID] for s in src])
    tgt_out = pad_sequences([t + [EOS_ID] for t in tgt])
    tgt_in = pad_sequences([[BOS_ID] + t for t in tgt])
    return Batch(source, tgt_in, tgt_out, int((tgt_out != PAD_ID).sum()))


def batch_indices(
    src_lens: list[int], tgt_lens: list[int], max_tokens: int, seed: int = 0, epoch: int = 0
) -> list[list[int]]:
    """Indices of the examples cut into batches; every index exactly once.

    Examples are sorted by (target length, source length), ties broken at random, then
    cut greedily so that (longest side + 1) x batch size <= max_tokens (an example
    longer than that alone makes a batch of one); the batches are then shuffled."""
    rng = np.random.default_rng([seed, epoch])
    src = np.asarray(src_lens, dtype=np.int64) + 1
    tgt = np.asarray(tgt_lens, dtype=np.int64) + 1
    order = np.lexsort((rng.random(len(src)), src, tgt))
    sizes = np.maximum(src, tgt)[order].tolist()
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for i, size in zip(order.tolist(), sizes):
        if current and max(width, size) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, width = [], 0
        current.append(i)
        width = max(width, size)
    if current:
        batches.append(current)
    return [batches[j] for j in rng.permutation(len(batches)).tolist()]


def padding_fraction(batches: list[list[int]], src_lens: list[int], tgt_lens: list[int]) -> float:
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
    fewer batches than one step repeats them)."""

    def __init__(
        self,
        src: list[list[int]],
        tgt: list[list[int]],
        max_tokens: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        accumulate: int = 1,
    ) -> None:
        if not src:
            raise ValueError("BatchStream needs at least one example")
        self.src, self.tgt, self.max_tokens, self.seed = src, tgt, max_tokens, seed
        self.rank, self.world_size, self.accumulate = rank, world_size, accumulate
        self.src_lens, self.tgt_lens = [len(s) for s in src], [len(t) for t in tgt]
        self.epoch, self.position = 0, 0
        self._batches = self._epoch_batches(0)

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        batches = batch_indices(self.src_lens, self.tgt_lens, self.max_tokens, self.seed, epoch)
        step, k = self.world_size * self.accumulate, self.accumulate
        usable = max(step, len(batches) // step * step)
        return [batches[(start + self.rank * k + j) % len(batches)]
                for start in range(0, usable, step) for j in range(k)]

    def __len__(self) -> int:
        """Batches per epoch (of this rank)."""
        return len(self._batches)

    def padding_fraction(self) -> float:
        return padding_fraction(self._batches, self.src_lens, self.tgt_lens)

    def next_indices(self) -> list[int]:
        """The example indices of the next batch (moves the stream on)."""
        if self.position >= len(self._batches):
            self.epoch, self.position = self.epoch + 1, 0
            self._batches = self._epoch_batches(self.epoch)
        indices = self._batches[self.position]
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
        self._batches = self._epoch_batches(self.epoch)
