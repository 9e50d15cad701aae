"""Recording attention and ablating heads through MultiHeadAttention's hooks: the
recorded weights are those of equation 1, and nothing stays switched on afterwards."""

from __future__ import annotations

import torch

from transformer_mt.common.config import ModelConfig
from transformer_mt.model.attention import MultiHeadAttention, attention
from transformer_mt.model.masks import padding_mask
from transformer_mt.model.recording import ablate_heads, attention_modules, record_attention
from transformer_mt.model.transformer import build_model

D_MODEL, HEADS = 16, 4


def module_and_inputs(seed: int = 0) -> tuple[MultiHeadAttention, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    module = MultiHeadAttention(D_MODEL, HEADS).eval()
    with torch.no_grad():
        module.in_proj.bias.normal_()
    x, memory = torch.randn(2, 5, D_MODEL), torch.randn(2, 7, D_MODEL)
    mask = padding_mask(torch.tensor([[4] * 7, [4] * 3 + [0] * 4]), 0)
    return module, x, memory, mask


def heads_of(x: torch.Tensor) -> torch.Tensor:
    return x.view(x.size(0), x.size(1), HEADS, D_MODEL // HEADS).transpose(1, 2)


def test_recorded_weights_are_those_of_equation_1() -> None:
    """Cross-attention with a padding mask: the recorded weights and inputs equal the
    explicit `attention` of the hand-made projections."""
    module, x, memory, mask = module_and_inputs()
    with torch.no_grad(), record_attention(module) as recorded:
        module(x, memory, mask=mask)
    weight, bias = module.in_proj.weight, module.in_proj.bias
    with torch.no_grad():
        q = heads_of(x @ weight[:D_MODEL].T + bias[:D_MODEL])
        k = heads_of(memory @ weight[D_MODEL : 2 * D_MODEL].T + bias[D_MODEL : 2 * D_MODEL])
        v = heads_of(memory @ weight[2 * D_MODEL :].T + bias[2 * D_MODEL :])
        _, expected = attention(q, k, v, mask)
    torch.testing.assert_close(recorded.weights(module), expected)
    assert recorded.weights(module)[1, :, :, 3:].abs().max() == 0  # padded keys
    got_q, got_k, got_mask = recorded.inputs(module)
    torch.testing.assert_close(got_q, q)
    torch.testing.assert_close(got_k, k)
    assert got_mask is mask


def test_recording_ends_with_the_block() -> None:
    module, x, _, _ = module_and_inputs(1)
    with record_attention(module) as recorded:
        assert module.records_weights
        module(x, is_causal=True)
    assert not module.records_weights
    first = recorded.weights(module)
    assert first.triu(diagonal=1).abs().max() == 0  # the causal mask was folded in
    module(x)  # after the block nothing is recorded
    assert recorded.weights(module) is first


def test_record_attention_hooks_every_module_of_a_model() -> None:
    cfg = ModelConfig(n_layers=2, d_model=D_MODEL, d_ff=32, n_heads=HEADS, src_vocab_size=20, tgt_vocab_size=20,
                      dropout=0.0)
    model = build_model(cfg).eval()
    src, tgt = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 8, 9]])
    with torch.no_grad(), record_attention(model) as recorded:
        model(src, tgt, padding_mask(src, 0))
    modules = attention_modules(model)
    assert len(modules) == 3 * 2
    stacked = recorded.stacked([layer.src_attn for layer in model.decoder.layers])
    assert stacked.shape == (2, HEADS, 3, 4)
    torch.testing.assert_close(stacked.sum(-1), torch.ones(2, HEADS, 3))
    assert not any(module.records_weights for module in modules)


def test_ablating_all_heads_but_one_keeps_that_head_alone() -> None:
    """Cross-attention with heads 0, 1, 3 silenced: W^O applied to head 2's output alone."""
    module, x, memory, mask = module_and_inputs(2)
    with torch.no_grad(), ablate_heads(module, [0, 1, 3]):
        got = module(x, memory, mask=mask)
    with torch.no_grad():
        weight, bias = module.in_proj.weight, module.in_proj.bias
        q = heads_of(x @ weight[:D_MODEL].T + bias[:D_MODEL])
        k = heads_of(memory @ weight[D_MODEL : 2 * D_MODEL].T + bias[D_MODEL : 2 * D_MODEL])
        v = heads_of(memory @ weight[2 * D_MODEL :].T + bias[2 * D_MODEL :])
        scores = (q[:, 2] @ k[:, 2].transpose(-2, -1) / 2.0).masked_fill(~mask[:, 0], float("-inf"))
        head = scores.softmax(-1) @ v[:, 2]  # (B, Tq, d_k)
        merged = torch.zeros(2, 5, HEADS, D_MODEL // HEADS)
        merged[:, :, 2] = head
        expected = module.out_proj(merged.reshape(2, 5, D_MODEL))
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
        assert not torch.allclose(module(x, memory, mask=mask), expected)  # restored after the block
