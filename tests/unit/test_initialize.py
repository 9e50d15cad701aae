"""Initialisation: every matrix Xavier-uniform, W^Q, W^K, W^V each as its own d x d matrix; or
with model.init: pytorch the defaults PyTorch draws; or with model.init: notes those draws
deep-copied as the study notes' make_model copies them."""

from __future__ import annotations

import math

import torch

from transformer_mt.common.config import ModelConfig
from transformer_mt.model.attention import MultiHeadAttention
from transformer_mt.model.layers import PositionwiseFeedForward
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


# ---- model.init: pytorch (the study notes' make_model: no initialisation of its own) ----------
def uniform_std(bound: float) -> float:
    """std of U(-bound, bound): bound / sqrt(3)."""
    return bound / math.sqrt(3.0)


def test_pytorch_init_leaves_the_defaults_pytorch_draws() -> None:
    """model.init: pytorch against the formulas of PyTorch's own initialisation: every
    nn.Linear weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform with
    a = sqrt(5)), every token embedding N(0, 1), LayerNorm gains 1 and biases 0."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=2, d_model=D_MODEL, d_ff=D_FF, n_heads=4, dropout=0.0, src_vocab_size=1000,
                                    tgt_vocab_size=1200, share_vocab=False, tie_embeddings=False, init="pytorch"))
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 2 * 4 + 2 * 6 + 1  # encoder: in, out, w_1, w_2; decoder: 2 attentions + FFN; generator
    for name, linear in linears:
        bound = 1.0 / math.sqrt(linear.in_features)
        weight, bias = linear.weight.detach(), linear.bias.detach()
        assert float(weight.abs().max()) <= bound and float(weight.abs().max()) > 0.99 * bound, name
        assert abs(float(weight.std()) - uniform_std(bound)) < 0.03 * uniform_std(bound), name
        assert float(bias.abs().max()) <= bound
        assert abs(float(bias.std()) - uniform_std(bound)) < 0.2 * uniform_std(bound), name
    for embed in (model.src_embed, model.tgt_embed):
        weight = embed.lut.weight.detach()
        assert abs(float(weight.std()) - 1.0) < 0.01 and abs(float(weight.mean())) < 0.01
    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms and all(bool((m.weight == 1).all()) and bool((m.bias == 0).all()) for m in norms)


def test_pytorch_init_puts_the_positions_under_the_scaled_embedding() -> None:
    """What the notes' initialisation does to the input of the first layer: N(0, 1) entries
    times sqrt(d_model) have an RMS of sqrt(d_model) (11.3 at d_model 128), the sinusoid
    one of sqrt(1/2) = 0.71, 1/16 of it; Xavier's embedding at V = 8,000 is ~1/4 of the
    sinusoid's."""
    d_model, vocab = 128, 8000
    config = dict(n_layers=1, d_model=d_model, d_ff=256, n_heads=4, src_vocab_size=vocab, tgt_vocab_size=vocab)
    ids = torch.arange(vocab).view(1, -1)
    rms = lambda x: float(x.detach().pow(2).mean().sqrt())  # noqa: E731
    torch.manual_seed(0)
    notes = build_model(ModelConfig(**config, init="pytorch"))
    positions = rms(notes.positional.pe[:200])
    assert abs(positions - math.sqrt(0.5)) < 0.01
    assert abs(rms(notes.tgt_embed(ids)) - math.sqrt(d_model)) < 0.01 * math.sqrt(d_model)
    torch.manual_seed(0)
    xavier = build_model(ModelConfig(**config))
    assert abs(rms(xavier.tgt_embed(ids)) - xavier_std(vocab, d_model) * math.sqrt(d_model)) < 0.01
    assert rms(xavier.tgt_embed(ids)) < positions / 3


def test_the_default_init_is_the_xavier_one_bit_for_bit() -> None:
    """model.init: xavier (the default) gives the very weights it gave before the option
    existed: sha256 of the state dicts built from seed 0 then (torch 2.13, CPU), for a joint
    tied model, a separate one with model.embedding_init: normal, and a language model."""
    import hashlib

    from transformer_mt.model.language_model import build_language_model

    def digest(model: torch.nn.Module) -> str:
        h = hashlib.sha256()
        for name, t in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(t.detach().contiguous().numpy().tobytes())
        return h.hexdigest()

    small = dict(d_model=32, d_ff=64, n_heads=4)
    built = []
    for make, config in ((build_model, dict(n_layers=2, src_vocab_size=50, tgt_vocab_size=50)),
                         (build_model, dict(n_layers=1, src_vocab_size=50, tgt_vocab_size=60, share_vocab=False,
                                            tie_embeddings=False, embedding_init="normal")),
                         (build_language_model, dict(arch="decoder_only", n_layers=1, tgt_vocab_size=50))):
        torch.manual_seed(0)
        built.append(digest(make(ModelConfig(**small, **config))))
    assert built == ["8580fd0d74c38a5701745bfb6c77f1ed97548a3f21ba87f9922f6d3ed29973dd",
                     "df0dcddb2f5a9338775972000e4ac7ceea300b77acd05977594d428e63bda5f3",
                     "e70a352084656a12d5b071f927e3e345916734184f395236aa670322912eaafc"]
    torch.manual_seed(0)
    assert digest(build_model(ModelConfig(**small, n_layers=2, src_vocab_size=50, tgt_vocab_size=50,
                                          init="xavier"))) == built[0]


def test_a_language_model_takes_model_init_too() -> None:
    from transformer_mt.model.language_model import build_language_model

    torch.manual_seed(0)
    model = build_language_model(ModelConfig(arch="decoder_only", n_layers=1, d_model=64, d_ff=128, n_heads=4,
                                             tgt_vocab_size=4000, init="pytorch"))
    assert abs(float(model.tgt_embed.lut.weight.detach().std()) - 1.0) < 0.02


def test_the_config_names_a_wrong_init_and_a_normal_embedding_under_pytorch() -> None:
    import pytest

    from transformer_mt.common.config import ConfigError, load_config

    assert load_config("tiny", ["--model.init=pytorch"]).model.init == "pytorch"
    with pytest.raises(ConfigError, match=r"^--model.init=kaiming: must be one of xavier, pytorch, notes$"):
        load_config("tiny", ["--model.init=kaiming"])
    with pytest.raises(ConfigError, match=r"^--model.embedding_init=normal: normal redraws the embedding of "
                                          r"model.init: xavier only; model.init: pytorch keeps"):
        load_config("tiny", ["--model.init=pytorch", "--model.embedding_init=normal"])


def test_notes_init_deep_copies_one_linear_one_attention_and_one_feed_forward() -> None:
    """model.init: notes is the study notes' make_model: `clones(nn.Linear(d, d), 4)` makes
    W^Q = W^K = W^V = W^O (biases too), `c(attn)` puts that attention in every self- and
    cross-attention, `c(ff)` one feed-forward network in every layer; the draws are
    PyTorch's (U(-1/sqrt(d), 1/sqrt(d)) for the Linear, N(0, 1) for the embeddings)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=2, d_model=D_MODEL, d_ff=256, n_heads=4, src_vocab_size=3000,
                                    tgt_vocab_size=2000, share_vocab=False, tie_embeddings=False, init="notes"))
    attentions = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert len(attentions) == 2 + 2 * 2
    weight, bias = attentions[0].out_proj.weight.detach(), attentions[0].out_proj.bias.detach()
    for attention in attentions:
        assert all(torch.equal(part, weight) for part in attention.in_proj.weight.chunk(3))
        assert all(torch.equal(part, bias) for part in attention.in_proj.bias.chunk(3))
        assert torch.equal(attention.out_proj.weight, weight) and torch.equal(attention.out_proj.bias, bias)
    feed_forwards = [m for m in model.modules() if isinstance(m, PositionwiseFeedForward)]
    assert len(feed_forwards) == 4 and all(
        torch.equal(f.w_1.weight, feed_forwards[0].w_1.weight) and torch.equal(f.w_2.bias, feed_forwards[0].w_2.bias)
        for f in feed_forwards)
    bound = 1 / math.sqrt(D_MODEL)
    assert float(weight.abs().max()) <= bound and abs(float(weight.std()) - bound / math.sqrt(3)) < 0.1 * bound
    assert abs(float(model.src_embed.lut.weight.detach().std()) - 1.0) < 0.02
