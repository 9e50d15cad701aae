"""A Transformer in the Annotated Transformer's convention around torch.nn.Transformer: its
attention (nn.MultiheadAttention) holds W^Q, W^K and W^V in one matrix and its layers keep the
feed-forward maps beside the attention, so some checks cannot read it; none may fail it."""

import math
import torch
import torch.nn as nn
import torch.nn.functional as F


def sinusoid(n, d):
    pos = torch.arange(n).unsqueeze(1).float()
    div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    return pe


class Model(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout):
        super().__init__()
        self.d_model = d_model
        self.src_lut = nn.Embedding(src_vocab, d_model)
        self.tgt_lut = nn.Embedding(tgt_vocab, d_model)
        self.register_buffer("pe", sinusoid(256, d_model))
        self.drop = nn.Dropout(dropout)
        self.core = nn.Transformer(d_model, h, N, N, d_ff, dropout, batch_first=True)
        self.proj = nn.Linear(d_model, tgt_vocab)

    def embed(self, lut, x):
        return self.drop(lut(x) * math.sqrt(self.d_model) + self.pe[: x.size(1)])

    def encode(self, src, src_mask):
        return self.core.encoder(self.embed(self.src_lut, src), src_key_padding_mask=~src_mask[:, 0])

    def decode(self, memory, src_mask, tgt, tgt_mask):
        causal = ~tgt_mask[0]
        return self.core.decoder(self.embed(self.tgt_lut, tgt), memory, tgt_mask=causal,
                                 memory_key_padding_mask=~src_mask[:, 0])

    def generator(self, x):
        return F.log_softmax(self.proj(x), dim=-1)


def make_model(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1):
    model = Model(src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model
