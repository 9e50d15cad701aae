"""A GPT-style language model from the paper's own blocks: the decoder without the encoder.

Remove the encoder and each decoder layer's cross-attention from figure 1 and what is left
is a stack of masked self-attention and feed-forward layers over one token sequence, trained
to predict every next token at once (the masked, `is_causal` attention is what makes that one
parallel pass). This is GPT (Radford et al., 2018, 2019): the same `DecoderLayer`,
`Embeddings`, positional module and `Generator` as the translation model, not a copy; with
pre-norm the stack ends in a LayerNorm, and the generator shares the embedding matrix.

    P(x_1 .. x_T) = prod_t P(x_t | x_<t),  P(x_t | x_<t) = softmax(h_{t-1} E^T + b)"""

from __future__ import annotations

import torch
from torch import nn

from transformer_mt.common.config import ModelConfig
from transformer_mt.model.cache import DecoderCache
from transformer_mt.model.decoder import Decoder
from transformer_mt.model.embeddings import Embeddings, LearnedPositionalEmbedding, PositionalEncoding
from transformer_mt.model.transformer import Generator, build_model, init_weights, layer_arguments, positional_module


class DecoderOnly(nn.Module):
    """Embeddings + positions, N decoder layers without cross-attention, the generator."""

    def __init__(
        self,
        decoder: Decoder,
        tgt_embed: Embeddings,
        generator: Generator,
        positional: PositionalEncoding | LearnedPositionalEmbedding,
    ) -> None:
        super().__init__()
        if decoder.cross_attention:
            raise ValueError("a decoder-only model's decoder has no cross-attention")
        self.decoder = decoder
        self.tgt_embed = tgt_embed
        self.generator = generator
        self.positional = positional

    def init_cache(self) -> DecoderCache:
        """An empty incremental state (self-attention keys and values only)."""
        return self.decoder.init_cache()

    def forward(self, tokens: torch.Tensor, cache: DecoderCache | None = None) -> torch.Tensor:
        """tokens (B, T) ids -> states (B, T, d_model); position t sees tokens <= t only.
        With `cache`, `tokens` are the newest positions; the earlier ones come from it."""
        offset = cache.length() if cache is not None else 0
        x = self.positional(self.tgt_embed(tokens), offset=offset)  # (B, T, d_model)
        return self.decoder(x, None, None, None, cache)

    def logits(self, tokens: torch.Tensor, cache: DecoderCache | None = None) -> torch.Tensor:
        """tokens (B, T) -> next-token scores (B, T, vocab): row t scores token t + 1."""
        return self.generator.logits(self(tokens, cache))


def build_language_model(cfg: ModelConfig) -> DecoderOnly:
    """A decoder-only model of `cfg` (model.arch: decoder_only), initialised as the
    translation model is (transformer.init_weights); the generator is tied to the
    embedding when model.tie_embeddings. The vocabulary is model.tgt_vocab_size."""
    if cfg.tgt_vocab_size < 1:
        raise ValueError("model.tgt_vocab_size must be set (from the tokenizer)")
    embed = Embeddings(cfg.tgt_vocab_size, cfg.d_model, scale=cfg.scale_embeddings)
    generator = Generator(cfg.d_model, cfg.tgt_vocab_size)
    decoder = Decoder(layer_arguments(cfg), cfg.n_layers, cfg.norm_first, cross_attention=False)
    model = DecoderOnly(decoder, embed, generator, positional_module(cfg))
    init_weights(model, cfg)
    if cfg.tie_embeddings:
        generator.proj.weight = embed.lut.weight
    return model


def build_any_model(cfg: ModelConfig) -> nn.Module:
    """The model model.arch names: the encoder-decoder (transformer.build_model) or a
    decoder-only language model."""
    if cfg.arch == "decoder_only":
        return build_language_model(cfg)
    return build_model(cfg)
