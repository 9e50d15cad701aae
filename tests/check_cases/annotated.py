"""A correct Transformer in the Annotated Transformer's convention, the API a learner of the
study notes' seed 000 writes (make_model, create_masks, encode, decode, a generator giving
log-probabilities, clones() of one layer): the base that tests/unit/test_check_cases.py
patches one line at a time into the bugs `transformer-mt check` must name. Written for these
tests from the paper; pre-norm with a final LayerNorm, and a LayerNorm with the unbiased std:
two choices the paper leaves open."""

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def clones(module, N):
    """N deep copies of one module (re-drawn by make_model's last loop)."""
    return nn.ModuleList(copy.deepcopy(module) for _ in range(N))


def subsequent_mask(size):
    """(1, size, size): True where position i may look at position j <= i."""
    allowed = torch.ones(size, size, dtype=torch.bool).tril()
    return allowed.unsqueeze(0)


def create_masks(src, tgt, pad):
    """Source (B, 1, S) and target (B, T, T) masks, True = may attend."""
    src_mask = (src != pad).unsqueeze(1)
    tgt_mask = (tgt != pad).unsqueeze(1) & subsequent_mask(tgt.size(1))
    return src_mask, tgt_mask


def attention(query, key, value, mask=None, dropout=None):
    """Equation 1 on (B, h, T, d_k) tensors."""
    scale = 1 / math.sqrt(query.size(-1))
    scores = query @ key.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), -1e9)
    p_attn = torch.softmax(scores, dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return p_attn @ value, p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        self.h, self.d_k = h, d_model // h
        self.linears = clones(nn.Linear(d_model, d_model), 4)  # W^Q, W^K, W^V, W^O
        self.dropout = nn.Dropout(dropout)

    def split(self, x):
        batch, length, _ = x.shape
        return x.view(batch, length, self.h, self.d_k).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        mask = None if mask is None else mask.unsqueeze(1)  # the same mask for every head
        q, k, v = (self.split(project(x)) for project, x in zip(self.linears[:3], (query, key, value)))
        heads, self.attn = attention(q, k, v, mask, self.dropout)
        batch, _, length, _ = heads.shape
        concat = heads.transpose(1, 2).reshape(batch, length, self.h * self.d_k)
        return self.linears[3](concat)


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        hidden = F.relu(self.w_1(x))
        return self.w_2(self.dropout(hidden))


class Embeddings(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.d_model = d_model

    def forward(self, x):
        return math.sqrt(self.d_model) * self.lut(x)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout, max_len=512):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        pos = torch.arange(max_len, dtype=torch.float).unsqueeze(1)
        freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float) / d_model)
        table = torch.zeros(max_len, d_model)
        table[:, 0::2] = torch.sin(pos * freq)
        table[:, 1::2] = torch.cos(pos * freq)
        self.register_buffer("pe", table.unsqueeze(0))

    def forward(self, x):
        return self.dropout(x + self.pe[:, : x.size(1)])


class LayerNorm(nn.Module):
    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        centred = x - x.mean(dim=-1, keepdim=True)
        return self.a_2 * centred / (x.std(dim=-1, keepdim=True) + self.eps) + self.b_2


class SublayerConnection(nn.Module):
    def __init__(self, size, dropout):
        super().__init__()
        self.norm = LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))


class EncoderLayer(nn.Module):
    def __init__(self, size, self_attn, feed_forward, dropout):
        super().__init__()
        self.size = size
        self.self_attn, self.feed_forward = self_attn, feed_forward
        self.sublayer = clones(SublayerConnection(size, dropout), 2)

    def forward(self, x, mask):
        x = self.sublayer[0](x, lambda y: self.self_attn(y, y, y, mask))
        return self.sublayer[1](x, self.feed_forward)


class DecoderLayer(nn.Module):
    def __init__(self, size, self_attn, src_attn, feed_forward, dropout):
        super().__init__()
        self.size = size
        self.self_attn, self.src_attn, self.feed_forward = self_attn, src_attn, feed_forward
        self.sublayer = clones(SublayerConnection(size, dropout), 3)

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.sublayer[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
        x = self.sublayer[1](x, lambda y: self.src_attn(y, memory, memory, src_mask))
        return self.sublayer[2](x, self.feed_forward)


class Encoder(nn.Module):
    def __init__(self, layer, N):
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = LayerNorm(layer.size)

    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class Decoder(nn.Module):
    def __init__(self, layer, N):
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = LayerNorm(layer.size)

    def forward(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)


class Generator(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab)

    def forward(self, x):
        return F.log_softmax(self.proj(x), dim=-1)


class EncoderDecoder(nn.Module):
    def __init__(self, encoder, decoder, src_embed, tgt_embed, generator):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.src_embed, self.tgt_embed = src_embed, tgt_embed
        self.generator = generator

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)

    def encode(self, src, src_mask):
        return self.encoder(self.src_embed(src), src_mask)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        return self.decoder(self.tgt_embed(tgt), memory, src_mask, tgt_mask)


def make_model(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1):
    attn = MultiHeadedAttention(h, d_model, dropout)
    ff = PositionwiseFeedForward(d_model, d_ff, dropout)
    position = PositionalEncoding(d_model, dropout)
    c = copy.deepcopy
    model = EncoderDecoder(
        Encoder(EncoderLayer(d_model, c(attn), c(ff), dropout), N),
        Decoder(DecoderLayer(d_model, c(attn), c(attn), c(ff), dropout), N),
        nn.Sequential(Embeddings(d_model, src_vocab), c(position)),
        nn.Sequential(Embeddings(d_model, tgt_vocab), c(position)),
        Generator(d_model, tgt_vocab),
    )
    for weights in model.parameters():  # re-draw every matrix: the deep copies start equal
        if weights.dim() > 1:
            nn.init.xavier_uniform_(weights)
    return model
