"""Initialisation: every matrix Xavier-uniform, W^Q, W^K, W^V each as its own d x d matrix."""

from __future__ import annotations

import math

import torch

from transformer_mt.config import ModelConfig
from transformer_mt.model.transformer import build_model

D_MODEL, D_FF = 256, 1024


def xavier_std(fan_in: int, fan_out: int) -> float:
    """std of U(-a, a), a = sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio 2010): a / sqrt(3)."""
    return math.sqrt(6.0 / (fan_in + fan_out)) / math.sqrt(3.0)


def test_attention_projections_have_the_spread_of_d_by_d_matrices() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=2, d_model=D_MODEL, d_ff=D_FF, n_heads=4, dropout=0.0,
                                    src_vocab_size=1000, tgt_vocab_size=1000))
    per_matrix = xavier_std(D_MODEL, D_MODEL)  # sqrt(1 / d): 0.0625
    stacked = xavier_std(D_MODEL, 3 * D_MODEL)  # what one (3d, d) init would give: 0.0442
    for layer in [*model.encoder.layers, *model.decoder.layers]:
        for attention in (getattr(layer, "self_attn", None), getattr(layer, "src_attn", None)):
            if attention is None:
                continue
            for w in attention.in_proj.weight.detach().chunk(3, dim=0):  # W^Q, W^K, W^V
                assert abs(float(w.std()) - per_matrix) < 0.03 * per_matrix, (float(w.std()), per_matrix, stacked)
                assert float(w.abs().max()) <= math.sqrt(3) * per_matrix + 1e-6
            assert abs(float(attention.out_proj.weight.detach().std()) - per_matrix) < 0.03 * per_matrix
            assert attention.in_proj.bias.abs().sum() == 0 and attention.out_proj.bias.abs().sum() == 0


def test_feed_forward_and_embeddings_are_xavier_uniform() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=1, d_model=D_MODEL, d_ff=D_FF, n_heads=4, dropout=0.0,
                                    src_vocab_size=1000, tgt_vocab_size=1000))
    linears = [m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and "attn" not in name
               and m.weight.shape in ((D_FF, D_MODEL), (D_MODEL, D_FF))]
    assert linears
    for linear in linears:
        expected = xavier_std(*linear.weight.shape)
        assert abs(float(linear.weight.detach().std()) - expected) < 0.03 * expected
    embedding = model.tgt_embed.lut.weight.detach()
    assert abs(float(embedding.std()) - xavier_std(1000, D_MODEL)) < 0.03 * xavier_std(1000, D_MODEL)


def test_a_normal_embedding_init_gives_scaled_embeddings_unit_variance() -> None:
    """model.embedding_init: normal draws the token embedding from N(0, d_model^-0.5)
    (tensor2tensor, fairseq): times sqrt(d_model) (section 3.4) each entry has variance 1,
    the order of the positional encoding's; the tied generator and source embedding share
    it, and every other matrix keeps its Xavier init (the same draws as the default)."""
    config = dict(n_layers=1, d_model=D_MODEL, d_ff=D_FF, n_heads=4, dropout=0.0, src_vocab_size=8000, tgt_vocab_size=8000)
    torch.manual_seed(0)
    xavier = build_model(ModelConfig(**config))
    torch.manual_seed(0)
    normal = build_model(ModelConfig(**config, embedding_init="normal"))
    weight = normal.tgt_embed.lut.weight.detach()
    assert abs(float(weight.std()) - D_MODEL ** -0.5) < 0.01 * D_MODEL ** -0.5
    assert abs(float(weight.mean())) < 0.01 * D_MODEL ** -0.5 and float(weight.abs().max()) > math.sqrt(3) * D_MODEL ** -0.5
    scaled = normal.tgt_embed(torch.arange(8000).view(1, -1)).detach()
    assert abs(float(scaled.var()) - 1.0) < 0.02
    assert normal.generator.proj.weight is normal.tgt_embed.lut.weight and normal.src_embed is normal.tgt_embed
    # Xavier's spread at V = 8,000 is 4x smaller at d_model 256 (5.6x at 128): the reason the choice exists
    default = float(xavier.tgt_embed.lut.weight.detach().std())
    assert abs(default - xavier_std(8000, D_MODEL)) < 0.03 * xavier_std(8000, D_MODEL) and default < 0.26 * float(weight.std())
    reference = xavier.state_dict()
    changed = {name for name, p in normal.state_dict().items() if not torch.equal(p, reference[name])}
    assert changed == {"src_embed.lut.weight", "tgt_embed.lut.weight", "generator.proj.weight"}
