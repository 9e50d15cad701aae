"""The incremental state of step-by-step decoding: the keys and values every attention
module has already computed, so that each new step costs one position, not all.

`DecoderCache` is the one owner of the layout. Per decoder layer it holds the keys and
values of masked self-attention, which grow by one position per step, and, optionally,
those of cross-attention, computed once from the encoder output (a decoder-only language
model has none). Beam search reorders and selects rows through its methods alone."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


class KeyValueCache:
    """Keys and values (B, H, T, d_k) of one attention module, kept across decoding steps."""

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    @property
    def filled(self) -> bool:
        """Whether keys and values are held (after the first step)."""
        return self.keys is not None

    @property
    def length(self) -> int:
        """How many key positions are held."""
        return 0 if self.keys is None else self.keys.size(2)

    def extend(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new positions' keys and values (B, H, t, d_k) to those held (self-attention);
        returns all of them (B, H, T + t, d_k)."""
        if self.keys is not None:
            keys = torch.cat([self.keys, keys], dim=2)
            values = torch.cat([self.values, values], dim=2)
        self.keys, self.values = keys, values
        return keys, values

    def store(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Hold keys and values computed once (cross-attention over the encoder output)."""
        self.keys, self.values = keys, values

    def select(self, rows: torch.Tensor) -> None:
        """Keep batch rows `rows` (R,) of the keys and values, in place (rows may repeat)."""
        if self.keys is not None:
            self.keys, self.values = self.keys.index_select(0, rows), self.values.index_select(0, rows)


@dataclass
class LayerCache:
    """The caches of one decoder layer: masked self-attention, and cross-attention (None
    in a decoder without cross-attention)."""

    self_attn: KeyValueCache = field(default_factory=KeyValueCache)
    cross_attn: KeyValueCache | None = field(default_factory=KeyValueCache)


class DecoderCache:
    """The incremental state of a decoder stack: one `LayerCache` per layer, filled by
    `Decoder.forward(..., cache=...)` one step at a time."""

    def __init__(self, n_layers: int, cross_attention: bool = True) -> None:
        self.layers = [
            LayerCache(KeyValueCache(), KeyValueCache() if cross_attention else None) for _ in range(n_layers)
        ]

    def __getitem__(self, layer: int) -> LayerCache:
        return self.layers[layer]

    def length(self) -> int:
        """How many target positions the cache already holds."""
        return self.layers[0].self_attn.length if self.layers else 0

    def reorder(self, rows: torch.Tensor) -> None:
        """Beam search's reordering: keep rows `rows` (R,) of every self-attention cache, in
        place. Cross-attention caches stay: `rows` never leaves a sentence's block of k
        rows, whose encoder keys and values are the same."""
        for layer in self.layers:
            layer.self_attn.select(rows)

    def select(self, rows: torch.Tensor) -> None:
        """Keep rows `rows` (R,) of every cached tensor, in place: repeated rows expand a
        sentence to its k hypotheses, missing rows drop finished sentences."""
        for layer in self.layers:
            layer.self_attn.select(rows)
            if layer.cross_attn is not None:
                layer.cross_attn.select(rows)
