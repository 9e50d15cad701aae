"""The Transformer of "Attention Is All You Need", one component per class, in paper order."""

from transformer_mt.model.attention import MultiHeadAttention, attention
from transformer_mt.model.decoder import Decoder, DecoderLayer
from transformer_mt.model.embeddings import (
    Embeddings, LearnedPositionalEmbedding, PositionalEncoding, sinusoidal_encoding,
)
from transformer_mt.model.encoder import Encoder, EncoderLayer
from transformer_mt.model.layers import PositionwiseFeedForward, SublayerConnection
from transformer_mt.model.masks import padding_mask, subsequent_mask, target_mask
from transformer_mt.model.transformer import EncoderDecoder, Generator, build_model

__all__ = [
    "Decoder", "DecoderLayer", "Embeddings", "Encoder", "EncoderDecoder", "EncoderLayer",
    "Generator", "LearnedPositionalEmbedding", "MultiHeadAttention", "PositionalEncoding", "PositionwiseFeedForward",
    "SublayerConnection", "attention", "build_model", "padding_mask", "sinusoidal_encoding",
    "subsequent_mask", "target_mask",
]
