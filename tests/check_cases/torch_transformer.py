"""A correct Transformer in the assembled tutorial's convention built on torch.nn.Transformer,
as PyTorch's translation tutorial builds one (token embeddings scaled by sqrt(d_model), a sine
table, nn.Transformer, a linear layer to the target vocabulary), with batch_first=True: it reads
(batch, length, d_model) tensors, as the toolkit hands them."""

import math

import torch
import torch.nn as nn


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout, maxlen=256):
        super().__init__()
        pos = torch.arange(maxlen).unsqueeze(1).float()
        div = torch.exp(-torch.arange(0, d_model, 2).float() * math.log(10000.0) / d_model)
        pe = torch.zeros(maxlen, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.register_buffer("pe", pe.unsqueeze(0))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(x + self.pe[:, : x.size(1)])


class Seq2SeqTransformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, num_layers=3, emb_size=512, nhead=8, dim_feedforward=512,
                 dropout=0.1):
        super().__init__()
        self.emb_size = emb_size
        self.src_tok_emb = nn.Embedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = nn.Embedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout)
        self.transformer = nn.Transformer(emb_size, nhead, num_layers, num_layers, dim_feedforward, dropout,
                                          batch_first=True)
        self.generator = nn.Linear(emb_size, tgt_vocab_size)

    def forward(self, src, trg, src_mask, tgt_mask):
        src_emb = self.positional_encoding(self.src_tok_emb(src) * math.sqrt(self.emb_size))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg) * math.sqrt(self.emb_size))
        causal = nn.Transformer.generate_square_subsequent_mask(trg.size(1), device=trg.device)
        padding = ~src_mask[:, 0]  # (B, S): True at padding
        outs = self.transformer(src_emb, tgt_emb, tgt_mask=causal, src_key_padding_mask=padding,
                                memory_key_padding_mask=padding)
        return self.generator(outs)


def make_model(src_vocab_size, tgt_vocab_size, num_layers=3, emb_size=512, nhead=8, dim_feedforward=512,
               dropout=0.1):
    model = Seq2SeqTransformer(src_vocab_size, tgt_vocab_size, num_layers, emb_size, nhead, dim_feedforward, dropout)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model
