"""Batches of a language model: fixed-length blocks of one token stream (data/text_stream.py).

Block i of an epoch starts at offset + i * block_size, where the offset (0 .. block_size - 1)
is drawn from (seed, epoch), so block boundaries move from epoch to epoch; it holds
block_size + 1 tokens: inputs are its first block_size, targets its last block_size.
Blocks are taken in a random order drawn from (seed, epoch) too, `blocks_per_batch` at a
time, so a resumed run sees the very blocks it would have seen. As for translation
(BatchStream), an optimizer step takes world_size x accumulate consecutive batches and rank
r takes the r-th `accumulate` of them: N processes equal one with N times the accumulation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch


@dataclass
class BlockBatch:
    """inputs (B, T) and targets (B, T) = the inputs shifted by one; n_tokens = B x T."""

    inputs: torch.Tensor
    targets: torch.Tensor
    n_tokens: int

    def to(self, device: torch.device) -> "BlockBatch":
        return BlockBatch(self.inputs.to(device, non_blocking=True), self.targets.to(device, non_blocking=True),
                          self.n_tokens)

    @classmethod
    def of(cls, blocks: np.ndarray) -> "BlockBatch":
        """(B, T + 1) ids -> the batch that predicts each block's tokens 1 .. T from 0 .. T - 1."""
        tokens = torch.from_numpy(blocks.astype(np.int64))
        return cls(tokens[:, :-1], tokens[:, 1:], tokens[:, 1:].numel())


def block_starts(length: int, block_size: int, offset: int = 0) -> np.ndarray:
    """Starts of the whole blocks (block_size + 1 tokens) from `offset` in a stream of
    `length` tokens; a stream shorter than one block gives one shorter block at 0."""
    count = (length - 1 - offset) // block_size
    if count < 1:
        return np.zeros(1, dtype=np.int64)
    return offset + np.arange(count, dtype=np.int64) * block_size


def take_blocks(tokens: np.ndarray, starts: np.ndarray, block_size: int) -> np.ndarray:
    """(B, block_size + 1) ids of the blocks at `starts` (shorter if the stream is)."""
    width = min(block_size + 1, len(tokens))
    return np.stack([np.asarray(tokens[s : s + width]) for s in starts.tolist()])


class BlockStream:
    """An endless, resumable, seeded stream of BlockBatches (see the module docstring)."""

    def __init__(self, tokens: np.ndarray, block_size: int, blocks_per_batch: int, seed: int, rank: int = 0,
                 world_size: int = 1, accumulate: int = 1) -> None:
        if len(tokens) < 2:
            raise ValueError("BlockStream needs a stream of at least 2 tokens")
        self.tokens, self.block_size, self.blocks_per_batch = tokens, block_size, blocks_per_batch
        self.seed, self.rank, self.world_size, self.accumulate = seed, rank, world_size, accumulate
        self.epoch, self.position = 0, 0
        self._batches = self._epoch_batches(0)

    def _epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """The block starts of each batch this rank takes in `epoch`, in order."""
        rng = np.random.default_rng([self.seed, epoch])
        offset = int(rng.integers(self.block_size)) if len(self.tokens) > 2 * self.block_size + 1 else 0
        starts = rng.permutation(block_starts(len(self.tokens), self.block_size, offset))
        n_batches = max(len(starts) // self.blocks_per_batch, 1)
        step, k = self.world_size * self.accumulate, self.accumulate
        usable = max(step, n_batches // step * step)
        taken = (np.arange(0, usable, step)[:, None] + self.rank * k + np.arange(k)[None, :]).reshape(-1)
        per = min(self.blocks_per_batch, len(starts))
        return [starts[(b % n_batches) * per : (b % n_batches) * per + per] for b in taken.tolist()]

    def __len__(self) -> int:
        """Batches per epoch (of this rank)."""
        return len(self._batches)

    def __iter__(self) -> Iterator[BlockBatch]:
        return self

    def __next__(self) -> BlockBatch:
        if self.position >= len(self._batches):
            self.epoch, self.position = self.epoch + 1, 0
            self._batches = self._epoch_batches(self.epoch)
        starts = self._batches[self.position]
        self.position += 1
        return BlockBatch.of(take_blocks(self.tokens, starts, self.block_size))

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._batches = self._epoch_batches(self.epoch)


def validation_blocks(tokens: np.ndarray, block_size: int, blocks_per_batch: int) -> Iterator[BlockBatch]:
    """The whole stream in order, as non-overlapping blocks (the last one shorter), so every
    token but the first is predicted exactly once: what validation loss and perplexity need."""
    starts = np.arange(0, max(len(tokens) - 1, 1), block_size)
    full = [s for s in starts.tolist() if s + block_size + 1 <= len(tokens)]
    for i in range(0, len(full), blocks_per_batch):
        yield BlockBatch.of(take_blocks(tokens, np.asarray(full[i : i + blocks_per_batch]), block_size))
    rest = [s for s in starts.tolist() if s + block_size + 1 > len(tokens) and s + 1 < len(tokens)]
    for s in rest:
        yield BlockBatch.of(np.asarray(tokens[s:])[None, :])
