"""Variable-length id sequences in one flat array: the form prepared data takes on disk
and in memory. numpy only (no torch), so that encoding workers start light."""

from __future__ import annotations

from typing import Sequence

import numpy as np


class Sequences:
    """Variable-length id sequences stored flat: sequence i is ids[offsets[i]:offsets[i+1]].

    `ids` and `offsets` may be numpy memmaps (shared by every process through the page
    cache) or ordinary arrays (`Sequences.from_lists`, for tests and small data)."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray) -> None:
        self.ids, self.offsets = ids, offsets

    @classmethod
    def from_lists(cls, seqs: Sequence[Sequence[int]]) -> "Sequences":
        lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        ids = np.fromiter((i for s in seqs for i in s), dtype=np.int64, count=int(offsets[-1]))
        return cls(ids, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        """(N,) int32: the length of every sequence."""
        return np.diff(self.offsets).astype(np.int32)

    def tolist(self) -> list[list[int]]:
        return [self[i].tolist() for i in range(len(self))]


def as_sequences(seqs: "Sequences | Sequence[Sequence[int]]") -> Sequences:
    return seqs if isinstance(seqs, Sequences) else Sequences.from_lists(seqs)
