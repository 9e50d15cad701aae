"""The whole Transformer against torch.nn.Transformer, plus causality and padding."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from transformer_mt.common.config import ModelConfig
from transformer_mt.model import build_model, padding_mask, target_mask
from transformer_mt.model.transformer import EncoderDecoder

PAD = 0


def small_model(norm_first: bool = False, **kw) -> EncoderDecoder:
    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=2, d_model=32, d_ff=64, n_heads=4, dropout=0.0, norm_first=norm_first,
                      src_vocab_size=50, tgt_vocab_size=50, max_positions=64, **kw)
    model = build_model(cfg).eval()
    with torch.no_grad():  # non-trivial biases and norms, so a mis-wired one shows
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".norm." in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def copy_into_reference(model: EncoderDecoder) -> nn.Transformer:
    """An nn.Transformer holding our weights, pre-norm or post-norm as our model is. Its
    stacks end with a LayerNorm: the pre-norm model has one too (copied), the paper's
    post-norm model does not (removed: set to None)."""
    d = model.src_embed.d_model
    layer = model.encoder.layers[0]
    norm_first = layer.sublayer[0].norm_first
    with warnings.catch_warnings():  # "enable_nested_tensor is True, but ... norm_first": turned off below
        warnings.filterwarnings("ignore", message="enable_nested_tensor")
        ref = nn.Transformer(d, layer.self_attn.n_heads, len(model.encoder.layers), len(model.decoder.layers),
                             layer.feed_forward.w_1.out_features, dropout=0.0, batch_first=True,
                             norm_first=norm_first).eval()
    if norm_first:
        assert isinstance(model.encoder.norm, nn.LayerNorm) and isinstance(model.decoder.norm, nn.LayerNorm)
        with torch.no_grad():
            ref.encoder.norm.load_state_dict(model.encoder.norm.state_dict())
            ref.decoder.norm.load_state_dict(model.decoder.norm.state_dict())
    else:
        ref.encoder.norm = None
        ref.decoder.norm = None
    ref.encoder.enable_nested_tensor = ref.encoder.use_nested_tensor = False

    def attn(dst: nn.MultiheadAttention, src) -> None:
        dst.in_proj_weight.copy_(src.in_proj.weight)
        dst.in_proj_bias.copy_(src.in_proj.bias)
        dst.out_proj.load_state_dict(src.out_proj.state_dict())

    with torch.no_grad():
        for theirs, ours in zip(ref.encoder.layers, model.encoder.layers):
            attn(theirs.self_attn, ours.self_attn)
            theirs.linear1.load_state_dict(ours.feed_forward.w_1.state_dict())
            theirs.linear2.load_state_dict(ours.feed_forward.w_2.state_dict())
            theirs.norm1.load_state_dict(ours.sublayer[0].norm.state_dict())
            theirs.norm2.load_state_dict(ours.sublayer[1].norm.state_dict())
        for theirs, ours in zip(ref.decoder.layers, model.decoder.layers):
            attn(theirs.self_attn, ours.self_attn)
            attn(theirs.multihead_attn, ours.src_attn)
            theirs.linear1.load_state_dict(ours.feed_forward.w_1.state_dict())
            theirs.linear2.load_state_dict(ours.feed_forward.w_2.state_dict())
            for k, norm in enumerate((theirs.norm1, theirs.norm2, theirs.norm3)):
                norm.load_state_dict(ours.sublayer[k].norm.state_dict())
    return ref


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.tensor([[5, 6, 7, 8, 9, 3], [10, 11, 3, PAD, PAD, PAD], [12, 13, 14, 15, 3, PAD]])
    tgt = torch.tensor([[2, 20, 21, 22, 23], [2, 24, PAD, PAD, PAD], [2, 25, 26, 27, PAD]])
    return src, tgt


@pytest.mark.parametrize("norm_first, decoder_layers", [(False, 0), (True, 0), (True, 1)])
def test_model_equals_nn_transformer(norm_first: bool, decoder_layers: int) -> None:
    """The same weights in torch.nn.Transformer (post-norm: the paper's; pre-norm:
    norm_first=True) give the same encoder output and the same log-probabilities, with
    source and target padding masks and the causal mask. Embeddings and positional
    encodings are ours, fed to both as the same embedded input. model.decoder_layers 1:
    a decoder shallower than the encoder (nn.Transformer's num_decoder_layers)."""
    model = small_model(norm_first=norm_first, decoder_layers=decoder_layers)
    assert model.encoder.layers[0].sublayer[0].norm_first is norm_first
    assert (len(model.encoder.layers), len(model.decoder.layers)) == (2, decoder_layers or 2)
    ref = copy_into_reference(model)
    src, tgt = batch()
    with torch.no_grad():
        memory = model.encode(src, padding_mask(src, PAD))
        ours = model.generator(model(src, tgt, padding_mask(src, PAD), target_mask(tgt, PAD)))
        src_in, tgt_in = model.positional(model.src_embed(src)), model.positional(model.tgt_embed(tgt))
        ref_memory = ref.encoder(src_in, src_key_padding_mask=src == PAD)
        states = ref(
            src_in, tgt_in,
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(tgt.size(1), dtype=torch.bool),
            src_key_padding_mask=src == PAD, tgt_key_padding_mask=tgt == PAD,
            memory_key_padding_mask=src == PAD,
        )
        theirs = model.generator(states)
    real_src, real = src != PAD, tgt != PAD
    torch.testing.assert_close(memory[real_src], ref_memory[real_src], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)
    # the comparison has teeth: each position's output differs from the next by far more
    # than the tolerance (a mis-wired mask or norm would show)
    assert (ours[real][1:] - ours[real][:-1]).abs().amax(dim=-1).min() > 1e-2


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_is_causal(norm_first: bool) -> None:
    model = small_model(norm_first)
    src, tgt = batch()
    changed = tgt.clone()
    changed[0, 3:] = torch.tensor([30, 31])
    with torch.no_grad():
        a = model(src, tgt, padding_mask(src, PAD))
        b = model(src, changed, padding_mask(src, PAD))
    torch.testing.assert_close(a[0, :3], b[0, :3], atol=1e-6, rtol=0)
    assert not torch.allclose(a[0, 3:], b[0, 3:])


@pytest.mark.parametrize("norm_first", [False, True])
def test_source_padding_changes_nothing(norm_first: bool) -> None:
    model = small_model(norm_first)
    src, tgt = batch()
    padded = torch.cat([src, torch.full((3, 4), PAD)], dim=1)
    with torch.no_grad():
        memory = model.encode(src, padding_mask(src, PAD))
        memory_padded = model.encode(padded, padding_mask(padded, PAD))
        out = model(src, tgt, padding_mask(src, PAD))
        out_padded = model(padded, tgt, padding_mask(padded, PAD))
    real = src != PAD
    torch.testing.assert_close(memory[real], memory_padded[:, : src.size(1)][real], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out, out_padded, atol=1e-6, rtol=1e-5)


def test_weights_are_tied_and_xavier_initialised() -> None:
    model = small_model()
    assert model.generator.proj.weight is model.tgt_embed.lut.weight
    assert model.src_embed is model.tgt_embed
    bound = (6 / (50 + 32)) ** 0.5  # Xavier-uniform for a 50 x 32 matrix
    weight = model.tgt_embed.lut.weight
    assert weight.abs().max() <= bound and weight.std() > bound / 3
    untied = small_model(share_vocab=False, tie_embeddings=False)
    assert untied.src_embed is not untied.tgt_embed
    assert untied.generator.proj.weight is not untied.tgt_embed.lut.weight


def test_generator_gives_log_probabilities() -> None:
    model = small_model()
    src, tgt = batch()
    with torch.no_grad():
        log_probs = model.generator(model(src, tgt, padding_mask(src, PAD)))
    assert log_probs.shape == (3, 5, 50)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(3, 5))


def assert_cached_decoding_equals_full_pass(model: torch.nn.Module) -> None:
    """Decoding one position at a time with the cache gives the full pass' states."""
    src, tgt = batch()
    mask = padding_mask(src, PAD)
    with torch.no_grad():
        memory = model.encode(src, mask)
        full = model.decode(memory, mask, tgt)
        cache = model.decoder.init_cache()
        steps = [model.decode(memory, mask, tgt[:, t : t + 1], cache=cache) for t in range(tgt.size(1))]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("decoder_layers", [0, 1])
def test_cached_decoding_equals_full_pass(decoder_layers: int) -> None:
    assert_cached_decoding_equals_full_pass(small_model(norm_first=True, decoder_layers=decoder_layers))


@pytest.mark.parametrize("activation, function", [("relu", torch.relu), ("swish", torch.nn.functional.silu),
                                                  ("gelu", torch.nn.functional.gelu)])
def test_feed_forward_activation(activation: str, function) -> None:
    from transformer_mt.model.layers import PositionwiseFeedForward

    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(8, 16, 0.0, activation)
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(ffn(x), ffn.w_2(function(ffn.w_1(x))))
    cfg = ModelConfig(n_layers=1, d_model=8, d_ff=16, n_heads=2, activation=activation, src_vocab_size=10,
                      tgt_vocab_size=10, positional_layout="halves")
    model = build_model(cfg)
    assert model.encoder.layers[0].feed_forward.activation == activation
    assert model.generator.never_emitted() == []


def test_learned_positions_replace_the_sinusoid_in_the_model() -> None:
    """model.positional learned: the table is a stored, trained parameter (positional.embedding.weight),
    it keeps its N(0, d_model^-0.5) start through build_model's Xavier pass, every model
    parameter but it is the sinusoidal model's, and cached decoding still equals the full pass."""
    from transformer_mt.model.embeddings import LearnedPositionalEmbedding

    model = small_model(norm_first=True, positional="learned")
    sinusoidal = small_model(norm_first=True)
    assert isinstance(model.positional, LearnedPositionalEmbedding)
    assert set(model.state_dict()) - set(sinusoidal.state_dict()) == {"positional.embedding.weight"}
    assert set(sinusoidal.state_dict()) <= set(model.state_dict())
    table = model.positional.table().detach()
    assert table.shape == (64, 32)
    assert float(table.std()) == pytest.approx(32 ** -0.5, rel=0.1)  # Xavier on (64, 32) would give ~0.144
    src, tgt = batch()
    mask = padding_mask(src, PAD)
    model.zero_grad()
    model.generator(model(src, tgt, mask, target_mask(tgt, PAD))).sum().backward()
    assert model.positional.embedding.weight.grad.abs().sum() > 0
    assert_cached_decoding_equals_full_pass(model)
