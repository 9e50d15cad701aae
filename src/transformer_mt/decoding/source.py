"""The prologue every search shares: encode the source once, keep its padding mask and a
fresh decoder cache, and run the decoder against them step after step."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer_mt.model.cache import DecoderCache
from transformer_mt.model.masks import padding_mask
from transformer_mt.model.transformer import EncoderDecoder


@dataclass
class EncodedSource:
    """What the decoder reads at every step for B rows: memory (B, S, d_model), the encoder
    output; src_mask (B, 1, 1, S); cache, the decoder's incremental state (None: every step
    re-runs the decoder on the whole prefix)."""

    model: EncoderDecoder
    memory: torch.Tensor
    src_mask: torch.Tensor
    cache: DecoderCache | None

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """Decoder states (B, T, d_model) of `tokens` (B, T): with a cache only the newest
        position(s), whose keys and values are appended to it."""
        return self.model.decode(self.memory, self.src_mask, tokens, cache=self.cache)

    def select(self, rows: torch.Tensor) -> None:
        """Keep rows `rows` (R,) of the memory, the mask and the cache, in place: repeated rows
        expand a sentence to its hypotheses, missing rows drop finished sentences."""
        self.memory, self.src_mask = self.memory.index_select(0, rows), self.src_mask.index_select(0, rows)
        if self.cache is not None:
            self.cache.select(rows)


def encode_source(model: EncoderDecoder, src: torch.Tensor, pad_id: int, use_cache: bool = True) -> EncodedSource:
    """Encode sources (B, S) padded with `pad_id`, with an empty cache when `use_cache`."""
    src_mask = padding_mask(src, pad_id)
    memory = model.encode(src, src_mask)
    return EncodedSource(model, memory, src_mask, model.decoder.init_cache() if use_cache else None)
