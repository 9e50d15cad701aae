"""A correct Transformer in the assembled tutorial's convention, from the components of the
study notes' seed 003 (Embedder, PositionalEncoder multiplying by sqrt(d_model), a
MultiHeadAttention with q_linear, k_linear, v_linear and out, FeedForward, Norm) put together
as their tutorial does: forward(src, trg, src_mask, trg_mask) gives logits, get_model(opt,
src_vocab, trg_vocab) builds it, create_masks(src, trg, opt) and nopeak_mask(size, opt) mask.
Written for tests/unit/test_check_cases.py from the paper; post-norm as the paper, no final
Norm, a Norm with the unbiased std."""

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Embedder(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)

    def forward(self, x):
        return self.embed(x)


class PositionalEncoder(nn.Module):
    def __init__(self, d_model, max_seq_len=80, dropout=0.1):
        super().__init__()
        self.d_model = d_model
        self.dropout = nn.Dropout(dropout)
        pe = torch.zeros(max_seq_len, d_model)
        for pos in range(max_seq_len):
            for i in range(0, d_model, 2):
                angle = pos / 10000 ** (i / d_model)
                pe[pos, i], pe[pos, i + 1] = math.sin(angle), math.cos(angle)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        x = x * math.sqrt(self.d_model)
        return self.dropout(x + self.pe[:, : x.size(1)])


class MultiHeadAttention(nn.Module):
    def __init__(self, heads, d_model, dropout=0.1):
        super().__init__()
        self.d_model, self.h, self.d_k = d_model, heads, d_model // heads
        self.q_linear = nn.Linear(d_model, d_model)
        self.k_linear = nn.Linear(d_model, d_model)
        self.v_linear = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(d_model, d_model)

    def attention(self, q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask.unsqueeze(1) == 0, -1e9)
        return self.dropout(F.softmax(scores, dim=-1)) @ v

    def forward(self, q, k, v, mask=None):
        bs = q.size(0)
        q = self.q_linear(q).view(bs, -1, self.h, self.d_k).transpose(1, 2)
        k = self.k_linear(k).view(bs, -1, self.h, self.d_k).transpose(1, 2)
        v = self.v_linear(v).view(bs, -1, self.h, self.d_k).transpose(1, 2)
        heads = self.attention(q, k, v, mask)
        concat = heads.transpose(1, 2).contiguous().view(bs, -1, self.d_model)
        return self.out(concat)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff=2048, dropout=0.1):
        super().__init__()
        self.linear_1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear_2(self.dropout(F.relu(self.linear_1(x))))


class Norm(nn.Module):
    def __init__(self, d_model, eps=1e-6):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mean, std = x.mean(dim=-1, keepdim=True), x.std(dim=-1, keepdim=True)
        return self.alpha * (x - mean) / (std + self.eps) + self.bias


class EncoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout=0.1):
        super().__init__()
        self.norm_1, self.norm_2 = Norm(d_model), Norm(d_model)
        self.attn = MultiHeadAttention(heads, d_model, dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.dropout_1, self.dropout_2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, mask):
        x = self.norm_1(x + self.dropout_1(self.attn(x, x, x, mask)))
        return self.norm_2(x + self.dropout_2(self.ff(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout=0.1):
        super().__init__()
        self.norm_1, self.norm_2, self.norm_3 = Norm(d_model), Norm(d_model), Norm(d_model)
        self.attn_1 = MultiHeadAttention(heads, d_model, dropout)
        self.attn_2 = MultiHeadAttention(heads, d_model, dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.dropout_1, self.dropout_2, self.dropout_3 = (nn.Dropout(dropout) for _ in range(3))

    def forward(self, x, e_outputs, src_mask, trg_mask):
        x = self.norm_1(x + self.dropout_1(self.attn_1(x, x, x, trg_mask)))
        x = self.norm_2(x + self.dropout_2(self.attn_2(x, e_outputs, e_outputs, src_mask)))
        return self.norm_3(x + self.dropout_3(self.ff(x)))


def get_clones(module, N):
    return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])


class Encoder(nn.Module):
    def __init__(self, vocab_size, d_model, N, heads, d_ff, dropout):
        super().__init__()
        self.embed = Embedder(vocab_size, d_model)
        self.pe = PositionalEncoder(d_model, dropout=dropout)
        self.layers = get_clones(EncoderLayer(d_model, heads, d_ff, dropout), N)

    def forward(self, src, mask):
        x = self.pe(self.embed(src))
        for layer in self.layers:
            x = layer(x, mask)
        return x


class Decoder(nn.Module):
    def __init__(self, vocab_size, d_model, N, heads, d_ff, dropout):
        super().__init__()
        self.embed = Embedder(vocab_size, d_model)
        self.pe = PositionalEncoder(d_model, dropout=dropout)
        self.layers = get_clones(DecoderLayer(d_model, heads, d_ff, dropout), N)

    def forward(self, trg, e_outputs, src_mask, trg_mask):
        x = self.pe(self.embed(trg))
        for layer in self.layers:
            x = layer(x, e_outputs, src_mask, trg_mask)
        return x


class Transformer(nn.Module):
    def __init__(self, src_vocab, trg_vocab, d_model, N, heads, d_ff, dropout):
        super().__init__()
        self.encoder = Encoder(src_vocab, d_model, N, heads, d_ff, dropout)
        self.decoder = Decoder(trg_vocab, d_model, N, heads, d_ff, dropout)
        self.out = nn.Linear(d_model, trg_vocab)

    def forward(self, src, trg, src_mask, trg_mask):
        e_outputs = self.encoder(src, src_mask)
        return self.out(self.decoder(trg, e_outputs, src_mask, trg_mask))


def get_model(opt, src_vocab, trg_vocab):
    model = Transformer(src_vocab, trg_vocab, opt.d_model, opt.n_layers, opt.heads, opt.d_ff, opt.dropout)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model


def nopeak_mask(size, opt):
    future = torch.triu(torch.ones(1, size, size), diagonal=1)
    return future == 0


def create_masks(src, trg, opt):
    src_mask = (src != opt.src_pad).unsqueeze(-2)
    trg_mask = (trg != opt.trg_pad).unsqueeze(-2) & nopeak_mask(trg.size(1), opt)
    return src_mask, trg_mask
