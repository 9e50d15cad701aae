"""Input embeddings and the positional encodings (paper sections 3.4 and 3.5): the
sinusoid, or a learned table (Table 3 row E).

Both positional modules tell their length the same way (`max_positions`) and show what
they add at each position the same way (`table()`), so the translator and the exports
need not know which one a model has."""

from __future__ import annotations

import math

import torch
from torch import nn

from transformer_mt.model.dropout import Dropout


class Embeddings(nn.Module):
    """Token lookup multiplied by sqrt(d_model) (section 3.4).

    The scale puts embeddings initialised with variance 1/d_model (model.embedding_init:
    normal, as tensor2tensor) on the same footing as the positional encodings, whose
    entries lie in [-1, 1]. Xavier, the default, draws them smaller: variance 2 / (V +
    d_model), 1/31 of that for V = 8,000 and d_model = 128 (transformer.initialize).
    """

    def __init__(self, vocab_size: int, d_model: int, padding_idx: int | None = None, scale: bool = True) -> None:
        """`scale` False leaves out the sqrt(d_model) (GPT-2 adds its embeddings unscaled)."""
        super().__init__()
        self.lut = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.d_model = d_model
        self.scale = math.sqrt(d_model) if scale else 1.0

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # (B, T) -> (B, T, d_model)
        return self.lut(tokens) * self.scale


def sinusoidal_encoding(max_positions: int, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """The (max_positions, d_model) table of section 3.5:

        PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
        PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

    Dimensions 2i and 2i+1 share one frequency. `layout` "halves" puts the same sines and
    cosines side by side instead, as Marian (OPUS-MT) models do: PE(pos, i) = sin(pos /
    10000^(2i / d_model)) for i < ceil(d_model / 2), the cosines of the same frequencies in
    the remaining dimensions (Hugging Face's MarianSinusoidalPositionalEmbedding).
    """
    position = torch.arange(max_positions, dtype=torch.float64)[:, None]
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    sines, cosines = torch.sin(position * div_term), torch.cos(position * div_term)[:, : d_model // 2]
    if layout == "halves":
        return torch.cat([sines, cosines], dim=1).float()
    if layout != "interleaved":
        raise ValueError(f"layout must be 'interleaved' or 'halves', got {layout!r}")
    pe = torch.zeros(max_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = sines
    pe[:, 1::2] = cosines
    return pe.float()


class AddedPositions(nn.Module):
    """What both positional modules do with their table: add its rows for the positions
    of x to x, then dropout (section 5.4). A subclass holds the table (`table()`) and a
    `dropout` module."""

    dropout: nn.Module

    def table(self) -> torch.Tensor:
        """(max_positions, d_model): what is added to the embedding at each position."""
        raise NotImplementedError

    @property
    def max_positions(self) -> int:
        """The number of positions the table holds (model.max_positions)."""
        return self.table().size(0)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x: (B, T, d_model); `offset` is the position of x[:, 0] (for cached decoding)."""
        length = x.size(1)
        if offset + length > self.max_positions:
            raise ValueError(
                f"sequence of {offset + length} positions is longer than the model's "
                f"maximum of {self.max_positions} (model.max_positions)"
            )
        # rows offset .. offset + length - 1: (T, d_model), broadcast over the batch
        return self.dropout(x + self.table()[offset : offset + length].to(x.dtype))


class PositionalEncoding(AddedPositions):
    """Adds the sinusoidal encoding to the embeddings, then applies dropout (section 5.4).

    The table is a non-persistent buffer: it is computed, not learned, so checkpoints do
    not store it."""

    def __init__(self, d_model: int, dropout: float, max_positions: int = 1024, layout: str = "interleaved") -> None:
        super().__init__()
        self.dropout = Dropout(dropout)
        self.register_buffer("pe", sinusoidal_encoding(max_positions, d_model, layout), persistent=False)

    def table(self) -> torch.Tensor:
        return self.pe


class LearnedPositionalEmbedding(AddedPositions):
    """A learned (max_positions, d_model) table added to the embeddings in place of the
    sinusoid, then dropout: the paper's Table 3 row E ("positional embedding instead of
    sinusoids"), which it found nearly identical in BLEU. One table serves the encoder
    and the decoder, as the sinusoid it replaces does.

    Initialisation: N(0, d_model^-0.5), as fairseq's learned positions. Each row then has
    norm ~1, while a scaled token embedding (Xavier times sqrt(d_model)) has a norm of
    d_model * sqrt(2 / (vocab + d_model)), about 8 at the presets' sizes: positions start
    as a small random perturbation of the tokens that training grows as it needs, rather
    than noise that drowns the tokens before anything is learned. Positions beyond the
    longest training sequence get no gradient and keep this small random start."""

    def __init__(self, d_model: int, dropout: float, max_positions: int = 1024) -> None:
        super().__init__()
        self.dropout = Dropout(dropout)
        self.embedding = nn.Embedding(max_positions, d_model)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the table from N(0, d_model^-0.5) (see the class docstring for why)."""
        nn.init.normal_(self.embedding.weight, mean=0.0, std=self.embedding.embedding_dim ** -0.5)

    def table(self) -> torch.Tensor:
        return self.embedding.weight
