"""The prologue every search shares: encode the source once, keep its padding mask and a
fresh decoder cache, and run the decoder against them step after step."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer_mt.decoding.step import DecoderStep
from transformer_mt.model.cache import DecoderCache
from transformer_mt.model.masks import padding_mask
from transformer_mt.model.transformer import EncoderDecoder


@dataclass
class EncodedSource:
    """What the decoder reads at every step for B rows: memory (B, S, d_model), the encoder
    output; src_mask (B, 1, 1, S); cache, the decoder's incremental state (None: every step
    re-runs the decoder on the whole prefix); step, the decoder's one-position step over its
    weights (None: its modules run every step); needs_mask, whether the step passes src_mask (see
    encode_source)."""

    model: EncoderDecoder
    memory: torch.Tensor
    src_mask: torch.Tensor
    cache: DecoderCache | None
    step: DecoderStep | None = None
    needs_mask: bool = True

    def newest(self, tokens: torch.Tensor) -> torch.Tensor:
        """What the next step feeds of the prefix `tokens` (B, T): with a cache its newest
        position, else all of it."""
        return tokens[:, -1:] if self.cache is not None else tokens

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """Decoder states (B, T, d_model) of `tokens` (B, T): with a cache only the newest
        position(s), whose keys and values are appended to it."""
        if self.step is None or tokens.size(1) != 1 or self.step.attention_hooked():
            return self.model.decode(self.memory, self.src_mask, tokens, cache=self.cache)
        x = self.model.positional(self.model.tgt_embed(tokens), offset=self.cache.length())
        return self.step(x, self.memory, self.src_mask if self.needs_mask else None, self.cache)

    def select(self, rows: torch.Tensor) -> None:
        """Keep rows `rows` (R,) of the memory, the mask and the cache, in place: repeated rows
        expand a sentence to its hypotheses, missing rows drop finished sentences."""
        self.memory, self.src_mask = self.memory.index_select(0, rows), self.src_mask.index_select(0, rows)
        if self.cache is not None:
            self.cache.select(rows)


def encode_source(
    model: EncoderDecoder, src: torch.Tensor, pad_id: int, use_cache: bool = True, step: bool = True
) -> EncodedSource:
    """Encode sources (B, S) padded with `pad_id`, with an empty cache when `use_cache` and the
    model has one (a learner's model, learner/model.py, has none: every step decodes the prefix); each
    cached step runs on `DecoderStep` where it computes what the modules would (`step` False:
    always the modules). An nn.Module hook registered after this call is not seen by the
    step (attention hooks are): register it first."""
    src_mask = padding_mask(src, pad_id)
    memory = model.encode(src, src_mask)
    if not use_cache or not getattr(model, "supports_cache", True):  # a learner's model keeps none
        return EncodedSource(model, memory, src_mask, None)
    decoder_step = DecoderStep.of(model.decoder) if step else None
    # Without padding, no mask is the same arithmetic on the CPU as one allowing every key (its
    # zeros added to no score); a GPU's SDPA takes another kernel without a mask, so it keeps one.
    needs_mask = src.device.type != "cpu" or not bool(src_mask.all())
    return EncodedSource(model, memory, src_mask, model.decoder.init_cache(), decoder_step, needs_mask)
