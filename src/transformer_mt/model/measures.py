"""Measures of a model's weights that the doctor (diagnosis/) and `transformer-mt check`
(check/) both take, written once: the size of the token embeddings as the model adds them
against the positional encoding (section 3.4's sqrt(d_model) is there to make the two of one
size), and weight matrices that are near copies of each other (copy.deepcopy of one module
into many, never re-drawn). Each caller judges the numbers with its own limit."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# The token embeddings as added may be this many times the positional encoding's RMS, for the
# doctor (embedding_scale) and `check` (embedding_init) alike: 4 leaves the positions 1/17 of
# the sum's energy; nn.Embedding's N(0, 1) times sqrt(d_model) is 8 at d_model 32 and 16 at 128,
# Xavier about 1.
EMBEDDING_TO_POSITION_LIMIT = 4.0
SAMPLE = 1 << 16  # entries of each matrix that the correlations read: a copy shows on any part of it


def rms(tensor: torch.Tensor) -> float:
    """Root mean square of every entry."""
    return float(tensor.detach().float().pow(2).mean().sqrt())


@dataclass(frozen=True)
class EmbeddingToPosition:
    """added: the RMS of the token embeddings as the model adds them (times their scale);
    positions: the RMS of what is added for the positions."""

    added: float
    positions: float

    @property
    def ratio(self) -> float:
        return self.added / self.positions

    @property
    def position_share(self) -> float:
        """The positions' share of the sum's energy, for uncorrelated parts."""
        return 1 / (1 + self.ratio ** 2)


def embedding_to_position(token_rows: torch.Tensor, scale: float, positions: torch.Tensor) -> EmbeddingToPosition:
    """token_rows (V, d_model): the embedding rows a sentence can hold (the padding row left
    out by the caller); scale: what the model multiplies them by; positions (P, d_model): the
    positional encoding's rows."""
    return EmbeddingToPosition(rms(token_rows) * scale, rms(positions))


def near_copies(matrices: dict[str, torch.Tensor], limit: float) -> list[tuple[float, str, str]]:
    """(correlation, name, name) of each pair of equally shaped matrices whose entries
    correlate at `limit` or above, highest first (independent draws correlate near 0)."""
    pairs = []
    by_shape: dict[tuple[int, ...], list[str]] = {}
    for name, matrix in matrices.items():
        by_shape.setdefault(tuple(matrix.shape), []).append(name)
    for names in by_shape.values():
        if len(names) < 2:
            continue
        rows = torch.stack([matrices[n].detach().float().reshape(-1)[:SAMPLE] for n in names])  # (M, n)
        rows = rows - rows.mean(1, keepdim=True)
        rows = rows / rows.norm(dim=1, keepdim=True).clamp_min(1e-12)
        correlation = rows @ rows.T  # (M, M)
        for i in range(len(names)):
            for j in range(i + 1, len(names)):
                if correlation[i, j] >= limit:
                    pairs.append((float(correlation[i, j]), names[i], names[j]))
    return sorted(pairs, reverse=True)
