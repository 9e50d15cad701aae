"""The adapter docs/check.md shows, around a model of another shape: tutorial.py's Transformer
read as encoder, decoder and `out` (as if it had no forward of the tutorial's shape), given the
Annotated Transformer's encode, decode and generator. `transformer-mt check adapter.py` checks
the model inside it; its mask function is imported, so it is checked too."""

import torch.nn.functional as F
from torch import nn

from tutorial import Transformer as Seq2Seq  # your model
from tutorial import create_masks  # noqa: F401  (optional: your mask function, checked too)


class Checked(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def encode(self, src, src_mask):
        return self.model.encoder(src, src_mask)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        return self.model.decoder(tgt, memory, src_mask, tgt_mask)

    def generator(self, x):
        return F.log_softmax(self.model.out(x), dim=-1)


def make_model(src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout):
    model = Seq2Seq(src_vocab, tgt_vocab, d_model, N, h, d_ff, dropout)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return Checked(model)
