"""The Transformer of "Attention Is All You Need", one component per class, in paper order.

    model/masks.py           padding and subsequent masks (True = may attend)
    model/embeddings.py      embeddings and positional encodings (sections 3.4, 3.5)
    model/attention.py       scaled dot-product and multi-head attention (3.2.1, 3.2.2)
    model/layers.py          position-wise feed-forward, residual + LayerNorm (3.3, 5.4)
    model/dropout.py         dropout with a cheaper CPU mask (5.4)
    model/encoder.py         N encoder layers (3.1)
    model/decoder.py         N decoder layers with cross-attention (3.1)
    model/transformer.py     the whole model and its generator (figure 1); build_model
    model/language_model.py  the decoder alone: a GPT-style language model
    model/cache.py           the keys and values of step-by-step decoding
    model/recording.py       recording attention weights, silencing heads
    model/measures.py        weight measures the doctor and `check` share (embeddings against positions, copies)
"""

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
